"""`ceiling.validate()`: every published run of the validation corpus predicted as a user
would ask for it (`ceiling.plan`, `ceiling.decode`, `ceiling.serve` with the run's own
arguments), scored in-sample and leave-one-source-out, by regime."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ceiling.api.arguments import checked
from ceiling.api.result import Result
from ceiling.errors import CeilingError
from ceiling.validation.features import decode_features, serving_features, training_features

STEP = 0.05  # the relative step of a constant for its elasticity: ln(1.05)


@dataclass(frozen=True)
class ValidateResult(Result):
    """The corpus scored: `regimes` (per regime: cases, sources, median and p90 |error|
    in-sample and leave-one-source-out), `rows` (each run, each figure), `constants` (each
    fitted constant: its value, the sources it came from, its refit on every run) and the
    runs ceiling `refused` with the reason."""

    regimes: list[Any]
    rows: list[dict]
    constants: list[dict]
    refused: list[dict]
    sources: int  # source documents
    seconds: float
    families: int = 0  # independent sources: versions of one document are one
    title = "Validation against published runs"

    def heading(self) -> str:
        return (
            f"{len({r['run'] for r in self.rows})} published figures from {self.sources} "
            f"documents of {self.families} independent sources, scored leave-one-source-out"
        )

    def record(self) -> dict[str, Any]:
        return {
            "regimes": [g.to_json() for g in self.regimes],
            "rows": self.rows,
            "constants": self.constants,
            "refused": self.refused,
            "sources": self.sources,
            "families": self.families,
            "seconds": self.seconds,
            "errors_are": "predicted / published − 1; |error| medians and p90s as fractions",
        }


def _call(kind: str, args: dict):
    """The API call a run of `kind` asks for, with its own arguments."""
    args = dict(args)
    model = args.pop("model")
    if kind == "training":
        from ceiling.api.plan import plan

        args.setdefault("headroom", 0.0)
        args.setdefault("moe_dispatcher", "alltoall")
        args.update(_as_published(args))
        return plan(model, args.pop("gpus"), top=1, **args)
    if kind == "decode":
        from ceiling.api.decode import decode

        r = decode(model, **args)
        if not r.expected:
            raise CeilingError("the batch does not fit on the device")
        return r
    from ceiling.api.serve import serve

    return serve(model, **args)


def _as_published(args: dict) -> dict:
    """The run's pins with every free feature it does not name held off (`features`)."""
    from ceiling.model.plan.axes import parse_fixed
    from ceiling.model.plan.features import as_published

    text = args.pop("fixed", None) or ""
    pins = parse_fixed(text)
    # The dispatcher is the run's moe_dispatcher (alltoall where it names none).
    held = as_published({**pins, "dispatcher": args["moe_dispatcher"]})
    added = [
        f"{k}={'on' if v else 'off'}"
        for k, v in held.items()
        if k not in pins and k != "dispatcher"
    ]
    return {"fixed": ",".join(filter(None, [text, *added]))}


def _figures(run, r) -> dict[str, float]:
    """The run's metric from the API's result, by regime family."""
    if run.kind == "training":
        best, n = r.best, r.cluster.devices
        return {
            "training": {
                "step_time_s": best.step_time_s,
                "tokens_per_s_per_gpu": best.tokens_per_s / n,
                "hw_tflops_per_gpu": best.hw_tflops_per_device,
                "model_tflops_per_gpu": best.mfu * r.cluster.peak_flops_per_s / 1e12,
                "megatron_tflops_per_gpu": _megatron_tflops(r),
                "mfu": best.mfu,
            }[run.metric]
        }
    if run.kind == "decode":
        e, c = r.expected[0], r.ceiling.rows[0]
        if run.metric == "tokens_per_s":
            return {"decode expected": e.tokens_per_s, "decode ceiling": c.tokens_per_s}
        return {"decode expected": 1e3 * e.step_s, "decode ceiling": 1e3 * c.batch / c.tokens_per_s}
    m = r.metrics
    if run.metric in ("output_tokens_per_s", "requests_per_s"):
        return {"serving throughput": getattr(m, run.metric)}
    what, stat = run.metric.removesuffix("_s").split("_")
    return {"serving latency": getattr(getattr(m, f"{what}_s"), stat)}


def _megatron_tflops(r) -> float:
    """TFLOP/s per GPU as Megatron-LM logs them, at the plan's step time."""
    from ceiling.model.plan.costs import megatron_model_flops_per_token

    tokens = r.job.global_batch * r.job.seq_len
    flops = megatron_model_flops_per_token(r.model, r.job.seq_len) * tokens
    return flops / (r.best.step_time_s * r.cluster.devices) / 1e12


def _features(kind: str, r) -> tuple[str, tuple[str, ...]]:
    """(device key, features) of a prediction."""
    if kind == "training":
        return r.cluster.device.key, training_features(r.model, r.best, r.job.seq_len,
                                                       r.cluster.device)  # fmt: skip
    if kind == "decode":
        return r.device.key, decode_features(r.model, r)
    return r.device.key, serving_features(r.model, r)


def _needs_elasticity(f, run, device: str) -> bool:
    """Whether a constant's effect on this run is needed: it enters the run, and the run is
    of the kind the constant is refit on, or of a source it came from."""
    engine = run.args.get("engine", "generic") if run.kind == "serving" else None
    if not f.enters(run.kind, device, engine):
        return False
    return run.kind == f.kind.split(",")[0] or run.source.family in f.sources


# constants added as they are to every request's TTFT and end-to-end latency, after the
# simulation: their effect on a figure needs no second simulation
ADDED_TO_LATENCY = ("serve.request_s",)
# constants added to every serving iteration: their effect read off the simulated schedules
# with every iteration that much longer, its decisions kept (first order, as the refit is)
# (serve.sequence_s: that much for each sequence decoding in the iteration)
ADDED_TO_ITERATIONS = ("serve.iteration_s", "serve.sequence_s")


def _with_iterations_longer(r, name: str, step: float):
    """A stand-in of serving result `r` whose metrics have `step` more of constant `name`
    (one of ADDED_TO_ITERATIONS) in each iteration."""
    from types import SimpleNamespace

    from ceiling.model.serve.engine import with_iteration_time_added
    from ceiling.model.serve.metrics import summarize

    per_sequence = name == "serve.sequence_s"
    moved = with_iteration_time_added(r.schedules, 0.0 if per_sequence else step,
                                      step if per_sequence else 0.0)  # fmt: skip
    return SimpleNamespace(metrics=summarize(moved, r.request_s))


def predict_group(runs: list, shipped: dict[str, float]) -> list:
    """Runs that share one API call: each run's (figures, features, device, elasticities by
    regime family, the constants each figure follows exactly), or the refusal's text. One
    call with the constants as shipped, one more per constant the runs need the elasticity
    of that cannot be read off the first."""
    from ceiling.model.fitted import DECLARED

    kind = runs[0].kind
    try:
        r = _call(kind, runs[0].args)
        device, features = _features(kind, r)
        figures = [_figures(run, r) for run in runs]
        elastic: list[dict[str, dict[str, float]]] = [{b: {} for b in f} for f in figures]
        # the constants each figure follows exactly: "linear" or "reciprocal" (`Scored`)
        exact: list[dict[str, dict[str, str]]] = [{b: {} for b in f} for f in figures]
        for name, f in DECLARED.items():
            needing = [i for i, run in enumerate(runs) if _needs_elasticity(f, run, device)]
            for i, base, e, mode in _elasticities(name, runs, needing, r, figures, shipped):
                elastic[i][base][name] = e
                if mode:
                    exact[i][base][name] = mode
    except CeilingError as exc:
        return [str(exc)] * len(runs)
    return [(figures[i], features, device, elastic[i], exact[i]) for i in range(len(runs))]


def _elasticities(name: str, runs: list, needing: list[int], r, figures: list, shipped: dict):
    """(run index, regime family, elasticity, None or the exact mode) of constant `name` for
    the runs `needing` it: added latencies and, where the decisions do not depend on the
    clock, iteration times exactly; else from a second prediction with it STEP larger."""
    from ceiling.model.fitted import overridden

    if not needing:
        return
    if name in ADDED_TO_LATENCY:  # exact without a second call: v(c) = v0 + c − c0
        for i in needing:
            for base, v0 in figures[i].items():
                if base == "serving latency" and not runs[i].metric.startswith("tpot"):
                    yield i, base, 1.0 / v0, "linear"  # per second (`Scored.linear`)
        return
    clockless = False
    if name in ADDED_TO_ITERATIONS and getattr(r, "schedules", None) is not None:
        step = shipped[name] * STEP
        moved, clockless = _with_iterations_longer(r, name, step), _clockless(r)
    else:
        with overridden({name: shipped[name] * (1 + STEP)}):
            moved = _call(runs[0].kind, runs[0].args)
    for i in needing:
        for base, v1 in _figures(runs[i], moved).items():
            v0 = figures[i][base]
            if not (v0 > 0 and v1 > 0):
                continue
            if clockless:  # exact: times linear in the added time, rates their reciprocals
                time = base == "serving latency"
                yield (i, base, ((v1 / v0 if time else v0 / v1) - 1) / step,
                       "linear" if time else "reciprocal")  # fmt: skip
                continue
            e = math.log(v1 / v0) / math.log(1 + STEP)
            if abs(e) > 1e-4:
                yield i, base, e, None


def _clockless(r) -> bool:
    """Whether a serving run's decisions do not depend on the clock (every request there at
    time 0): a time added to every iteration then moves each request's times by it once per
    iteration before them, exactly."""
    return all(s.warmup == 0 and not s.arrival_s.any() for s in r.schedules)


def _shipped() -> dict[str, float]:
    """The value in use of every declared fitted constant (read where it lives)."""
    from ceiling.model.cluster import node_defaults
    from ceiling.model.decode_expected import bandwidth_share
    from ceiling.model.fitted import DECLARED
    from ceiling.model.fitted import value as fitted_value
    from ceiling.model.serve.engine import host_share

    out = {}
    for name in DECLARED:
        if name == "decode.bandwidth_share":
            out[name] = bandwidth_share()

        elif name == "serve.iteration_s":
            from ceiling.model.serve.engine import iteration_s

            out[name] = iteration_s()
        elif name == "serve.sequence_s":
            from ceiling.model.serve.engine import sequence_s

            out[name] = sequence_s()
        elif name == "serve.request_s":
            from ceiling.model.serve.engine import REQUEST_S

            out[name] = fitted_value(name, REQUEST_S)
        elif name.startswith("serve.host_share."):
            out[name] = host_share(name.rsplit(".", 1)[1])
        elif name.startswith("plan.matmul_efficiency."):
            out[name] = float(node_defaults(name.split(".", 2)[2])["matmul_efficiency"])
    return out


def _in_workers(function: Callable, items: list, workers: int | None):
    """(index, function(*item)) for each item, in worker processes when there are several
    (forked: they inherit the loaded corpus and modules), in the order they complete."""
    n = workers if workers is not None else min(os.cpu_count() or 1, 4)
    if n <= 1 or len(items) < 8:
        yield from ((i, function(*item)) for i, item in enumerate(items))
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ProcessPoolExecutor(n, mp_context=context) as pool:
        futures = {pool.submit(function, *item): i for i, item in enumerate(items)}
        for fut in as_completed(futures):
            yield futures[fut], fut.result()


def predict_with(runs: list, bases: list[str], values: dict) -> list[float | None]:
    """The figures (of regime families `bases`) of runs that share one call, with the
    constants at `values`."""
    from ceiling.model.fitted import overridden

    try:
        with overridden(values):
            r = _call(runs[0].kind, runs[0].args)
    except CeilingError:
        return [None] * len(runs)
    return [_figures(run, r).get(base) for run, base in zip(runs, bases, strict=True)]


def _runs(runs, kinds: str | None) -> list:
    """The corpus runs to score: of `runs` (a file, a folder or several; the built-in corpus
    when None), of `kinds` only when given."""
    from ceiling.errors import InvalidInput
    from ceiling.validation import corpus

    paths = None if runs is None else [runs] if isinstance(runs, str | Path) else list(runs)
    every = corpus.load(paths)
    if kinds:
        wanted = {k.strip() for k in kinds.split(",") if k.strip()}
        if unknown := wanted - set(corpus.KINDS):
            raise InvalidInput(f"kinds: {', '.join(sorted(unknown))} not among {corpus.KINDS}")
        every = [r for r in every if r.kind in wanted]
    if not every:
        raise InvalidInput("no runs to validate")
    return every


def _score(every: list, shipped: dict, workers, progress) -> tuple[list, list]:
    """(scored: (run, regime family, features, `accuracy.Scored`) for every figure, refused:
    the runs ceiling refuses, with why). Runs sharing one call are predicted once; the
    slowest (serving) go to the workers first, so they end together."""
    from ceiling.model import accuracy

    groups: dict[str, list] = {}
    for run in every:
        key = json.dumps([run.kind, run.args], sort_keys=True, default=str)
        groups.setdefault(key, []).append(run)
    order = sorted(groups.values(), key=lambda g: g[0].kind != "serving")
    scored: list[tuple[Any, str, tuple, accuracy.Scored]] = []
    refused, done = [], 0
    for k, outcome in _in_workers(predict_group, [(g, shipped) for g in order], workers):
        for run, out in zip(order[k], outcome, strict=True):
            if isinstance(out, str):
                refused.append({"run": run.key, "source": run.source.id, "reason": out})
                continue
            figures, features, _, elastic, exact = out
            for base, value in figures.items():
                modes = exact[base]
                linear = tuple(n for n, m in modes.items() if m == "linear")
                reciprocal = tuple(n for n, m in modes.items() if m == "reciprocal")
                s = accuracy.Scored(run.source.family, value, run.published, elastic[base],
                                    linear, reciprocal)  # fmt: skip
                scored.append((run, base, features, s))
        done += len(order[k])
        if progress:
            progress(done, len(every), order[k][0].name)
    return scored, refused


def _held_out(scored: list, shipped: dict, workers) -> tuple[list[float], list[dict]]:
    """Each figure's leave-one-source-out error and the constant values it was scored with:
    to first order, or predicted again where a refit is far from the shipped value."""
    from ceiling.model import accuracy
    from ceiling.model.fitted import DECLARED

    scores = [s for *_, s in scored]
    values = accuracy.loso_values(scores, DECLARED, shipped)
    loso = [s.at(v, shipped) / s.published - 1.0 for s, v in zip(scores, values, strict=True)]
    far: dict[str, list[int]] = {}
    for i, v in enumerate(values):
        if not accuracy.near(v, shipped, exact=ADDED_TO_LATENCY + scores[i].exact):
            run = scored[i][0]
            key = json.dumps([run.kind, run.args, v], sort_keys=True, default=str)
            far.setdefault(key, []).append(i)
    groups = list(far.values())
    items = [([scored[i][0] for i in g], [scored[i][1] for i in g], values[g[0]]) for g in groups]
    for k, figures in _in_workers(predict_with, items, workers):
        for i, figure in zip(groups[k], figures, strict=True):
            if figure:
                loso[i] = figure / scored[i][3].published - 1.0
    return loso, values


def _constants(scored: list, shipped: dict, kinds: set[str]) -> list[dict]:
    """Each declared constant that enters the kinds scored: its value, where it came from,
    its prior and its refit on every run."""
    from ceiling.model import accuracy
    from ceiling.model.fitted import DECLARED

    scores = [s for *_, s in scored]
    return [
        {
            "name": name,
            "value": shipped[name],
            "sources": list(f.sources),
            "prior": f.prior,
            "why": f.why,
            "refit_on_every_run": accuracy.refit(name, scores, shipped, f.low, f.high, f.prior),
        }
        for name, f in DECLARED.items()
        if kinds & set(f.kind.split(","))
    ]


@checked
def validate(
    runs: Path | str | list | None = None,
    *,
    kinds: str | None = None,
    workers: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> ValidateResult:
    """Predict every published run of the validation corpus (or of `runs`: a corpus file or
    folder in the same format, `ceiling.validation.corpus`) as a user would ask for it, and
    score the predictions against the published figures by regime: median and p90
    |predicted / published − 1|, in-sample and leave-one-source-out (every constant chosen
    from a source refit without it, `ceiling.model.fitted`). `kinds` ("training,decode")
    limits the kinds scored; `workers` processes predict in parallel (default: the cores, at
    most 4); `progress(done, total, name)` is called as runs are predicted."""
    import time

    from ceiling.errors import InvalidInput
    from ceiling.model import accuracy

    if workers is not None and (isinstance(workers, bool) or workers < 1):
        raise InvalidInput(f"workers must be a whole number ≥ 1, got {workers!r}")
    start = time.perf_counter()
    every = _runs(runs, kinds)
    shipped = _shipped()
    scored, refused = _score(every, shipped, workers, progress)
    loso, values = _held_out(scored, shipped, workers)
    rows, residuals = [], []
    for (run, base, features, s), le, v in zip(scored, loso, values, strict=True):
        error = s.predicted / s.published - 1.0
        rows.append(
            {
                "run": run.key,
                "source": run.source.id,
                "family": run.source.family,
                "regime": base,
                "features": list(features),
                "metric": run.metric,
                "published": run.published,
                "predicted": s.predicted,
                "error": error,
                "loso_error": le,
                "loso_constants": v,
                "where": run.where,
            }
        )
        residuals.append(accuracy.Residual(base, features, run.source.family, run.key, error, le))
    constants = _constants(scored, shipped, {run.kind for run in every})
    return ValidateResult(
        regimes=accuracy.regimes(residuals),
        rows=rows,
        constants=constants,
        refused=refused,
        sources=len({run.source.id for run in every}),
        families=len({run.source.family for run in every}),
        seconds=time.perf_counter() - start,
    )
