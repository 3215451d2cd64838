"""Serving: what the user's model (else a demo) serves on the target device under load,
simulated with ShareGPT lengths at a range of request rates."""

from __future__ import annotations

from ceiling.errors import CeilingError
from ceiling.report.compose import ReportContext, SectionOutput, Skip
from ceiling.report.validated import SERVING_LATENCY, SERVING_THROUGHPUT

KEY = "serving"
TITLE = "Serving: latency and throughput under load (simulated)"

REQUESTS = 300
SHARES = (0.1, 0.3, 0.5, 0.7, 0.9)  # of the offline capacity
TENSOR_PARALLEL = (1, 2, 4, 8)  # GPUs tried, fewest first, until the weights fit
# MLPerf Inference v4.1's Llama-2-70B server latency targets: p99 TTFT 2 s, p99 TPOT 200 ms
SLO_TTFT_P99_S, SLO_TPOT_P99_S = 2.0, 0.2


def run(ctx: ReportContext, out: SectionOutput) -> None:
    from ceiling import units
    from ceiling.model.serve import engine as eng
    from ceiling.model.serve.workload import dataset_lengths
    from ceiling.report.work import DEMO_DECODE_MODEL, subject

    cfg, model = ctx.work.shape_model(DEMO_DECODE_MODEL)
    resolved, device = ctx.work.cluster_device()
    spec = resolved.spec
    out.about(*subject([(model, "--model", cfg.name), (device, "--spec", f"on {spec.name}")]))
    ctx.step(f"simulating {cfg.name} served on {spec.name}")
    engine = _fewest_gpus(cfg, spec)
    prompt, output = dataset_lengths("sharegpt", REQUESTS)
    curve = eng.rate_curve(engine, prompt, output, SHARES)
    tp = engine.layout.tp
    out.text(
        "Simulated: continuous batching with chunked prefill and a paged KV cache (vLLM's "
        f"defaults), {REQUESTS} ShareGPT-length requests at rising rates."
    )
    rows = []
    # the lightest, a middle and the heaviest load in the table; every rate in the figure
    shown = [curve[0], curve[len(curve) // 2], curve[-1]] if len(curve) > 3 else curve
    for rate, m in shown:
        rows.append([f"{rate:.3g}", f"{m.output_tokens_per_s:,.0f}",
                     units.format_time(m.ttft_s.p50), units.format_time(m.ttft_s.p99),
                     units.format_time(m.tpot_s.p50), units.format_time(m.tpot_s.p99),
                     f"{m.mean_batch:.0f}"])  # fmt: skip
    out.table(
        f"{cfg.name} on {tp} × {spec.name} (tensor parallel {tp})",
        ["requests/s", "output tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "batch"],
        rows,
    )
    met = [
        (rate, m)
        for rate, m in curve
        if m.ttft_s.p99 <= SLO_TTFT_P99_S and m.tpot_s.p99 <= SLO_TPOT_P99_S
    ]
    top_rate, top = curve[-1]
    from ceiling.validation.features import serving_bands_of, serving_features_of

    features = serving_features_of(cfg, spec, True, "bf16")
    out.key_figures["accuracy"] = {k: b.to_json() for k, b in serving_bands_of(features).items()}
    out.key("gpus", tp)
    out.key("rate_per_s_at_90_percent", top_rate)
    out.key("output_tokens_per_s_at_90_percent", top.output_tokens_per_s)
    out.key("tpot_p50_s_at_10_percent", curve[0][1].tpot_s.p50)
    if met:
        rate, m = met[-1]
        out.key("highest_rate_within_slo", rate)
        out.highlight(
            "within p99 TTFT 2 s, TPOT 200 ms",
            f"{rate:.3g} requests/s ({m.output_tokens_per_s:,.0f} tok/s)",
            kind="modelled",
            error=SERVING_THROUGHPUT.short(),
        )
    out.note(
        "Modelled: `ceiling serve --measure URL` puts a running server's figures beside these; "
        f"median error {SERVING_THROUGHPUT.median_abs_error:.0%} on throughput "
        f"({SERVING_THROUGHPUT.runs} published runs), {SERVING_LATENCY.median_abs_error:.0%} "
        f"on latency ({SERVING_LATENCY.runs})."
    )
    from ceiling.render.serve_plot import serve_figure

    out.figure(
        serve_figure(curve, f"{cfg.name} on {tp} × {spec.name}: simulated"),
        "Latency against throughput as the request rate rises (log scale).",
    )


def _fewest_gpus(cfg, spec):
    from ceiling.model.decode import DecodeSetup
    from ceiling.model.decode_expected import costs_for
    from ceiling.model.serve.engine import Engine, Layout

    for tp in TENSOR_PARALLEL:
        try:
            return Engine(cfg, spec, DecodeSetup(tp=tp), costs_for(spec), Layout(tp=tp))
        except CeilingError:
            continue
    raise Skip(f"{cfg.name} does not fit on {max(TENSOR_PARALLEL)} × {spec.name}")
