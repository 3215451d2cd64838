"""The model catalog: published architectures (`models.toml`, shipped with the package, each
with a source) as `TransformerConfig`s, by name."""

from __future__ import annotations

import difflib
import functools
import sys

from ceiling.errors import UnknownName
from ceiling.model.transformer_config import TransformerConfig, from_dict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@functools.lru_cache(maxsize=1)
def _catalog() -> dict[str, TransformerConfig]:
    from importlib.resources import files

    text = files("ceiling.model").joinpath("models.toml").read_text(encoding="utf-8")
    raw = tomllib.loads(text)
    out = {}
    for key, entry in raw.items():
        out[key.lower()] = from_dict(key, entry)
    return out


def model_names() -> list[str]:
    return sorted(_catalog())


def all_models() -> dict[str, TransformerConfig]:
    return dict(_catalog())


def get_model(name: str) -> TransformerConfig:
    """A catalog model by name (case-insensitive); UnknownName lists close matches."""
    catalog = _catalog()
    key = name.strip().lower()
    if key in catalog:
        return catalog[key]
    close = difflib.get_close_matches(key, list(catalog), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownName(
        f"unknown model {name!r}{hint} (`ceiling models` lists them; or give "
        f"custom:layers=..,hidden=..,heads=.. or hf:PATH to a Hugging Face config.json)"
    )
