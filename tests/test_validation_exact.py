"""A time added to every serving iteration of an offline run moves its figures exactly as
`ceiling validate` reads them off the first simulation (times linear in it, rates their
reciprocals): the held-out scoring then needs no second simulation of such a run."""

from __future__ import annotations

import pytest

import ceiling
from ceiling.api.validate import _clockless, _elasticities
from ceiling.model.accuracy import Scored
from ceiling.model.fitted import overridden
from ceiling.validation.corpus import Run, Source

ARGS = dict(spec="h100-sxm", input_tokens=256, output_tokens=64, offline=300,
            max_num_seqs=64, engine="trtllm")  # fmt: skip
NAME = "serve.iteration_s"


def _runs():
    source = Source("s", "serving", "t", "v", "u", "e", "fam", "f.toml")
    return [Run(source, metric, "here", {"model": "llama-3-8b", **ARGS}, metric, 1.0)
            for metric in ("output_tokens_per_s", "ttft_mean_s", "tpot_mean_s")]  # fmt: skip


def test_an_offline_run_follows_an_added_iteration_time_exactly():
    from ceiling.api.validate import _figures

    runs = _runs()
    r = ceiling.serve("llama-3-8b", **ARGS)  # the call validate makes of these runs
    assert _clockless(r)
    shipped = {NAME: r.inputs["iteration_s"]}
    figures = [_figures(run, r) for run in runs]
    read = {(i, base): (e, mode) for i, base, e, mode in
            _elasticities(NAME, runs, [0, 1, 2], r, figures, shipped)}  # fmt: skip
    assert {mode for _, mode in read.values()} == {"linear", "reciprocal"}
    later = shipped[NAME] * 4  # far from the shipped value: no first order would hold
    with overridden({NAME: later}):
        again = ceiling.serve("llama-3-8b", **ARGS)
    for (i, base), (e, mode) in read.items():
        linear, reciprocal = ((NAME,), ()) if mode == "linear" else ((), (NAME,))
        s = Scored("fam", figures[i][base], 1.0, {NAME: e}, linear, reciprocal)
        assert s.at({NAME: later}, shipped) == pytest.approx(_figures(runs[i], again)[base],
                                                             rel=1e-6)  # fmt: skip


def test_a_reciprocal_refit_implies_the_value_that_makes_the_run_exact():
    from ceiling.model.accuracy import refit

    s = Scored("a", predicted=100.0, published=80.0, elasticity={NAME: 50.0},
               reciprocal=(NAME,))  # fmt: skip
    value = refit(NAME, [s], {NAME: 0.003}, 0.0, 1.0, prior=0.003)
    # the prior counts once beside the one source: halfway between the two votes
    implied = 0.003 + (100.0 / 80.0 - 1.0) / 50.0
    assert s.at({NAME: implied}, {NAME: 0.003}) == pytest.approx(80.0)
    assert value == pytest.approx((implied + 0.003) / 2)
