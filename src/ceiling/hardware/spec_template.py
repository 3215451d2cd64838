"""A device entry written back as TOML: the commented template users start from.

`spec_to_toml(spec)` writes any DeviceSpec in the catalog's schema and datasheet units;
reading the text back (`catalog.load_spec_file`) gives the same spec, and writing that
again gives the same text. `template_text()` is the example entry `ceiling specs
--template` prints.
"""

from __future__ import annotations

import json

from ceiling.hardware.catalog import (
    _GB,
    _GIB,
    _MIB,
    _SOURCE_FIELDS,
    _TFLOPS,
    DTYPES,
    DeviceSpec,
    _spec_from_table,
)
from ceiling.hardware.spec_schema import CLUSTER_FIELDS

TEMPLATE_KEY = "my-gpu"

_HEADER = """\
# A device for ceiling, in the schema of its built-in catalog (`ceiling specs NAME` shows
# the built-in entries; `ceiling specs --template NAME` prints one in this form).
# Use it with --spec path/to/this.toml in any command that takes --spec, or put the file
# in a directory named by CEILING_CATALOG (several: separated by the OS path separator)
# so the GPU is recognised by its driver name wherever ceiling looks one up.
# Units are the datasheet's: TFLOP/s = 1e12 FLOP/s (a multiply-add counts 2), GiB = 2^30
# bytes, GB/s = 1e9 bytes/s, MiB = 2^20 bytes. Every number needs a line in [.sources].
"""

_COMMENTS = {
    "name": "shown in every output",
    "vendor": "NVIDIA, AMD, Intel, Google, Apple, ...",
    "kind": "gpu, tpu, accelerator or cpu",
    "driver_names": "what torch.cuda.get_device_name() / nvidia-smi / rocm-smi print",
    "memory_gib": "device memory; HBM and GDDR sizes are binary (80GB cards show 81920 MiB)",
    "memory_bandwidth_gb_per_s": "peak DRAM bandwidth",
    "link_gb_per_s_one_way": "device-to-device link (NVLink, Infinity Fabric, ICI), ONE "
    "direction: half the usual both-ways figure",
    "pcie_gb_per_s_one_way": "host link, one direction (PCIe 4.0 x16: 32, 5.0 x16: 64)",
    "l2_mib": "last-level on-chip cache",
    "sms": "streaming multiprocessors (NVIDIA) or compute units (AMD)",
    "compute_capability": "CUDA compute capability (HIP's major.minor on AMD): with the SM "
    "count it identifies the device in a trace",
    "gcn_arch": "AMD's LLVM target, e.g. gfx942",
}
_OPTIONAL = ("link_gb_per_s_one_way", "pcie_gb_per_s_one_way", "l2_mib", "sms")

# The example the template shows: round numbers that are obviously to be replaced.
_EXAMPLE = {
    "name": "My GPU",
    "vendor": "Example",
    "kind": "gpu",
    "driver_names": ["Example GPU 80GB"],
    "memory_gib": 80,
    "memory_bandwidth_gb_per_s": 2000,
    "link_gb_per_s_one_way": 300,
    "pcie_gb_per_s_one_way": 64,
    "l2_mib": 50,
    "sms": 100,
    "dense_tflops": {"fp32": 50, "tf32": 400, "bf16": 800, "fp16": 800, "fp8": 1600},
    "sources": {
        "datasheet": "the document the numbers come from (title and URL)",
        "peaks": "the datasheet's line for each dtype; 2:4-sparse figures (marked *) halved",
        "memory": "the datasheet's memory size and bandwidth",
        "link": "the datasheet's NVLink / fabric figure, both directions, halved",
        "pcie": "PCIe generation and width",
        "l2": "the architecture whitepaper's L2 size",
        "sms": "the whitepaper's SM / CU count",
    },
    "cluster": {
        "devices_per_node": 8,
        "inter_node_gb_per_s": 50,
        "matmul_efficiency": 0.7,
        "sources": {
            "network": "NICs per node and their speed, per device, one direction",
            "efficiency": "achieved / dense peak for large 16-bit GEMMs (a measured profile "
            "replaces it)",
        },
    },
}


def _number(value: float) -> str:
    """Datasheet units, shortest form that reads back as the same figure."""
    return f"{value:.12g}"


def _text(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a TOML basic string


def _line(name: str, value: str) -> str:
    comment = _COMMENTS.get(name)
    return f"{name} = {value}" + (f"  # {comment}" if comment else "")


def _device_lines(spec: DeviceSpec) -> list[str]:
    values = {
        "memory_gib": spec.memory_bytes / _GIB,
        "memory_bandwidth_gb_per_s": spec.memory_bandwidth_bytes_per_s / _GB,
        "link_gb_per_s_one_way": _scaled(spec.link_bandwidth_bytes_per_s, _GB),
        "pcie_gb_per_s_one_way": _scaled(spec.pcie_bandwidth_bytes_per_s, _GB),
        "l2_mib": _scaled(spec.l2_bytes, _MIB),
        "sms": spec.sms,
    }
    lines = [
        f"[{spec.key}]",
        _line("name", _text(spec.name)),
        _line("vendor", _text(spec.vendor)),
        _line("kind", _text(spec.kind)),
        _line("driver_names", "[" + ", ".join(_text(n) for n in spec.driver_names) + "]"),
    ]
    for name, value in values.items():
        if value is None:
            lines.append(f"# {_line(name, '...')}  (not known: leave out)")
        else:
            lines.append(_line(name, _number(value)))
    for name in ("compute_capability", "gcn_arch"):
        if (value := getattr(spec, name)) is not None:
            lines.append(_line(name, _text(value)))
    return lines


def _scaled(value: float | None, unit: float) -> float | None:
    return None if value is None else value / unit


def _sources_lines(spec: DeviceSpec) -> list[str]:
    # A device detected or measured here (`this_machine`, a machine profile) has one source
    # for all its numbers ("all"): it stands for the document and for each group.
    every = spec.sources.get("all")
    lines = [
        "",
        f"[{spec.key}.sources]  # where every number comes from; other keys are notes",
        f"datasheet = {_text(spec.sources.get('datasheet') or every or '')}",
    ]
    covered = {"datasheet", "all"} if every else {"datasheet"}
    for group, fields in _SOURCE_FIELDS.items():
        text = next((spec.sources[f] for f in fields if spec.sources.get(f)), None)
        if text is None and every and any(getattr(spec, f) is not None for f in fields):
            text = every
        covered.update(fields)
        if text is not None:
            lines.append(f"{group} = {_text(text)}")
    lines += [f"{k} = {_text(v)}" for k, v in spec.sources.items() if k not in covered]
    return lines


def _cluster_lines(spec: DeviceSpec) -> list[str]:
    c = spec.cluster_defaults
    head = f"[{spec.key}.cluster]"
    note = "  # optional: node and network defaults for `ceiling plan` (model/clusters.toml)"
    if not c:
        return ["", f"# {head}{note}", "# devices_per_node = 8", "# inter_node_gb_per_s = 50"]
    lines = ["", head + note]
    lines += [f"{k} = {_number(c[k])}" for k in CLUSTER_FIELDS if k in c and k != "sources"]
    if c.get("sources"):
        lines += ["", f"[{spec.key}.cluster.sources]"]
        lines += [f"{k} = {_text(v)}" for k, v in c["sources"].items()]
    return lines


def spec_to_toml(spec: DeviceSpec) -> str:
    """The entry in the catalog's schema, commented; loads back as the same spec."""
    peaks = [
        "",
        f"[{spec.key}.dense_tflops]  # dense peak per dtype (int8: 1e12 op/s); halve a "
        "2:4-sparse (starred) figure",
    ]
    peaks += [
        f"{d} = {_number(spec.peak_flops_per_s[d] / _TFLOPS)}"
        for d in DTYPES
        if d in spec.peak_flops_per_s
    ]
    body = _device_lines(spec) + peaks + _sources_lines(spec) + _cluster_lines(spec)
    return _HEADER + "\n" + "\n".join(body) + "\n"


def template_text() -> str:
    """The commented example entry users copy and fill in."""
    return spec_to_toml(_spec_from_table(TEMPLATE_KEY, _EXAMPLE))
