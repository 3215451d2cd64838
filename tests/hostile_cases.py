"""Hostile inputs, generated: trace files, device TOML, `hf:` configs and Python API calls,
each run in-process and classified. Shared by `test_fuzz_hostile.py` (a fixed, CI-sized
set) and `benchmarks/hostile_inputs.py` (a larger exploratory one).

Clean is a result, or a CeilingError of one line (the command line's exit 2). Anything else
-- another exception, a message of several lines, a run past its deadline -- is a failure.
The benchmarks measure nothing here: the functions that would time this machine are
replaced by a stand-in once the arguments are checked.
"""

from __future__ import annotations

import _thread
import contextlib
import gzip
import json
import math
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from test_schema_checks import DEVICE

# JSON text no field should take without a clean refusal (or a clean result).
JSON_VALUES = [
    "5",
    "-1",
    "0",
    "2.5",
    '"x"',
    '""',
    "null",
    "true",
    "[]",
    "[1]",
    "{}",
    '{"rank": 1e400}',
    '{"rank": "one"}',
    '[{"name": 5}]',
    "1e400",
    "-1e400",
    "NaN",
    "Infinity",
    "9" * 5000,
    "9" * 400,
    "1" + "0" * 400 + ".5",
    "[" * 3000 + "]" * 3000,
    "[" * 200_000,
    '"\\u0000\\u001b[31m"',
    '"' + "a" * 100_000 + '"',
    "1e-300",
    str(2**70),
    str(10**12),
]
TOML_VALUES = [
    "nan",
    "inf",
    "-inf",
    "0",
    "-1",
    "1e-300",
    "1e308",
    "true",
    '"x"',
    "[1, 2]",
    "{ a = 1 }",
    "9" * 5000,
    "9" * 400,
    "1979-05-27",
    "[" * 2000 + "]" * 2000,
    "[" * 200_000,
    str(2**70),
    '"\\u001b[31m"',
]
TEXT_DAMAGE = ["truncate", "nul", "latin1", "bom", "empty", "garbage", "gzip", "gzip-cut"]


EVENT = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, "pid": 1, "tid": 1}
TRACE_FIELDS = {
    "header": ["distributedInfo", "deviceProperties", "record_shapes", "host_name"],
    "dist": ["rank", "world_size", "backend"],
    "event": ["ts", "dur", "name", "cat", "ph", "args", "pid", "tid"],
}
DEVICE_TOML = DEVICE.replace("bf16 = 900", "bf16 = 900, fp32 = 60") + (
    "devices_per_node = 8\ninter_node_gb_per_s = 50\n"
)
TOML_FIELDS = [
    "kind",
    "memory_gib",
    "memory_bandwidth_gb_per_s",
    "link_gb_per_s_one_way",
    "bf16",
    "fp32",
    "matmul_efficiency",
    "devices_per_node",
    "inter_node_gb_per_s",
]
HF_CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 128,
    "vocab_size": 100,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}
_HOLE = "@@HOSTILE@@"


def _with_hole(document: Any, path: list[str | int], raw: str) -> str:
    """JSON text of `document` with the value at `path` replaced by the raw text `raw`
    (which json.dumps could not write: 5,000 digits, unbalanced brackets)."""
    target = document
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = _HOLE
    return json.dumps(document).replace(json.dumps(_HOLE), raw)


def damaged(data: bytes, how: str, at: float) -> bytes:
    """`data` damaged one way, `at` in [0, 1) where a damage needs a place."""
    cut = int(len(data) * at)
    return {
        "truncate": lambda: data[:cut],
        "nul": lambda: data[:cut] + b"\x00" + data[cut:],
        "latin1": lambda: data[:cut] + b"\xe9\xff" + data[cut:],
        "bom": lambda: b"\xef\xbb\xbf" + data,
        "empty": lambda: b"",
        "garbage": lambda: bytes(range(256)) * 4,
        "gzip": lambda: gzip.compress(data),
        "gzip-cut": lambda: gzip.compress(data)[: max(1, cut)],
    }[how]()


@st.composite
def trace_files(draw) -> tuple[str, bytes]:
    """(file name, content) of a trace with one hostile part."""
    where = draw(st.sampled_from(["header", "dist", "event", "text"]))
    doc: dict[str, Any] = {
        "distributedInfo": {"rank": 0, "world_size": 1, "backend": "gloo"},
        "deviceProperties": [{"name": "NVIDIA H100 80GB HBM3"}],
        "traceEvents": [dict(EVENT), {**EVENT, "ts": 5, "name": "aten::add"}],
    }
    if where == "text":
        data = damaged(json.dumps(doc).encode(), draw(st.sampled_from(TEXT_DAMAGE)), draw(_AT))
    else:
        name = draw(st.sampled_from(TRACE_FIELDS[where]))
        path = {
            "header": [name],
            "dist": ["distributedInfo", name],
            "event": ["traceEvents", draw(st.integers(0, 1)), name],
        }[where]
        data = _with_hole(doc, path, draw(st.sampled_from(JSON_VALUES))).encode()
    gz = data[:2] == b"\x1f\x8b"
    return ("trace.json.gz" if gz else "trace.json"), data


_AT = st.floats(0.0, 0.999)


@st.composite
def spec_files(draw) -> tuple[str, bytes]:
    """(file name, content) of a device TOML with one hostile part."""
    how = draw(st.sampled_from(["value", "value", "key", "text"]))
    text = DEVICE_TOML
    if how == "value":
        name = draw(st.sampled_from(TOML_FIELDS))
        value = draw(st.sampled_from(TOML_VALUES))
        old = next(line for line in text.splitlines() if f"{name} = " in line)
        if name in ("bf16", "fp32"):
            text = text.replace(f"{name} = {old.split(f'{name} = ')[1].split(',')[0].split()[0]}",
                                f"{name} = {value}")  # fmt: skip
        else:
            text = text.replace(old, f"{name} = {value}")
        return "d.toml", text.encode()
    if how == "key":
        edit = draw(st.sampled_from(["misspell", "repeat", "unknown", "drop", "empty"]))
        text = {
            "misspell": text.replace("matmul_efficiency", "matmul_eficiency"),
            "repeat": text.replace('kind = "gpu"', 'kind = "gpu"\nkind = "cpu"'),
            "unknown": text + "colour = 3\n",
            "drop": text.replace("memory_gib = 80\n", ""),
            "empty": "",
        }[edit]
        return "d.toml", text.encode()
    damage = draw(st.sampled_from([d for d in TEXT_DAMAGE if not d.startswith("gzip")]))
    return "d.toml", damaged(text.encode(), damage, draw(_AT))


@st.composite
def hf_configs(draw) -> tuple[str, bytes]:
    """(file name, content) of a config.json with one hostile part."""
    if draw(st.integers(0, 4)) == 0:
        damage = draw(st.sampled_from([d for d in TEXT_DAMAGE if not d.startswith("gzip")]))
        return "config.json", damaged(json.dumps(HF_CONFIG).encode(), damage, draw(_AT))
    name = draw(st.sampled_from([*HF_CONFIG, "head_dim", "rope_scaling"]))
    raw = draw(st.sampled_from(JSON_VALUES))
    return "config.json", _with_hole(dict(HF_CONFIG), [name], raw).encode()


# ---- the API ---------------------------------------------------------------------------


HOSTILE_VALUES: list[Any] = [
    None,
    True,
    -1,
    0,
    2**70,
    -0.5,
    math.nan,
    math.inf,
    1e308,
    1e-300,
    "",
    "x",
    "1e400",
    "\x1b[31m",
    [],
    [None],
    ["x"],
    [0],
    {},
    {"d": 0},
    object(),
    (1, 2),
    b"bytes",
]


@dataclass
class Call:
    """One API function with valid, cheap arguments to start from."""

    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


def api_calls(trace_path: str, csv_path: str) -> list[Call]:
    spec = {"spec": "h100-sxm"}
    return [
        Call("plan", ("gpt:tiny", 8), {**spec, "top": 1}),
        Call("decode", ("gpt:tiny",), spec),
        Call("roofline", (["add:1000"],), spec),
        Call("amdahl", (0.9,), {"ns": [1, 2, 4]}),
        Call("gustafson", (0.1,), {"ns": [1, 2, 4]}),
        Call("fit", ([1, 2, 4], [1.0, 0.6, 0.4])),
        Call("fit", (csv_path,)),
        Call("trace", (trace_path,), spec),
        Call("report", (), {"only": "amdahl", "spec": "h100-sxm", "gpus": 8}),
        Call("profile", (None, None)),
        Call("bench.matmul", ([], [64]), {"device": "cpu"}),
        Call("bench.memory", (), {"device": "cpu", "elements": 1000}),
        Call("bench.overhead", (), {"device": "cpu"}),
        Call("bench.comm", (2,), {"device": "cpu", "sizes": [1024]}),
        Call("specs", ("h100-sxm",)),
        Call("models", (["gpt:tiny"],)),
        Call("simulate.pipeline", (), {"stages": 2, "micro_batches": 2}),
        Call("simulate.straggler", (), {"workers": 8}),
    ]


# The functions behind the callable packages, whose signatures are read.
_BEHIND = {
    "report": ("ceiling.report.call", "report"),
    "profile": ("ceiling.api.profile", "profile"),
    "trace": ("ceiling.api.trace", "trace"),
}


def _parameters(call: Call) -> list[str | int]:
    """The call's positional places, then every parameter that can be named."""
    import importlib
    import inspect

    if call.name in _BEHIND:
        module, attribute = _BEHIND[call.name]
        function = getattr(importlib.import_module(module), attribute)
    else:
        function = _function(call.name)
    kinds = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    names = [n for n, p in inspect.signature(function).parameters.items() if p.kind not in kinds]
    return [*range(len(call.args)), *names[len(call.args) :]]


@st.composite
def careless_calls(draw, calls: list[Call]) -> tuple[str, tuple, dict]:
    """A call with one or two arguments replaced by hostile values."""
    call = draw(st.sampled_from(calls))
    args, kwargs = list(call.args), dict(call.kwargs)
    for _ in range(draw(st.integers(1, 2))):
        which = draw(st.sampled_from(_parameters(call)))
        value = draw(st.sampled_from(HOSTILE_VALUES))
        if isinstance(which, int):
            args[which] = value
        else:
            kwargs[which] = value
    return call.name, tuple(args), kwargs


def _function(name: str):
    import ceiling

    f: Any = ceiling
    for part in name.split("."):
        f = getattr(f, part)
    return f


class WouldMeasure:
    """What a benchmark returns here once its arguments passed: nothing is timed."""


@contextlib.contextmanager
def nothing_measured():
    """Benchmarks and the report stop where they would start timing this machine."""
    from ceiling.api import bench
    from ceiling.measure import comm
    from ceiling.report import build

    saved = (bench._run, comm.run_comm_benchmark, build.build_report)

    def stand_in(*_args, **_kwargs):
        raise _Stop

    bench._run = comm.run_comm_benchmark = build.build_report = stand_in
    try:
        yield
    finally:
        bench._run, comm.run_comm_benchmark, build.build_report = saved


class _Stop(Exception):
    """Raised where a benchmark would start measuring: its arguments were accepted."""


@contextlib.contextmanager
def deadline(seconds: float):
    """KeyboardInterrupt in this thread after `seconds`: a hang is a failure, not a wait."""
    timer = threading.Timer(seconds, _thread.interrupt_main)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def classify(run, seconds: float = 60.0) -> str:
    """'ok' (a result), 'refused' (a one-line CeilingError) or 'FAIL: ...'."""
    import warnings

    from ceiling.errors import CeilingError

    try:
        with deadline(seconds), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run()
        # numpy's overflow and invalid-value warnings: an inf or nan reached the arithmetic
        numeric = [w for w in caught if issubclass(w.category, RuntimeWarning)]
        if numeric:
            return f"FAIL: RuntimeWarning: {numeric[0].message} ({numeric[0].filename})"
    except _Stop:
        return "ok"
    except CeilingError as exc:
        text = str(exc)
        if not text.strip() or "\n" in text or "Traceback" in text:
            return f"FAIL: CeilingError of {len(text.splitlines())} lines: {text[:300]!r}"
        return "refused"
    except KeyboardInterrupt:
        return f"FAIL: still running after {seconds:g} s"
    except BaseException as exc:  # the finding: anything but a result or a clean refusal
        return f"FAIL: {type(exc).__name__}: {str(exc)[:300]}"
    return "ok"


def run_file(kind: str, name: str, data: bytes, folder: Path) -> str:
    """Write one hostile file and hand it to the API function that reads its kind."""
    import ceiling

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    if kind == "trace":
        return classify(lambda: ceiling.trace(path, spec="h100-sxm"))
    if kind == "spec":
        return classify(lambda: ceiling.decode("gpt:tiny", spec=str(path)))
    return classify(lambda: ceiling.decode(f"hf:{folder}", spec="h100-sxm"))


def run_call(name: str, args: tuple, kwargs: dict) -> str:
    return classify(lambda: _function(name)(*args, **kwargs))


class Tally:
    """Outcomes per surface, and the failures kept to show."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.failures: list[str] = []

    def add(self, surface: str, outcome: str, case: str) -> None:
        self.counts[(surface, "FAIL" if outcome.startswith("FAIL") else outcome)] += 1
        if outcome.startswith("FAIL"):
            self.failures.append(f"{surface}: {case[:200]} -> {outcome}")

    def table(self) -> str:
        surfaces = sorted({s for s, _ in self.counts})
        lines = [f"{'surface':<8} {'ok':>6} {'refused':>8} {'FAIL':>6}"]
        for s in surfaces:
            c = self.counts
            lines.append(f"{s:<8} {c[(s, 'ok')]:>6} {c[(s, 'refused')]:>8} {c[(s, 'FAIL')]:>6}")
        total = sum(self.counts.values())
        lines.append(f"total {total} cases, {len(self.failures)} failures")
        return "\n".join(lines)
