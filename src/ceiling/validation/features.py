"""The features a prediction's error band is chosen by (`model.accuracy`): read from the
typed results of `ceiling.plan`, `ceiling.decode` and `ceiling.serve`, for the corpus's
runs and for any user's prediction alike."""

from __future__ import annotations


def generation(spec) -> str:
    """The device generation a prediction is checked by: from the catalog key."""
    if getattr(spec, "kind", "gpu") != "gpu":
        return "CPU"
    key = str(getattr(spec, "key", "")).lower()
    for prefix, name in (
        (("a100", "a30", "a10", "rtx-30"), "Ampere"),
        (("h100", "h200", "h800", "h20", "gh200"), "Hopper"),
        (("b200", "b300", "gb200", "gb300", "rtx-50"), "Blackwell"),
        (("v100",), "Volta"),
        (("t4", "rtx-20"), "Turing"),
        (("l4", "l40", "rtx-40"), "Ada"),
        (("mi",), "AMD CDNA"),
        (("tpu",), "TPU"),
        (("gaudi",), "Gaudi"),
        (("apple",), "Apple"),
    ):
        if key.startswith(prefix):
            return name
    return f"device {key or 'unknown'}"


def training_features(cfg, best, seq: int, device) -> tuple[str, ...]:
    """A plan's features: what its error band is chosen by."""
    plan = best.plan
    out = [generation(device)]
    if getattr(cfg, "experts", 1) > 1:
        out.append("MoE")
    if seq >= 32768:
        out.append("long context")
    if str(getattr(plan, "fp8", "off")) not in ("off", "none", "False"):
        out.append("FP8")
    if getattr(plan, "zero", 0) == 3:
        out.append("FSDP")
    if getattr(plan, "p", 1) > 1:
        out.append("pipeline")
    return tuple(out)


def decode_features(cfg, result) -> tuple[str, ...]:
    out = [generation(result.device)]
    w = str(result.ceiling.dtypes.weights)
    if w in ("int4", "int8", "fp8", "fp4"):
        out.append(w)
    if result.setup.tp > 1:
        out.append("tensor parallel")
    if getattr(cfg, "experts", 1) > 1:
        out.append("MoE")
    return tuple(out)


def serving_features(cfg, result) -> tuple[str, ...]:
    inputs = result.inputs
    load = str(inputs.get("load", ""))
    out = [generation(result.device), "offline" if "offline" in load else "online"]
    out.append(f"engine {inputs.get('engine', 'generic')}")
    if getattr(cfg, "experts", 1) > 1:
        out.append("MoE")
    if str(inputs.get("weights", "")) == "fp8":
        out.append("FP8")
    return tuple(out)


def plan_band(cfg, row, seq: int, device):
    """The band of a plan row's step time."""
    from ceiling.validation.bands import band

    return band("training", training_features(cfg, row, seq, device))


def decode_bands(result) -> dict:
    """The bands of a decode result's expected figures and its ceiling."""
    from ceiling.validation.bands import band

    features = decode_features(result.model, result)
    return {
        "expected": band("decode expected", features),
        "ceiling": band("decode ceiling", features),
    }


def serving_bands(result) -> dict:
    """The bands of a serving result's throughput and latency figures."""
    from ceiling.validation.bands import band

    features = serving_features(result.model, result)
    return {
        "throughput": band("serving throughput", features),
        "latency": band("serving latency", features),
    }
