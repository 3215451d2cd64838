"""Serving: what the user's model (else a demo) serves on the target device under load,
simulated with ShareGPT lengths at a range of request rates: the answer of `ceiling.serve`
(as `ceiling serve --curve --slo ...` gives it), or its refusal."""

from __future__ import annotations

from ceiling import units
from ceiling.errors import CeilingError
from ceiling.report.compose import ReportContext, SectionOutput, Skip

KEY = "serving"
TITLE = "Serving: latency and throughput under load (simulated)"

REQUESTS = 300
DATASET = "sharegpt"
TENSOR_PARALLEL = (1, 2, 4, 8)  # GPUs tried, fewest first, until the weights fit
# MLPerf Inference v4.1's Llama-2-70B server latency targets: p99 TTFT 2 s, p99 TPOT 200 ms
SLO = "ttft_p99=2s,tpot_p99=200ms"


def serve_arguments(model: str, device: dict, tp: int) -> dict:
    """What the section asks `ceiling.serve` on `tp` GPUs: ShareGPT lengths, the
    latency–throughput curve and the highest rate within the SLO."""
    return {"model": model, **device, "tp": tp, "dataset": DATASET, "num_requests": REQUESTS,
            "curve": True, "slo": SLO}  # fmt: skip


def served(model: str, device: dict):
    """`ceiling.serve`'s result on the fewest GPUs (of TENSOR_PARALLEL) that hold the model,
    or Skip with its refusal on the most."""
    from ceiling.api.serve import serve
    from ceiling.report.sections._device import on_fewest

    result = on_fewest(lambda tp: serve(**serve_arguments(model, device, tp)), TENSOR_PARALLEL)
    if isinstance(result, CeilingError):
        raise Skip(f"ceiling serve refuses: {result}")
    return result


def run(ctx: ReportContext, out: SectionOutput) -> None:
    from ceiling.report.sections._device import device_arguments
    from ceiling.report.work import DEMO_DECODE_MODEL, subject

    cfg, model = ctx.work.shape_model(DEMO_DECODE_MODEL)
    device_args, resolved, device = device_arguments(ctx.work)
    name = resolved.spec.name
    out.about(*subject([(model, "--model", cfg.name), (device, "--spec", f"on {name}")]))
    ctx.step(f"simulating {cfg.name} served on {name}")
    result = served(model.value, device_args)
    curve, tp = result.curve, result.inputs["layout"]["tp"]
    out.text(
        "Simulated: continuous batching with chunked prefill and a paged KV cache (vLLM's "
        f"defaults), {REQUESTS} ShareGPT-length requests at rising rates."
    )
    _table(out, curve, f"{cfg.name} on {tp} × {name} (tensor parallel {tp})")
    top_rate, top = curve[-1]
    bands = result.accuracy()
    out.key_figures["accuracy"] = {k: b.to_json() for k, b in bands.items()}
    out.key("gpus", result.inputs["layout"]["gpus"])
    out.key("rate_per_s_at_capacity", top_rate)
    out.key("output_tokens_per_s_at_capacity", top.output_tokens_per_s)
    out.key("tpot_p50_s_at_lightest", curve[0][1].tpot_s.p50)
    if result.max_rate_per_s:
        rate, m = result.max_rate_per_s, result.at_max_rate
        out.key("highest_rate_within_slo", rate)
        out.highlight(
            "within p99 TTFT 2 s, TPOT 200 ms",
            f"{rate:.3g} requests/s ({m.output_tokens_per_s:,.0f} tok/s)",
            kind="modelled",
            error=bands["throughput"].short(),
        )
    out.note(
        "Modelled: `ceiling serve --measure URL` puts a running server's figures beside these; "
        f"throughput {bands['throughput'].text()}; latency {bands['latency'].text()} "
        "(held out from the published runs of this kind, as `ceiling serve` says)."
    )
    out.figure(result.figure(), "Latency against throughput as the request rate rises (log scale).")


def _table(out: SectionOutput, curve: list, title: str) -> None:
    """The lightest, a middle and the heaviest load (every rate is in the figure)."""
    shown = [curve[0], curve[len(curve) // 2], curve[-1]] if len(curve) > 3 else curve
    rows = [[f"{rate:.3g}", f"{m.output_tokens_per_s:,.0f}",
             units.format_time(m.ttft_s.p50), units.format_time(m.ttft_s.p99),
             units.format_time(m.tpot_s.p50), units.format_time(m.tpot_s.p99),
             f"{m.mean_batch:.0f}"] for rate, m in shown]  # fmt: skip
    out.table(
        title,
        ["requests/s", "output tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "batch"],
        rows,
    )
