"""LLM decode ceilings as a result: `ceiling.decode("llama-3-8b", spec="h100-sxm")`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ceiling.api.arguments import BadArgument, checked
from ceiling.api.decode_views import ceiling_json, decode_figure
from ceiling.api.result import Result
from ceiling.errors import InvalidInput
from ceiling.model.decode_setup import default_context
from ceiling.model.transformer import ModelArgument

DEFAULT_BATCHES = (1, 8, 64, 256)


def _fit_at_realistic(cfg, dev, setup) -> tuple[int, int | None]:
    """(context, largest batch that fits there): at context 0 every sequence holds one token,
    so the count of sequences that fit is meaningless; a served sequence holds thousands."""
    from ceiling.errors import DoesNotFit
    from ceiling.model.decode import decode_ceiling

    context = default_context(cfg)
    at = dataclasses.replace(setup, context=context, prompt_tokens=None)
    try:
        return context, decode_ceiling(cfg, dev, [1], at, drop_unfit=True).max_batch
    except DoesNotFit:
        return context, 0


@dataclass(frozen=True)
class DecodeResult(Result):
    """Decode (and prefill) ceilings of a model on a device: `ceiling` (the model's
    `DecodeCeiling`: rows per batch, KV cache sizes, crossover batch), the engine-cost
    `expected` rows, and the largest batch that fits at `max_batch_context`."""

    model: Any  # TransformerConfig
    ceiling: Any  # model.decode.DecodeCeiling
    device: Any  # the device spec
    setup: Any  # model.decode.DecodeSetup
    device_source: str
    expected: list[Any]
    costs: Any
    max_batch_context: int
    max_batch: int | None
    title = "Decode ceiling"

    @property
    def rows(self) -> list[Any]:
        return self.ceiling.rows

    def record(self) -> dict[str, Any]:
        from ceiling.render import decode_expected as expected_report

        out = ceiling_json(self.model, self.ceiling)
        out["max_batch_context"], out["max_batch"] = self.max_batch_context, self.max_batch
        out["device_source"] = self.device_source
        bands = {k: b.to_json() for k, b in self.accuracy().items()}
        out["rows"] = [{**r.to_json(), "accuracy": bands["ceiling"]} for r in self.ceiling.rows]
        out["expected"] = expected_report.expected_json(self.expected, self.costs)
        for row in out["expected"]["rows"]:
            row["accuracy"] = bands["expected"]
        out["accuracy"] = bands
        return out

    def accuracy(self) -> dict:
        """The error bands of the expected figures and of the ceiling (`expected`,
        `ceiling`): the regime they fall in and its |error| on published runs, scored
        leave-one-source-out."""
        from ceiling.validation.features import decode_bands

        return decode_bands(self)

    def heading(self) -> str:
        return f"{self.model.name} decode on {self.ceiling.device} ({self.device_source})"

    def figure(self):
        return decode_figure(self.model, self.device, self.setup, self.ceiling)

    def serving_batch(self, context: int):
        """The largest batch worth serving with `context` tokens a sequence, on this device
        with these dtypes and tensor parallelism, and its expected speed (a
        `ceiling.api.decode_serving.ServingBatch`)."""
        from ceiling.api.decode_serving import serving_batch

        return serving_batch(self.model, self.device, self.setup, self.costs, context)


def _batches(batch: Iterable[int] | int | None) -> tuple[list[int], bool]:
    if batch is None:
        return list(DEFAULT_BATCHES), False
    values = [batch] if isinstance(batch, int) else list(batch)
    if not values:
        raise BadArgument("batch", "needs at least one batch size (e.g. 1, 8 and 64)")
    for b in values:
        if not isinstance(b, int) or b < 1:
            raise InvalidInput(f"batch sizes must be whole numbers ≥ 1, got {b!r}")
    return values, True


@checked
def decode(
    model: ModelArgument,
    *,
    spec: str | None = None,
    machine_profile: Path | str | None = None,
    batch: Iterable[int] | int | None = None,
    context: int | None = None,
    prompt: int | None = None,
    weights: str | None = None,
    kv_dtype: str | None = None,
    activations: str | None = None,
    tp: int = 1,
    measure: bool = False,
    device: str | None = None,
):
    """Decode ceilings of `model` (a catalog name, "custom:...", "hf:PATH", or a Hugging Face
    config as a dict or a transformers config object such as `AutoConfig.from_pretrained()`
    gives) on a catalog device (`spec`) or the saved machine profile: tokens/s against
    `batch` (default 1, 8, 64, 256), `context` tokens in each KV cache (default 4,096, or
    the model's maximum when shorter), time to first token for `prompt` tokens (default:
    the context), `weights`/`kv_dtype`/`activations` dtypes (`weights` may name a 4-bit
    format: int4, awq, gptq, mxfp4), `tp` devices per replica. A batch that does not fit is
    kept with `fits` False (and a note); a single batch given that does not fit, or no batch
    fitting, raises `DoesNotFit`.

    measure=True builds the model here with random weights and times real decode steps on
    `device` (cpu or cuda[:N]; default cuda if present) beside this machine's ceiling: a
    `MeasuredDecodeResult` (see `api/decode_measured.py`)."""
    from ceiling.hardware.resolve import resolve
    from ceiling.model import decode_expected as expected
    from ceiling.model.decode import DecodeSetup, decode_ceiling
    from ceiling.model.transformer import parse_model

    cfg = parse_model(model)
    batches, explicit = _batches(batch)
    if measure:
        from ceiling.api.decode_measured import decode_measured, refuse_with_measure

        refuse_with_measure(spec, tp, kv_dtype, activations, prompt)
        return decode_measured(
            cfg, batches, context or 0, weights=weights, device=device, profile=machine_profile
        )
    if device is not None:
        raise InvalidInput("device is where measure=True runs: drop it, or measure")
    weights = weights if weights is not None else cfg.stored_weights  # as published
    resolved = resolve(spec, machine_profile)
    dev = resolved.spec
    fmt = expected.quant_format(weights)
    setup = DecodeSetup(
        weights_dtype=fmt.dtype if fmt else (weights or "bf16"),
        kv_dtype=kv_dtype,
        activation_dtype=activations,
        context=default_context(cfg) if context is None else context,
        tp=tp,
        prompt_tokens=prompt,
    )
    one_request = explicit and len(set(batches)) == 1
    c = decode_ceiling(cfg, dev, batches, setup, flag_unfit=not one_request)
    costs = expected.costs_for(dev, weights=weights, compute=c.dtypes.compute)
    rows = expected.expected_rows(c, cfg.layers, costs, cfg=cfg, sms=getattr(dev, "sms", None))
    fit = (c.context, c.max_batch) if c.context else _fit_at_realistic(cfg, dev, setup)
    return DecodeResult(cfg, c, dev, setup, resolved.source, rows, costs, *fit)
