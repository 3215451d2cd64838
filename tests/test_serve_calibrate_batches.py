"""One measured run's requests tell TPOT's fixed time an iteration from its time per sequence
(`model.serve.decode_batches`), and `serve --calibrate` fits the time a sequence from that
one run.

The requests here come from a loop of iterations of known cost a + b·n (n sequences
decoding), or from the simulation under known engine costs written as the JSON
`serve --measure --json` writes, with its requests' times kept."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ceiling
from ceiling.errors import MalformedFile
from ceiling.model import fitted
from ceiling.model.serve import engine
from ceiling.model.serve.decode_batches import beside, decode_batches


def _iterations(a: float, b: float, arrivals, steps: int):
    """First-token and end times, tokens, of requests served by a loop whose iteration of
    n decoding sequences takes a + b·n: a request joins at the next iteration, which gives
    its first token (its prefill costs nothing beside), and ends `steps` iterations later."""
    t, pending, active, first, end = 0.0, list(arrivals), {}, {}, {}
    while pending or active:
        if not active and pending and pending[0] > t:
            t = pending[0]
        while pending and pending[0] <= t:
            i = len(arrivals) - len(pending)
            pending.pop(0)
            active[i] = -1  # decodes from the next iteration on
        t += a + b * sum(1 for left in active.values() if left >= 0)
        for i in list(active):
            if active[i] < 0:
                first[i], active[i] = t, steps
            else:
                active[i] -= 1
                if active[i] == 0:
                    end[i] = t
                    del active[i]
    order = sorted(first)
    return (np.array([first[i] for i in order]), np.array([end[i] for i in order]),
            np.full(len(order), steps + 1))  # fmt: skip


def test_the_mean_batch_beside_each_request_is_its_time_average():
    # r0 decodes over [0, 4), r1 over [2, 6), r2 over [10, 11): alone half of the time each
    n_bar = beside([0.0, 2.0, 10.0], [4.0, 6.0, 11.0])
    assert n_bar == pytest.approx([1.5, 1.5, 1.0])


def test_one_load_recovers_the_fixed_and_the_per_sequence_time():
    a, b = 0.006, 0.002
    arrivals = list(np.cumsum(np.random.default_rng(0).exponential(1 / 12.0, 120)))
    fit = decode_batches(*_iterations(a, b, arrivals, steps=31))
    assert fit.separable and fit.concurrency[1] - fit.concurrency[0] > 1.5
    assert fit.per_iteration_s == pytest.approx(a, rel=0.1)
    assert fit.per_sequence_s == pytest.approx(b, rel=0.1)
    assert fit.errors_s[1] < 0.2 * b
    # a request the host stalled (ten times its TPOT) barely moves the robust fit
    first, end, tokens = _iterations(a, b, arrivals, steps=31)
    end[40] = first[40] + 10 * (end[40] - first[40])
    stalled = decode_batches(first, end, tokens)
    assert stalled.per_sequence_s == pytest.approx(fit.per_sequence_s, rel=0.1)


def test_requests_that_never_overlap_cannot_tell_the_two_apart():
    fit = decode_batches(*_iterations(0.006, 0.002, [5.0 * i for i in range(20)], steps=15))
    assert fit.concurrency == pytest.approx((1.0, 1.0))
    assert not fit.separable and fit.tpot_s(1.0) == pytest.approx(0.008)
    assert decode_batches([0.0], [1.0], [3]) is None  # too few requests to fit
    assert decode_batches([], [], []) is None


RUN = dict(spec="h100-sxm", input_tokens=512, output_tokens=128, num_requests=200)
TRUE = {"serve.iteration_s": 0.012, "serve.request_s": 0.08}
SEQUENCE_S = 0.002


def _truth(rate: float):
    with fitted.overridden(TRUE):
        return ceiling.serve("llama-3-8b", rate=rate, device_scale=1.3, sequence_s=SEQUENCE_S,
                             **RUN)  # fmt: skip


def _as_measured(rate: float) -> dict:
    """A run at `rate` whose measured figures and requests' times are the simulation's under
    the true costs."""
    record = ceiling.serve("llama-3-8b", rate=rate, **RUN).to_dict()
    truth = _truth(rate)
    m, (s,) = truth.metrics, truth.schedules
    record["measured"] = {
        "ttft_s": m.ttft_s.to_json(), "tpot_s": m.tpot_s.to_json(),
        "output_tokens_per_s": m.output_tokens_per_s,
        "per_request": {"start_s": s.arrival_s.tolist(), "first_token_s": s.first_token_s.tolist(),
                        "end_s": s.finish_s.tolist(), "output_tokens": s.output.tolist()},
    }  # fmt: skip
    return record


def test_one_run_with_its_requests_fits_the_time_a_sequence_and_predicts_other_loads():
    measured = _as_measured(2.0)  # about 10 sequences decoding
    got = ceiling.serve("llama-3-8b", rate=1.0, calibrate=measured, **RUN)
    (batches,) = got.calibration.batches
    assert batches.separable and batches.per_sequence_s == pytest.approx(SEQUENCE_S, rel=0.1)
    for rate in (1.0, 4.0):  # 4 to 50 sequences decoding
        got = ceiling.serve("llama-3-8b", rate=rate, calibrate=measured, **RUN)
        assert got.calibration.sequence_s == pytest.approx(SEQUENCE_S, rel=0.25)
        truth = _truth(rate).metrics
        assert got.metrics.tpot_s.p50 == pytest.approx(truth.tpot_s.p50, rel=0.05)
        assert got.metrics.ttft_s.p50 == pytest.approx(truth.ttft_s.p50, rel=0.05)
    # the same run without its requests' times: no time a sequence, TPOT missed at 4 req/s
    plain = {**measured, "measured": {k: v for k, v in measured["measured"].items()
                                      if k != "per_request"}}  # fmt: skip
    old = ceiling.serve("llama-3-8b", rate=4.0, calibrate=plain, **RUN)
    # (the shipped time a sequence kept)
    assert old.calibration.sequence_s == engine.SEQUENCE_S and old.calibration.batches == (None,)
    assert abs(old.metrics.tpot_s.p50 / _truth(4.0).metrics.tpot_s.p50 - 1) > 0.2


CLI = ("serve", "llama-3-8b", "--spec", "h100-sxm", "--input-tokens", "512", "--output-tokens",
       "128", "--num-prompts", "200", "--request-rate", "2")  # fmt: skip


@pytest.mark.parametrize(("rate", "narrow"), [(2.0, False), (0.01, True)])
def test_the_command_line_says_what_the_requests_told(cli, tmp_path, rate, narrow):
    # at 2 req/s about 10 sequences decode beside each other; at 1 in 100 s nearly all decode alone
    (tmp_path / "m.json").write_text(json.dumps(_as_measured(rate)))
    code, out, err = cli(*CLI, "--calibrate", tmp_path / "m.json")
    assert code == 0, err
    said = " ".join(out.split())
    assert "sequences decoding (200 requests)" in said and "a sequence" in said
    assert ("too narrow a range" in said) == narrow and ("one fixed cost" in said) == narrow


def test_a_run_whose_requests_are_not_columns_is_refused():
    broken = _as_measured(2.0)
    broken["measured"]["per_request"]["end_s"] = broken["measured"]["per_request"]["end_s"][:-1]
    with pytest.raises(MalformedFile, match="per_request"):
        ceiling.serve("llama-3-8b", rate=2.0, calibrate=broken, **RUN)
