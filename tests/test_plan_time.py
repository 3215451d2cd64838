"""The planner's time side with hand-computed cases: FP8 linear layers and their casts,
context parallelism's K/V ring, overlap (exposed vs hidden), GEMM tile utilisation and the
attention kernels' own efficiency."""

import dataclasses

import pytest

from ceiling.errors import InvalidInput
from ceiling.hardware.catalog import get_spec
from ceiling.model.cluster import make_cluster
from ceiling.model.plan import communication, costs
from ceiling.model.plan import step as par
from ceiling.model.plan.attention_kernels import attention_share
from ceiling.model.plan.eager_kernels import eager_extra_bytes_per_token
from ceiling.model.plan.step import Job, Plan, evaluate_plan
from ceiling.model.transformer import get_model, parse_model

H100 = get_spec("h100-sxm")
# Without an SM count every GEMM runs at the large-GEMM rate: the FLOP accounting alone.
H100_NO_TILES = dataclasses.replace(H100, sms=None)
# h = 1024, 8 heads, FFN 4096 (GELU), no biases: 12·h² = 12,582,912 linear weights a layer.
SMALL = parse_model(
    "custom:layers=2,hidden=1024,heads=8,vocab=1000,max_seq=2048,norm=rmsnorm,bias=false"
)


def test_fp8_cast_bytes_per_token_by_hand():
    sh = costs.shape_of(SMALL)
    fwd, bwd = costs.fp8_cast_bytes_per_token(sh, 1)
    # Linear inputs: QKV h, projection q, FFN up h, FFN down f = 1024+1024+1024+4096 = 7168
    # elements; output gradients: 3072 + 1024 + 4096 + 1024 = 9216; 4 bytes each (read 2,
    # write the FP8 tensor and its transpose).
    assert float(fwd) == 4 * 7168 == 28672
    assert float(bwd) == 4 * 9216 == 36864


def test_fp8_time_split_by_hand():
    # The GPU's side alone: this 2-layer model's layers take the host longer to launch than
    # the GPU to run (`host`), and FP8's casts are more kernels to launch.
    job = Job(SMALL, 8, 2048, attention="flash", dropout=False, host_kernel_s=0.0)
    c = make_cluster(H100_NO_TILES, 1)
    off = evaluate_plan(job, c, Plan(1, 1, 1, 1, recompute="none"))
    on = evaluate_plan(job, c, Plan(1, 1, 1, 1, recompute="none", fp8="linear"))
    tokens, eff = 8 * 2048, c.matmul_efficiency
    # 2 layers × 2 FLOPs per weight × 3 (forward + backward) × 12·h² weights.
    linear = tokens * 2 * 2 * 3 * 12 * 1024**2
    logits = tokens * 6 * 1024 * 1000
    # FP8 GEMMs reach 0.883 of the 16-bit GEMMs' share of peak on an H100 (published MAMF:
    # 70.9 % of 1979 against 80.3 % of 989).
    assert on.time["fp8_matmul_s"] == pytest.approx(linear / (1979e12 * eff * 0.883))
    assert on.time["matmul_s"] == pytest.approx(logits / (989.5e12 * eff))  # stays 16-bit
    assert off.time["matmul_s"] == pytest.approx((linear + logits) / (989.5e12 * eff))
    assert off.time["fp8_matmul_s"] == off.time["fp8_cast_s"] == 0
    # Casts: 64 KiB per token per layer, the weights once per step (4 bytes each), and per
    # micro-batch (8 of them) each layer's amax histories: 4 linear layers × 3 tensors ×
    # 1024 fp32 values, read and written.
    amax = 8 * 2 * 4 * 3 * 1024 * 4 * 2
    cast_bytes = tokens * 2 * 65536 + 4 * 2 * 12 * 1024**2 + amax
    assert on.time["fp8_cast_s"] == pytest.approx(cast_bytes / c.memory_bytes_per_s)
    # Attention, memory-bound kernels and the optimizer do not change.
    for key in ("attention_s", "elementwise_s", "optimizer_s"):
        assert on.time[key] == pytest.approx(off.time[key])
    # FP8 keeps each linear weight cast (and its transpose): 2 bytes per linear weight.
    assert on.memory["fp8_weight_bytes"] == 2 * 2 * 12 * 1024**2
    assert on.step_time_s < off.step_time_s


def test_fp8_params_keep_the_weights_in_fp8_by_hand():
    # 2 layers of 12·h² linear weights; d = 4 replicas, ZeRO-1, 16-bit gradients.
    job = Job(SMALL, 8, 2048, attention="flash", dropout=False)
    c = make_cluster(H100_NO_TILES, 4)
    base = dict(micro_batch=1, zero=1, recompute="none", state_bytes_per_param=16, fp8="linear")
    copies = evaluate_plan(job, c, Plan(4, 1, 1, **base))
    kept = evaluate_plan(job, c, Plan(4, 1, 1, fp8_params=True, **base))
    linear = 2 * 12 * 1024**2
    # Transformer Engine's default: the 16-bit weight plus its FP8 cast and transpose (2 bytes);
    # fp8_params: the FP8 weight (1 byte) in place of the 16-bit one, and its transpose (1).
    assert copies.memory["fp8_weight_bytes"] == 2 * linear
    assert kept.memory["fp8_weight_bytes"] == 1 * linear
    assert copies.memory["weight_bytes"] - kept.memory["weight_bytes"] == linear
    assert copies.memory_bytes_per_device - kept.memory_bytes_per_device == 2 * linear
    # Time: the weights' per-step cast (4 bytes each) becomes a transpose (2: read, write) ...
    cast_saved = (copies.time["fp8_cast_s"] - kept.time["fp8_cast_s"]) * c.memory_bytes_per_s
    assert cast_saved == pytest.approx(2 * linear)
    # ... and the updated weights are gathered in FP8: a byte less per linear weight.
    assert kept.dp_comm_s < copies.dp_comm_s
    with pytest.raises(InvalidInput, match="fp8_params=on keeps FP8 weights"):
        par.check_plan(job, c, Plan(4, 1, 1, fp8_params=True))


def test_eager_pointwise_bytes_by_hand():
    # SMALL: h = q = k = 1024 (no grouped KV), GELU, RMSNorm, rotary. Per token, beyond the
    # fused kernels: two RMSNorms written as ops, (36 - 4)·h forward and (76 - 4)·h backward
    # each; the rotary embedding on Q and K, 20 bytes an element each way; the attention
    # output's contiguous copy, 4·q each way; GELU is one kernel eager or not.
    fwd, bwd = eager_extra_bytes_per_token(costs.shape_of(SMALL), 1, False, dropout=False)
    assert float(fwd) == 2 * 32 * 1024 + 20 * 2048 + 4 * 1024 == 110592
    assert float(bwd) == 2 * 72 * 1024 + 20 * 2048 + 4 * 1024 == 192512
    # Grouped KV (2 KV heads of 128 for 8 query heads) and SwiGLU (FFN 2048): repeat_kv
    # copies K and V to the query width, 2·(2·256 + 2·1024) each way; silu and the product
    # are two kernels: 4 bytes an FFN element more forward, 10 backward.
    gqa = parse_model(
        "custom:layers=2,hidden=1024,heads=8,kv_heads=2,ffn_hidden=2048,ffn_kind=swiglu,"
        "vocab=1000,max_seq=2048,norm=rmsnorm,bias=false"
    )
    fwd2, bwd2 = eager_extra_bytes_per_token(costs.shape_of(gqa), 1, False, dropout=False)
    assert float(fwd2) == 2 * 32 * 1024 + 20 * 1280 + 2 * (512 + 2048) + 4 * 1024 + 4 * 2048
    assert float(bwd2) == 2 * 72 * 1024 + 20 * 1280 + 2 * (512 + 2048) + 4 * 1024 + 10 * 2048
    # LayerNorm and learned positions: one native kernel each, nothing added but the copy.
    gpt = parse_model("custom:layers=2,hidden=1024,heads=8,vocab=1000,max_seq=2048,"
                      "norm=layernorm,learned_positions=true")  # fmt: skip
    assert float(eager_extra_bytes_per_token(costs.shape_of(gpt), 1, False, False)[0]) == 4096


def test_eager_kernels_are_priced_at_the_memory_bandwidth_and_shown_apart():
    job = Job(SMALL, 8, 2048, attention="flash", dropout=False)
    c = make_cluster(H100_NO_TILES, 1)
    fused = evaluate_plan(job, c, Plan(1, 1, 1, 1, recompute="none"))
    eager = evaluate_plan(job, c, Plan(1, 1, 1, 1, recompute="none", kernels="eager"))
    tokens_layers = 8 * 2048 * 2
    expected = tokens_layers * (110592 + 192512) / c.memory_bytes_per_s
    assert fused.time["eager_kernels_s"] == 0
    assert eager.time["eager_kernels_s"] == pytest.approx(expected)
    assert eager.step_time_s > fused.step_time_s
    # Full recompute runs the eager forward once more in the backward.
    full = evaluate_plan(job, c, Plan(1, 1, 1, 1, recompute="full", kernels="eager"))
    again = tokens_layers * 110592 / c.memory_bytes_per_s
    assert full.time["eager_kernels_s"] == pytest.approx(expected + again)
    assert "kernels=eager" in eager.plan.describe()


def test_fp8_needs_a_device_with_fp8():
    job = Job(SMALL, 8, 2048, attention="unfused")
    with pytest.raises(InvalidInput, match="fp8=linear needs FP8"):
        par.check_plan(job, make_cluster(get_spec("a100-80gb"), 1), Plan(1, 1, 1, fp8="linear"))


def test_context_parallel_ring_volume_per_layer_by_hand():
    sh = costs.shape_of(get_model("llama-3-70b"))  # 8 KV heads of 128: k = 1024
    # b = 1, s = 8192, t = 4 (k/t = 256 per device), c = 2: (c-1)/c · 2·b·s·k/t · 2 bytes.
    per_rank_tokens = 8192 // 2
    ring = costs.cp_ring_bytes_per_layer(sh, per_rank_tokens, 4, 2)
    assert float(ring) == 0.5 * 2 * 8192 * 256 * 2 == 4_194_304
    # c = 4: three ring steps of a quarter each.
    assert float(costs.cp_ring_bytes_per_layer(sh, 8192 // 4, 4, 4)) == 0.75 * 2 * 8192 * 256 * 2
    assert float(costs.cp_ring_bytes_per_layer(sh, 8192, 4, 1)) == 0


def test_context_parallel_time_memory_and_devices():
    model = get_model("llama-3-70b")
    job = Job(model, 16, 8192, attention="flash", dropout=False)
    c = make_cluster(H100, 64)
    base = Plan(4, 4, 4, 1, zero=1, recompute="none")
    cp2 = dataclasses.replace(base, d=2, cp=2)
    exposed = dataclasses.replace(cp2, cp_overlap=False)
    r1, r2, rx = (evaluate_plan(job, c, pl) for pl in (base, cp2, exposed))
    assert cp2.devices == 2 * 4 * 4 * 2 == 64
    # Each rank holds half of each sequence: half the activations of a micro-batch.
    per_mb = r2.memory["layer_activation_bytes"] / r1.memory["layer_activation_bytes"]
    m1, m2 = r1.micro_batches, r2.micro_batches
    assert per_mb == pytest.approx(0.5 * min(4, m2) / min(4, m1))
    # Without overlap the whole ring is exposed: per layer forward 1 pass, backward 2, over
    # the NVLink inside the node (t·cp = 8), each of the c-1 steps paying the latency.
    bw, lat = c.link(False)
    ring = 0.5 * 2 * 8192 * 256 * 2
    per_mb_s = 20 * 3 * (ring / bw + lat)  # 20 layers on a device (80 over p = 4)
    assert rx.time["cp_comm_s"] == pytest.approx(m2 * per_mb_s)
    assert rx.hidden["cp"] == 0
    # With overlap it hides behind attention; a share OVERLAP_COST still counts.
    assert r2.hidden["cp"] == pytest.approx(m2 * per_mb_s)
    assert r2.time["cp_comm_s"] == pytest.approx(communication.OVERLAP_COST * m2 * per_mb_s)
    with pytest.raises(InvalidInput, match=r"× cp\(2\) = 128 devices"):
        par.check_plan(job, c, dataclasses.replace(cp2, d=4))
    with pytest.raises(InvalidInput, match=r"seq_len\(8192\) % \(2 × cp\(3\)\)"):
        par.check_plan(job, make_cluster(H100, 96), dataclasses.replace(cp2, cp=3))


def test_tensor_parallel_overlap_hides_all_but_one_chunk():
    job = Job(get_model("gpt3-175b"), 256, 2048, attention="flash")
    c = make_cluster(H100, 128)
    off = evaluate_plan(job, c, Plan(4, 4, 8, 1, 6, zero=1, recompute="none"))
    on = evaluate_plan(job, c, Plan(4, 4, 8, 1, 6, zero=1, recompute="none", tp_overlap=True))
    total = off.time["tp_comm_s"]
    assert off.hidden["tp"] == 0
    # GEMMs are long enough here: (t-1)/t of the traffic hides, OVERLAP_COST of it counts.
    assert on.hidden["tp"] == pytest.approx(total * 3 / 4)
    assert on.time["tp_comm_s"] == pytest.approx(
        total - (1 - communication.OVERLAP_COST) * total * 3 / 4
    )
    assert on.step_time_s < off.step_time_s
    assert "tp_overlap=on" in on.plan.describe() and "tp_overlap" not in off.plan.describe()


def test_fsdp_prefetch_off_exposes_the_gathers():
    job = Job(get_model("llama-2-7b"), 64, 4096, attention="flash", dropout=False)
    c = make_cluster(H100, 16)
    on = evaluate_plan(job, c, Plan(16, 1, 1, 1, zero=3))
    off = evaluate_plan(job, c, Plan(16, 1, 1, 1, zero=3, fsdp_prefetch=False))
    assert off.hidden["dp"] == 0 < on.hidden["dp"]
    assert off.time["dp_exposed_s"] == pytest.approx(off.dp_comm_s)
    assert on.time["dp_exposed_s"] < off.time["dp_exposed_s"]
    assert "prefetch=off" in off.plan.describe()


def test_gemm_tile_utilisation_by_hand():
    # 2048 × 1024 on 132 SMs: 128×256 tiles make 64 (one half-empty wave), 128×128 tiles
    # make 128 (one wave, 4 SMs idle): 128/132.
    assert float(costs.gemm_tile_utilisation(2048, 1024, 132)) == pytest.approx(128 / 132)
    # Exactly 132 full tiles: nothing lost.
    assert float(costs.gemm_tile_utilisation(128 * 132, 256, 132)) == pytest.approx(1.0)
    # One row: a 128-row tile is 1/128 useful.
    assert float(costs.gemm_tile_utilisation(1, 256 * 132, 132)) == pytest.approx(1 / 128)


def test_small_gemms_run_further_from_peak():
    job_big = Job(get_model("llama-2-7b"), 64, 4096, attention="flash", dropout=False)
    job_small = Job(get_model("llama-2-7b"), 64, 256, attention="flash", dropout=False)
    c = make_cluster(H100, 8)
    plan = Plan(1, 8, 1, 1, recompute="none")
    big, small = evaluate_plan(job_big, c, plan), evaluate_plan(job_small, c, plan)
    sh = costs.shape_of(get_model("llama-2-7b"))
    # Per token the linear layers cost the same FLOPs; the short micro-batch is slower per token.
    per_token_big = big.time["matmul_s"] / (64 * 4096)
    per_token_small = small.time["matmul_s"] / (64 * 256)
    assert per_token_small > 1.1 * per_token_big
    assert float(costs.linear_gemm_efficiency(sh, 256, 8, 132)) < 0.8
    assert float(costs.linear_gemm_efficiency(sh, 4096, 8, 132)) > 0.9


def test_flash_attention_runs_the_causal_blocks_at_its_own_efficiency():
    assert float(costs.causal_attention_share(2048)) == pytest.approx((2048 + 128) / 4096)
    assert float(costs.causal_attention_share(64)) == 1.0
    job = Job(SMALL, 8, 2048, attention="flash", dropout=False)
    c = make_cluster(H100_NO_TILES, 1)
    r = evaluate_plan(job, c, Plan(1, 1, 1, 1, recompute="none"))
    flops = (
        8 * 2048 * 2 * 3 * float(costs.layer_attention_flops_per_token(costs.shape_of(SMALL), 2048))
    )
    # Hopper: the published cuDNN kernel curve (Transformer Engine's default) at this head
    # dim and length, not one number per device.
    share = float(attention_share("cudnn", SMALL.head_dim, 2048))
    expected = flops * (2048 + 128) / 4096 / (989.5e12 * share)
    assert r.time["attention_s"] == pytest.approx(expected)
    unfused = evaluate_plan(
        Job(SMALL, 8, 2048, dropout=False, attention="unfused"),
        c,
        Plan(1, 1, 1, 1, recompute="none"),
    )
    assert unfused.time["attention_s"] == pytest.approx(flops / c.matmul_flops_per_s)


def test_a_measured_profile_sets_the_fp8_share_apart_from_the_16_bit_one(tmp_path):
    from ceiling.api.plan import plan
    from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile

    device = MeasuredDevice(
        name="NVIDIA H100 80GB HBM3",
        kind="cuda",
        peak_flops_per_s={"bf16": 800e12, "fp8": 1300e12},
        bandwidth_bytes_per_s=2.9e12,
    )
    path = tmp_path / "profile.json"
    save_profile(MachineProfile(1, "2026-01-01T00:00:00Z", "node0", {}, [device]), path)
    fixed = "d=8,t=2,p=1,b=1,zero=1,recompute=none,fp8=linear"
    res = plan(
        "llama-2-7b", 16, machine_profile=path, global_batch=64, seq=4096, fixed=fixed, top=1
    )
    c = res.cluster
    assert c.matmul_efficiency == pytest.approx(800 / 989.5)
    assert c.fp8_matmul_efficiency == pytest.approx(1300 / 1979)
    best = res.best
    sh = costs.shape_of(get_model("llama-2-7b"))
    util = float(costs.linear_gemm_efficiency(sh, 4096, 2, H100.sms))
    linear = 64 * 4096 * 32 * 3 * 2 * get_model("llama-2-7b").params_layer_matmul_active / 16
    assert best.time["fp8_matmul_s"] == pytest.approx(linear / (1300e12 * util))
    # --dtype fp8 plans FP8 as real runs do: linear layers only, MFU against the 16-bit peak.
    res8 = plan("llama-2-7b", 16, spec="h100-sxm", global_batch=64, seq=4096, dtype="fp8", top=1)
    assert res8.best.plan.fp8 == "linear" and res8.cluster.dtype == "bf16"
    assert res8.best.time["attention_s"] > 0 and res8.best.time["fp8_cast_s"] > 0


def test_fp8_gemms_take_the_published_ratio_or_else_the_16_bit_share(cli):
    from ceiling.hardware.resolve import resolve
    from ceiling.model.plan.training import plan_cluster

    h100 = make_cluster(H100, 8)
    assert h100.fp8_matmul_ratio == 0.883 and h100.sources["fp8"]
    assert h100.fp8_efficiency == pytest.approx(0.75 * 0.883)
    # A given 16-bit efficiency carries the ratio with it; a measured FP8 share replaces both.
    given = plan_cluster(resolve("h100-sxm"), 8, matmul_efficiency=0.6)
    assert given.fp8_efficiency == pytest.approx(0.6 * 0.883)
    measured = dataclasses.replace(h100, fp8_matmul_efficiency=0.5)
    assert measured.fp8_efficiency == 0.5 and "measured" in measured.fp8_efficiency_source
    # The B200's FP8 ratio is measured too (MAMF table: 76.3 % over 77.6 %); no FP8 GEMM
    # figure is published for the MI355X: its FP8 GEMMs take the 16-bit share.
    b200 = make_cluster(get_spec("b200"), 8)
    assert b200.fp8_matmul_ratio == 0.983 and "3432.5 of 4500" in b200.sources["fp8"]
    mi355x = make_cluster(get_spec("mi355x"), 8)
    assert mi355x.fp8_matmul_ratio is None
    assert mi355x.fp8_efficiency == mi355x.matmul_efficiency
    assert "no FP8 GEMM figure published for mi355x" in mi355x.fp8_efficiency_source
    with pytest.raises(InvalidInput, match="fp8_matmul_ratio"):
        dataclasses.replace(h100, fp8_matmul_ratio=0.0)
    args = ["plan", "llama-2-7b", "--spec", "h100-sxm", "-n", "8", "-k", "1", "--dtype", "fp8"]
    code, out, _ = cli(*args)
    assert code == 0
    assert "FP8 GEMMs at 0.66 of the FP8 peak (the 16-bit share × 0.883" in " ".join(out.split())
    code, out, _ = cli(*args, "--json")
    assumed = __import__("json").loads(out)["assumptions"]
    assert assumed["fp8_matmul_efficiency"] == pytest.approx(0.75 * 0.883)
    assert "published FP8/16-bit GEMM ratio" in assumed["fp8_efficiency_source"]


def test_a_plan_losing_to_its_exposed_ring_says_so():
    from ceiling.model.plan.why_slower import explain_loss

    job = Job(get_model("llama-3-70b"), 32, 8192, attention="flash", dropout=False)
    c = make_cluster(H100, 256)
    hidden = Plan(8, 8, 1, 1, zero=1, recompute="none", cp=4)
    exposed = dataclasses.replace(hidden, cp_overlap=False)
    best, worse = evaluate_plan(job, c, hidden), evaluate_plan(job, c, exposed)
    assert any("ring (t=8 × cp=4) spans nodes" in n for n in best.notes)
    assert worse.step_time_s > best.step_time_s
    assert "context-parallel K/V ring" in explain_loss(worse, best)
    assert "not overlapped" in explain_loss(worse, best)


def test_the_command_shows_the_new_fields_in_help_json_and_text(cli):
    code, out, _ = cli("plan", "--help")
    assert code == 0
    for word in (
        "cp (context_parallel",
        "fp8 (off or linear",
        "tp_overlap",
        "cp_overlap",
        "prefetch",
    ):
        assert word in " ".join(out.split()), word
    args = ["plan", "llama-3-70b", "--spec", "h100-sxm", "-n", "64", "--global-batch", "128"]
    args += ["--seq", "8192", "--fixed", "cp=2,t=4,p=4,v=5,b=1,recompute=none,tp_overlap=on"]
    code, out, err = cli(*args, "--dtype", "fp8", "-k", "1", "--json")
    assert code == 0, err
    import json

    best = json.loads(out)["plans"][0]
    assert (best["cp"], best["fp8"], best["tp_overlap"]) == (2, "linear", True)
    for key in ("attention_s", "fp8_matmul_s", "fp8_cast_s", "cp_comm_s", "tp_comm_s"):
        assert key in best["time_breakdown_s"]
    assert best["hidden_comm_s"]["tp"] > 0 and best["hidden_comm_s"]["cp"] > 0
    assert best["memory_breakdown_bytes"]["fp8_weight_bytes"] > 0
    code, out, _ = cli(*args, "--dtype", "fp8", "-k", "1")
    assert code == 0
    assert "communication hidden behind compute" in out and "fp8 matmul" in out
    assert "FP8 weight copies" in " ".join(out.split())
    code, _, err = cli(*args[:-2], "--fixed", "cp=3,t=4,p=4", "-k", "1")
    assert code == 2 and "2 × cp(3)" in err


def test_skinny_gemms_fall_under_the_memory_roof():
    m, n, k = 512, 2304, 16384
    assert float(costs.gemm_intensity(m, n, k)) == pytest.approx(
        m * n * k / (m * k + k * n + m * n)
    )
    sh = costs.shape_of(get_model("llama-3-405b"))
    # 64 tokens a device: every GEMM's intensity is about 60 FLOP/byte, under an H100's
    # ridge of about 260 (0.75 × 989.5 TFLOP/s over 0.85 × 3.35 TB/s): memory-bound.
    ridge = 0.75 * 989.5e12 / (0.85 * 3.35e12)
    skinny = float(costs.linear_gemm_efficiency(sh, 64, 8, None, ridge))
    assert skinny == pytest.approx(float(costs.gemm_intensity(64, 2304, 16384)) / ridge, rel=0.1)
    assert float(costs.linear_gemm_efficiency(sh, 8192, 8, None, ridge)) == 1.0


def test_the_command_pins_eager_kernels_and_fp8_weights(cli):
    import json

    args = ["plan", "llama-3-8b", "--spec", "h100-sxm", "-n", "8", "--global-batch", "16"]
    args += ["--seq", "8192", "--attention", "flash", "--no-dropout", "-k", "1", "--fixed"]
    code, out, err = cli(*args, "d=8,zero=3,b=2,kernels=eager,fp8=linear,fp8_params=on", "--json")
    assert code == 0, err
    best = json.loads(out)["plans"][0]
    assert (best["kernels"], best["fp8_params"]) == ("eager", True)
    assert best["time_breakdown_s"]["eager_kernels_s"] > 0
    code, out, _ = cli(*args, "d=8,zero=3,b=2,kernels=eager,fp8=linear,fp8_params=on")
    text = " ".join(out.split())
    assert code == 0 and "eager kernels" in text and "FP8 weight transposes" in text
    code, _, err = cli(*args, "d=8,fp8_params=on")
    assert code == 2 and "pin fp8=linear" in err
    code, _, err = cli(*args, "d=8,kernels=jit")
    assert code == 2 and "kernels must be one of fused or eager" in err
