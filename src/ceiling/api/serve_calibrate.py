"""`serve(..., calibrate="measured.json")`: a prediction from the engine costs that make the
simulation of one measured run (the JSON `serve --measure ... --json` writes) give what was
measured (`ceiling.model.serve.calibrate`).

The measured run is simulated again from the arguments it records (`call`), under trial
costs; the fitted host costs then hold for any load, length, batch limit or device, and the
device's scale only on the device the run was measured on (elsewhere it is 1, and said).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, NamedTuple

from ceiling.errors import MalformedFile
from ceiling.model.serve.calibrate import line_figures, separable_range

# the arguments of `ceiling.serve` a run records, to be simulated again (JSON values only)
CALL_KEYS = (
    "model", "spec", "machine_profile", "gpus", "tp", "pp", "replicas", "weights", "kv_dtype",
    "activations", "input_tokens", "output_tokens", "dataset", "requests", "rate",
    "concurrency", "ramp_up", "offline", "num_requests", "max_num_seqs", "max_batched_tokens",
    "chunked_prefill", "prefix_hit_rate", "speculative", "spec_tokens", "acceptance",
    "reserve_kv", "seed", "engine", "memory_utilization", "scheduler_steps",
)  # fmt: skip


def recorded_call(args: dict) -> dict | None:
    """The arguments of a `serve` call that JSON can hold, or None when the model is not a
    name or a dict (a transformers object: the run cannot be simulated again)."""
    call = {k: args.get(k) for k in CALL_KEYS}
    if not isinstance(call["model"], str | dict):
        return None
    for key in ("machine_profile", "requests"):
        if isinstance(call[key], Path):
            call[key] = str(call[key])
    if call["requests"] is not None and not isinstance(call["requests"], str):
        return None
    return call


class _Run(NamedTuple):
    call: dict  # the arguments it was run with
    figures: dict  # what it measured
    source: str
    batches: Any  # its requests' `DecodeBatches`, or None
    sequence_s: float | None  # the host's time a sequence its prediction used


def _measured_run(calibrate) -> _Run:
    from ceiling.files import parse_json, read_text

    if isinstance(calibrate, dict):
        data, source = calibrate, "the measured run given"
    else:
        source = str(calibrate)
        data = parse_json(read_text(calibrate, "measured serving run"), source)
    if not isinstance(data, dict) or not isinstance(data.get("measured"), dict):
        raise MalformedFile(f"{source}: not a measured run (the JSON of `ceiling serve "
                            "--measure URL --json`, with its `measured` figures)")  # fmt: skip
    if not isinstance(data.get("call"), dict):
        raise MalformedFile(f"{source}: records no `call` (the arguments of the run), so it "
                            "cannot be simulated again")  # fmt: skip
    m = data["measured"]
    try:
        figures = {"ttft_p50_s": m["ttft_s"]["p50"], "tpot_p50_s": m["tpot_s"]["p50"],
                   "tpot_p90_s": m["tpot_s"].get("p90"),
                   "output_tokens_per_s": m["output_tokens_per_s"]}  # fmt: skip
    except (KeyError, TypeError):
        raise MalformedFile(f"{source}: its `measured` block lacks TTFT, TPOT or "
                            "output tokens/s") from None  # fmt: skip
    batches = _requests_read(m.get("per_request"), source)
    figures |= line_figures(batches, separable_range(batches))
    used = data.get("sequence_s")
    used = float(used) if isinstance(used, int | float) and 0 <= used < 1 else None
    return _Run(data["call"], figures, source, batches, used)


def _requests_read(per_request, source: str):
    """The `DecodeBatches` of a run's kept requests, or None when it kept none (a file
    written before runs kept them)."""
    from ceiling.model.serve.decode_batches import decode_batches

    if per_request is None:
        return None
    try:
        cols = [per_request[k] for k in ("first_token_s", "end_s", "output_tokens")]
        return decode_batches(*cols)
    except (KeyError, TypeError, ValueError):
        raise MalformedFile(
            f"{source}: its `measured.per_request` is not columns of "
            "first_token_s, end_s and output_tokens of equal length"
        ) from None


def calibrated_serve(calibrate, serve, args: dict[str, Any]):
    """`serve(**args)` with the costs fitted to the measured run `calibrate` (a file, a dict,
    or a list of them: runs at several loads also fit a time a sequence)."""
    from ceiling.errors import InvalidInput
    from ceiling.model import fitted
    from ceiling.model.serve import engine as eng
    from ceiling.model.serve.calibrate import fit

    given = list(calibrate) if isinstance(calibrate, list | tuple) else [calibrate]
    if not given:
        raise InvalidInput("calibrate needs at least one measured run")
    runs = [_measured_run(c) for c in given]
    devices = {_device(r.call) for r in runs}
    if len(devices) > 1:
        raise InvalidInput(f"the measured runs were measured on several devices "
                           f"({', '.join(sorted(devices))}): calibrate from one")  # fmt: skip

    def simulation(call: dict, batches):
        def run(costs: tuple[float, float, float, float]) -> dict:
            iteration_s, request_s, device_scale, sequence_s = costs
            with fitted.overridden(_costs(iteration_s, request_s)):
                result = serve(**{**call, "device_scale": device_scale,
                                  "sequence_s": sequence_s})  # fmt: skip
            return simulated_figures(result, separable_range(batches))

        return run

    # a time a sequence starts at (and, where the runs cannot tell it, stays at) the one the
    # first run's prediction used: its engine's (`engine.SEQUENCE_OPS`) or the shipped one
    first = runs[0].sequence_s
    start = (eng.iteration_s(), eng.request_s(), eng.sequence_s() if first is None else first)
    cal = fit([simulation(r.call, r.batches) for r in runs], [r.figures for r in runs], start,
              devices.pop(), [r.source for r in runs], [r.batches for r in runs])  # fmt: skip
    scale = cal.device_scale if _device(args) == cal.device else 1.0
    with fitted.overridden(_costs(cal.iteration_s, cal.request_s)):
        result = serve(**{**args, "device_scale": scale, "sequence_s": cal.sequence_s})
    return dataclasses.replace(result, calibration=cal)


def simulated_figures(result, at: tuple[float, float] | None) -> dict:
    """The figures a calibration matches of a simulated `result`: its metrics' and, at the
    measured run's concurrencies `at`, its requests' TPOT line (`decode_batches`)."""
    import numpy as np

    from ceiling.model.serve.calibrate import figures_of
    from ceiling.model.serve.decode_batches import beside, decode_batches

    figures = figures_of(result.metrics)
    if at is None:
        return figures
    cols = [np.concatenate([getattr(s, k) for s in result.schedules])
            for k in ("first_token_s", "finish_s", "output")]  # fmt: skip
    n_bar = np.concatenate([beside(s.first_token_s, s.finish_s) for s in result.schedules])
    line = line_figures(decode_batches(*cols, n_bar=n_bar), at)
    return figures | (line or dict.fromkeys(("tpot_at_low_s", "tpot_at_high_s"),
                                            figures["tpot_p50_s"]))  # fmt: skip


def _device(args: dict) -> str:
    from ceiling.hardware.resolve import resolve

    return resolve(args.get("spec"), args.get("machine_profile")).spec.name


def _costs(iteration_s: float, request_s: float) -> dict:
    return {"serve.iteration_s": iteration_s, "serve.request_s": request_s}
