"""The error band of a prediction, from the leave-one-source-out residuals of the shipped
corpus (`accuracy.json` beside this file: one row per scored published figure, as
`ceiling validate --json` gives them; `ceiling validate --write-bands` rewrites it)."""

from __future__ import annotations

import functools
import json
from importlib.resources import files
from pathlib import Path

from ceiling.errors import MalformedFile
from ceiling.model.accuracy import Band, Residual, band_for

FILE = "accuracy.json"


def path() -> Path:
    return Path(str(files("ceiling.validation").joinpath(FILE)))


@functools.cache
def _document() -> dict:
    """The shipped file, read once (empty when it is absent: every band then says so)."""
    p = path()
    if not p.exists():
        return {}
    try:
        document = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(document, dict):
            raise TypeError(f"a {type(document).__name__}, not an object")
        return document
    except (OSError, ValueError, TypeError) as exc:
        raise MalformedFile(f"{p}: the shipped error bands are unreadable ({exc})") from exc


@functools.cache
def rows() -> tuple[dict, ...]:
    """The shipped scored rows (none when the file is absent)."""
    document = _document()
    if not document:
        return ()
    try:
        return tuple(document["rows"])
    except (KeyError, TypeError) as exc:
        raise MalformedFile(f"{path()}: the shipped error bands are unreadable ({exc})") from exc


def constants() -> tuple[dict, ...]:
    """Each fitted constant's value in use and its refit on every run when the shipped rows
    were written (`write`)."""
    try:
        return tuple(_document().get("constants", ()))
    except TypeError as exc:
        raise MalformedFile(f"{path()}: the shipped error bands are unreadable ({exc})") from exc


@functools.cache
def residuals() -> tuple[Residual, ...]:
    """The shipped rows as residuals."""
    try:
        return tuple(
            Residual(r["regime"], tuple(r["features"]), r["family"], r["run"], float(r["error"]),
                     float(r["loso_error"]))
            for r in rows()
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedFile(f"{path()}: the shipped error bands are unreadable ({exc})") from exc


def band(base: str, features) -> Band:
    """The band of a prediction of regime family `base` ("training", "decode expected",
    "decode ceiling", "serving throughput", "serving latency") with `features`."""
    return band_for(base, tuple(features), list(residuals()))


def write(scored: list[dict], target: Path | None = None,
          constants: list[dict] | None = None) -> Path:  # fmt: skip
    """Write the scored rows (`ValidateResult.rows`) as the shipped residuals, and each fitted
    constant's value in use beside its refit on every run (`ValidateResult.constants`),
    atomically."""
    from ceiling.records import write_text_atomic

    keep = ("run", "family", "regime", "features", "metric", "published", "predicted", "error",
            "loso_error")  # fmt: skip
    fitted = [{k: c[k] for k in ("name", "value", "refit_on_every_run")} for c in (constants or [])]
    document = {"rows": [{k: r[k] for k in keep} for r in scored], "constants": fitted}
    text = json.dumps(document, indent=1) + "\n"
    out = target or path()
    write_text_atomic(text, out)
    _document.cache_clear()
    rows.cache_clear()
    residuals.cache_clear()
    return out
