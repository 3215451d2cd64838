"""The schema of a device entry (the built-in catalog's and a user's `--spec` TOML), as
data: each field's kind and, for numbers, the range a real device can have.

One check reads the table: an unknown field gets the closest known name ("did you mean"),
a missing, mistyped or out-of-range one is named with its path (`cluster.matmul_efficiency`)
and the range. Numbers are in datasheet units (TFLOP/s, GiB, GB/s, MiB, µs).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

from ceiling.errors import MalformedFile
from ceiling.vocabulary import DTYPES


@dataclass(frozen=True)
class Field:
    """What one field holds; numbers between `low` and `high` (`low` itself excluded when
    `above`, so a share can be (0, 1] and a latency [0, ...))."""

    kind: str  # "number" | "whole" | "text" | "names" | "table"
    low: float = -math.inf
    high: float = math.inf
    above: bool = False

    def said(self) -> str:
        return {
            "number": "a number",
            "whole": "a whole number",
            "text": "text",
            "names": "a list of names",
            "table": "a table",
        }[self.kind]

    def range_said(self) -> str:
        opening = "(" if self.above else "["
        return f"in {opening}{_number(self.low)}, {_number(self.high)}]"


def _number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e7 else f"{x:g}"


# Below a byte per second or above a petabyte per second no link or memory exists (the
# planner's --inter-bw takes the same range); 1e-300 GB/s would turn every time into inf.
_BANDWIDTH = Field("number", 1e-9, 1e6)
_SHARE = Field("number", 0.0, 1.0, above=True)
_LATENCY = Field("number", 0.0, 1e9)

FIELDS = {
    "name": Field("text"),
    "vendor": Field("text"),
    "kind": Field("text"),
    "driver_names": Field("names"),
    "aliases": Field("names"),
    "memory_gib": Field("number", 0.0, 1e9, above=True),
    "memory_bandwidth_gb_per_s": _BANDWIDTH,
    "link_gb_per_s_one_way": _BANDWIDTH,
    "pcie_gb_per_s_one_way": _BANDWIDTH,
    "l2_mib": Field("number", 0.0, 1e9, above=True),
    "sms": Field("whole", 1, 1e7),
    "compute_capability": Field("text"),
    "gcn_arch": Field("text"),
    "dense_tflops": Field("table"),
    "sources": Field("table"),
    "cluster": Field("table"),
}
REQUIRED = (
    "name",
    "vendor",
    "kind",
    "memory_gib",
    "memory_bandwidth_gb_per_s",
    "dense_tflops",
    "sources",
)
# A dense peak from a microcontroller's MFLOP/s to far beyond any accelerator.
PEAK = Field("number", 1e-6, 1e9)
# The planner's node and network defaults (model/clusters.toml) a device may carry.
CLUSTER_FIELDS = {
    "devices_per_node": Field("whole", 1, 2**20),
    "inter_node_gb_per_s": _BANDWIDTH,
    "intra_node_latency_us": _LATENCY,
    "inter_node_latency_us": _LATENCY,
    "intra_collective_efficiency": _SHARE,
    "inter_collective_efficiency": _SHARE,
    "matmul_efficiency": _SHARE,
    # FP8 GEMMs' share of the FP8 peak over 16-bit GEMMs' share of theirs: near 1
    "fp8_matmul_ratio": Field("number", 0.0, 10.0, above=True),
    "attention_efficiency": _SHARE,
    "memory_efficiency": _SHARE,
    "step_jitter": Field("number", 0.0, 1.0),
    "sources": Field("table"),
}


def unknown_field(where: str, name: str, known) -> MalformedFile:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else f"; known: {', '.join(known)}"
    return MalformedFile(f"{where}: unknown field {name!r}{hint}")


def check_value(where: str, name: str, value, want: Field) -> None:
    """Kind first (a boolean is not a number), then the range."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    ok = {
        "number": number,
        "whole": number and isinstance(value, int),
        "text": isinstance(value, str),
        "names": isinstance(value, list) and all(isinstance(v, str) for v in value),
        "table": isinstance(value, dict),
    }[want.kind]
    if not ok:
        raise MalformedFile(f"{where}: field {name!r} must be {want.said()}, got {value!r}")
    if number and not (
        (want.low < value if want.above else want.low <= value) and value <= want.high
    ):
        raise MalformedFile(f"{where}: field {name!r} must be {want.range_said()}, got {value!r}")


def _check_fields(where: str, table: dict, schema: dict[str, Field], prefix: str) -> None:
    for name, value in table.items():
        if name not in schema:
            raise unknown_field(where, f"{prefix}{name}", [f"{prefix}{k}" for k in schema])
        check_value(where, f"{prefix}{name}", value, schema[name])


def check_table(where: str, t: dict) -> None:
    """One-line errors naming the field: unknown (with the closest known name), missing,
    of the wrong kind or out of its range."""
    if not isinstance(t, dict):
        raise MalformedFile(f"{where}: must be a table of fields, got {t!r}")
    _check_fields(where, t, FIELDS, "")
    for name in REQUIRED:
        if name not in t:
            raise MalformedFile(f"{where}: missing field {name!r}")
    _check_fields(where, t["dense_tflops"], dict.fromkeys(DTYPES, PEAK), "dense_tflops.")
    _check_fields(where, t["sources"], {k: Field("text") for k in t["sources"]}, "sources.")
    _check_fields(where, t.get("cluster", {}), CLUSTER_FIELDS, "cluster.")
