"""The validation corpus: published runs as data, one TOML file per source document.

    [source]
    id = "gpt-fast-readme"        # rows of one source are held out together
    family = "gpt-fast"           # optional: versions of one document are held out together
    title = "pytorch-labs/gpt-fast README.md"
    version = "main, 2024-08"
    url = "https://github.com/pytorch-labs/gpt-fast"
    kind = "decode"               # training | decode | serving
    entered = "how the rows were entered, and what was assumed"

    [[run]]
    name = "Llama-2-7B int4, 1 A100-80GB"
    where = "table 'A100', row 'Llama-2-7B int4'"
    args = { model = "llama-2-7b", spec = "a100-80gb", batch = 1, context = 100, weights = "int4" }
    metric = "tokens_per_s"
    published = 196.8

`args` are the keyword arguments of `ceiling.plan` (training: `model` and `gpus` among
them), `ceiling.decode` or `ceiling.serve`; `metric` one of METRICS[kind]. Training rates:
`hw_tflops_per_gpu` counts recomputation, `model_tflops_per_gpu` is ceiling's model FLOPs
(MFU × peak), `megatron_tflops_per_gpu` the "TFLOPS" Megatron-LM logs
(`model.plan.costs.megatron_model_flops_per_token`). The built-in corpus
lies beside this file; a user's own runs in the same format are read with `--runs FILE`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

import tomllib

from ceiling.errors import InvalidInput, MalformedFile

METRICS = {
    "training": (
        "step_time_s",
        "tokens_per_s_per_gpu",
        "hw_tflops_per_gpu",
        "model_tflops_per_gpu",
        "megatron_tflops_per_gpu",
        "mfu",
    ),
    "decode": ("tokens_per_s", "ms_per_token"),
    "serving": (
        "output_tokens_per_s",
        "requests_per_s",
        *(
            f"{what}_{stat}_s"
            for what in ("ttft", "tpot", "e2e")
            for stat in ("mean", "p50", "p90", "p99")
        ),
    ),
}
KINDS = tuple(METRICS)


@dataclass(frozen=True)
class Source:
    id: str
    kind: str
    title: str
    version: str
    url: str
    entered: str
    family: str
    file: str


@dataclass(frozen=True)
class Run:
    source: Source
    name: str
    where: str
    args: dict = field(hash=False)
    metric: str
    published: float
    note: str = ""

    @property
    def kind(self) -> str:
        return self.source.kind

    @property
    def key(self) -> str:
        return f"{self.source.id}: {self.name} [{self.metric}]"


def builtin_files() -> list[Path]:
    """The corpus shipped with ceiling, one file per source, in name order."""
    folder = files("ceiling.validation").joinpath("corpus")
    return sorted(Path(str(folder)).glob("*.toml"))


def load(paths: list[Path | str] | None = None) -> list[Run]:
    """Every run of the given corpus files (a folder: its *.toml), or of the built-in corpus."""
    chosen: list[Path] = []
    for p in [Path(x) for x in paths] if paths else builtin_files():
        if p.is_dir():
            chosen += sorted(p.glob("*.toml"))
        elif p.is_file():
            chosen.append(p)
        else:
            raise InvalidInput(f"runs file {str(p)!r} does not exist")
    if not chosen:
        raise InvalidInput("no runs file given and no built-in corpus found")
    runs: list[Run] = []
    seen: dict[str, str] = {}
    for path in chosen:
        file_runs = read_file(path)
        sid = file_runs[0].source.id if file_runs else None
        if sid in seen:
            raise MalformedFile(f"{path}: source id {sid!r} is also used by {seen[sid]}")
        if sid:
            seen[sid] = str(path)
        runs += file_runs
    return runs


def read_file(path: Path) -> list[Run]:
    """The runs of one source file, checked: a malformed file is refused with its name."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise MalformedFile(f"{path}: not a readable TOML file ({exc})") from exc
    src = data.get("source")
    if not isinstance(src, dict):
        raise MalformedFile(f"{path}: no [source] table")
    for key in ("id", "kind", "title"):
        if not isinstance(src.get(key), str) or not src[key].strip():
            raise MalformedFile(f"{path}: [source] needs a text `{key}`")
    if src["kind"] not in KINDS:
        raise MalformedFile(f"{path}: source kind {src['kind']!r} is not one of {', '.join(KINDS)}")
    source = Source(
        id=src["id"],
        kind=src["kind"],
        title=src["title"],
        version=str(src.get("version", "")),
        url=str(src.get("url", "")),
        entered=str(src.get("entered", "")),
        family=str(src.get("family") or src["id"]),
        file=Path(path).name,
    )
    raw = data.get("run", [])
    if not isinstance(raw, list) or not raw:
        raise MalformedFile(f"{path}: no [[run]] entries")
    return [_run(path, source, i, r) for i, r in enumerate(raw, 1)]


def _run(path, source: Source, i: int, r) -> Run:
    where = f"{path}: run {i}"
    if not isinstance(r, dict):
        raise MalformedFile(f"{where}: not a table")
    name = r.get("name")
    if not isinstance(name, str) or not name.strip():
        raise MalformedFile(f"{where}: needs a text `name`")
    args = r.get("args")
    if not isinstance(args, dict) or "model" not in args:
        raise MalformedFile(f"{where} ({name}): `args` must be a table with a `model`")
    if source.kind == "training" and "gpus" not in args:
        raise MalformedFile(f"{where} ({name}): a training run's `args` need `gpus`")
    metric = r.get("metric")
    if metric not in METRICS[source.kind]:
        raise MalformedFile(
            f"{where} ({name}): metric {metric!r} is not one of {', '.join(METRICS[source.kind])}"
        )
    value = r.get("published")
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise MalformedFile(f"{where} ({name}): `published` must be a positive number")
    return Run(
        source=source,
        name=name,
        where=str(r.get("where", "")),
        args=dict(args),
        metric=metric,
        published=float(value),
        note=str(r.get("note", "")),
    )
