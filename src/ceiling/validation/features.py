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


SMALL_MODEL_PARAMS = 1e9  # below this a model is a feature of its own: its costs are overheads


def _size(cfg) -> list[str]:
    params = getattr(cfg, "params_total", None)
    return ["< 1B params"] if params and params < SMALL_MODEL_PARAMS else []


def training_features(cfg, best, seq: int, device) -> tuple[str, ...]:
    """A plan's features: what its error band is chosen by."""
    plan = best.plan
    out = [generation(device), *_size(cfg)]
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
    """A decode result's features."""
    return decode_features_of(cfg, result.device, result.ceiling.dtypes.weights, result.setup.tp)


def decode_features_of(cfg, device, weights: str, tp: int) -> tuple[str, ...]:
    """The features of a decode of `cfg` on `device` with `weights` over `tp` devices."""
    out = [generation(device), *_size(cfg)]
    if str(weights) in ("int4", "int8", "fp8", "fp4"):
        out.append(str(weights))
    if tp > 1:
        out.append("tensor parallel")
    if getattr(cfg, "experts", 1) > 1:
        out.append("MoE")
    out += _attention(cfg)
    return tuple(out)


def _attention(cfg) -> list[str]:
    """Multi-head latent attention is a feature of a decode or a serving prediction: its
    cache holds a latent a token, read by absorbed attention, another cost than GQA's."""
    return ["MLA"] if getattr(cfg, "attention", "") == "mla" else []


# Engines whose own costs no published run checks (`model.serve.engine.SEQUENCE_OPS` was
# fitted on one local server): each a feature of its own, so its prediction says unchecked.
UNPUBLISHED_ENGINES = {"transformers": "transformers serve"}


def serving_features(cfg, result) -> tuple[str, ...]:
    """A serving result's features: the device, size, load, engine and weights
    (`serving_features_of`), and the mechanisms of its call that change how the scheduler
    runs (speculative decoding, a prefix cache, pipeline stages), each a feature of its own
    so that a prediction using one is checked by runs that used it."""
    inputs = result.inputs
    online = "offline" not in str(inputs.get("load", ""))
    out = serving_features_of(cfg, result.device, online, inputs.get("weights", ""),
                              inputs.get("engine", "generic"))  # fmt: skip
    more = []
    if inputs.get("speculative"):
        more.append("speculative decoding")
    if (inputs.get("prefix_hit_rate") or 0) > 0:
        more.append("prefix cache")
    if (inputs.get("layout") or {}).get("pp", 1) > 1:
        more.append("pipeline parallel")
    return out + tuple(more)


def serving_features_of(cfg, device, online: bool, weights: str, engine: str = "generic"):
    """The features of serving `cfg` on `device`, online or offline. The engine is not one
    (its own costs are terms of the model, `--engine`, checked together) unless no
    published run checks it (`UNPUBLISHED_ENGINES`); weights other than 16-bit, fp32 and
    FP8 name their format."""
    out = [generation(device), *_size(cfg), "online" if online else "offline"]
    if engine in UNPUBLISHED_ENGINES:
        out.append(UNPUBLISHED_ENGINES[engine])
    if getattr(cfg, "experts", 1) > 1:
        out.append("MoE")
    out += _attention(cfg)
    if str(weights) == "fp8":
        out.append("FP8")
    elif weights and str(weights) not in ("bf16", "fp16", "fp32"):
        out.append(f"{weights} weights")
    return tuple(out)


def plan_band(cfg, row, seq: int, device):
    """The band of a plan row's step time."""
    from ceiling.validation.bands import band

    return band("training", training_features(cfg, row, seq, device))


def decode_bands(result) -> dict:
    """The bands of a decode result's expected figures and its ceiling."""
    return decode_bands_of(decode_features(result.model, result))


def decode_bands_of(features) -> dict:
    return _bands({"expected": "decode expected", "ceiling": "decode ceiling"}, features)


def serving_bands(result) -> dict:
    """The bands of a serving result's throughput and latency figures."""
    return serving_bands_of(serving_features(result.model, result))


def serving_bands_of(features) -> dict:
    return _bands({"throughput": "serving throughput", "latency": "serving latency"}, features)


def _bands(bases: dict[str, str], features) -> dict:
    """key -> the band of regime family `bases[key]` for a prediction with `features`."""
    from ceiling.validation.bands import band

    return {key: band(base, features) for key, base in bases.items()}
