"""Transformer shapes as a result: `ceiling.models()` (the catalog) or
`ceiling.models(["llama-3-8b", "hf:PATH"])`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ceiling.api.arguments import checked
from ceiling.api.result import Result


@dataclass(frozen=True)
class ModelsResult(Result):
    """Transformer configs by name (sorted): the catalog, or the models asked for
    (`chosen`): shapes, parameter counts, KV cache per token and sources."""

    models: dict[str, Any]  # name -> model.transformer.TransformerConfig
    chosen: bool
    title = "Transformer catalog"

    def record(self) -> dict[str, Any]:
        from ceiling.api.decode_views import config_json

        return {
            name: {
                **config_json(m),
                "params_total": m.params_total,
                "params_active": m.params_active,
                "kv_bytes_per_token_16bit": m.kv_bytes_per_token(2),
                "source": m.source,
            }
            for name, m in self.models.items()
        }

    def heading(self) -> str:
        return "Transformer shapes" if self.chosen else self.title

    def _row_lists(self, record: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        """One row per model, its name first."""
        return {"models": [{"name": name, **row} for name, row in record.items()]}


@checked
def models(names: Iterable[str] | str | None = None) -> ModelsResult:
    """The transformer catalog, or only `names`: catalog names, "custom:..." dimensions or
    "hf:PATH" (a Hugging Face config.json, or the folder holding one)."""
    from ceiling.model.model_catalog import all_models
    from ceiling.model.transformer import parse_model

    if isinstance(names, str):
        names = [names]
    names = list(names) if names is not None else []
    found = {m.name: m for m in map(parse_model, names)} if names else all_models()
    return ModelsResult(dict(sorted(found.items())), bool(names))
