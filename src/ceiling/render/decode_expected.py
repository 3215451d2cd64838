"""Expected decode speed beside the ceiling: JSON and a table."""

from __future__ import annotations

from ceiling import units as u


def expected_json(rows, costs) -> dict:
    return {
        "assumptions": {
            "bandwidth_share": costs.bandwidth_share,
            "per_kernel_s": costs.per_kernel_s,
            "kernels_per_layer": costs.kernels_per_layer,
            "kernels_outside_layers": costs.kernels_outside_layers,
            "int4_group_size": costs.group_size,
            "int4_scale_bytes_per_group": costs.scale_bytes,
            "cuda_graphs": costs.cuda_graphs,
            "graph_kernel_gap_s": costs.graph_kernel_s,
            "matmul_efficiency": costs.matmul_efficiency,
            "attention_efficiency": costs.attention_efficiency,
            "vector_peak_flops_per_s": costs.vector_peak_flops_per_s,
        },
        "rows": [
            {
                "batch": r.batch,
                "expected_tokens_per_s": r.tokens_per_s,
                "ceiling_tokens_per_s": r.ceiling_tokens_per_s,
                "step_s": r.step_s,
                "memory_s": r.memory_s,
                "compute_s": r.compute_s,
                "gemm_s": r.gemm_s,
                "attention_s": r.attention_s,
                "dequant_s": r.dequant_s,
                "quant_bytes": r.quant_bytes,
                "kernels": r.kernels,
                "launch_s": r.launch_s,
                "comm_s": r.comm_s,
                "limited_by": r.limited_by,
            }
            for r in rows
        ],
    }


def expected_table(rows, costs) -> tuple[str, list[str], list[list[str]]]:
    """Title, columns and rows of the expected-decode table."""
    cols = ["batch", "expected", "ceiling", "memory", "dequant", "launches", "all-reduce", "by"]
    body = [
        [
            str(r.batch),
            f"{r.tokens_per_s:,.1f}",
            f"{r.ceiling_tokens_per_s:,.1f}",
            u.format_time(r.memory_s),
            u.format_time(r.dequant_s) if r.dequant_s else "—",
            f"{r.kernels} × {u.format_time(costs.kernel_s)}",
            u.format_time(r.comm_s) if r.comm_s else "—",
            r.limited_by,
        ]
        for r in rows
    ]
    title = (
        f"Expected decode, tokens/s (bandwidth at {costs.bandwidth_share * 100:.0f} % of the "
        "figure, "
        + ("the CUDA-graph gap" if costs.cuda_graphs else "a floor")
        + " per kernel, int4 scales and zeros, dequantisation, all-reduces)"
    )
    return title, cols, body


def why_measured_low(cmp, roofs) -> str:
    """One sentence on the smallest measured batch: its share of the ceiling, the roof that
    holds it, and what is left unexplained."""
    r = min(cmp.rows, key=lambda row: row.batch)
    share = f"batch {r.batch} runs at {r.share_of_ceiling * 100:.1f} % of the ceiling"
    if not r.expected_tokens_per_s:
        return share
    where = "the last-level cache" if cmp.in_cache else "memory"
    held = {
        "memory": f"reading {u.format_bytes(cmp.run.weight_bytes)} of weights from {where} "
        f"({u.format_time(r.expected_memory_s)})",
        "launches": f"per-op overhead: {u.format_time(r.expected_launch_s)} of dispatch at "
        f"{u.format_time(roofs.per_op_s)} per op",
        "compute": "the compute roof",
    }.get(r.expected_limited_by, r.expected_limited_by)
    rest = r.expected_tokens_per_s / r.measured_tokens_per_s
    gap = (
        f"measured is {rest:.2g}× slower than that: the rest is unexplained (threads, small "
        "kernels below their roof, a busy machine)"
        if rest > 1.3
        else "measured is close to that"
    )
    return f"{share}: expected {r.expected_tokens_per_s:,.1f} tokens/s, held by {held}; {gap}"
