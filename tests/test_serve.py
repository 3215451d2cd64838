"""`ceiling serve` / `ceiling.serve`: the iteration model agrees with the expected decode
step, the API's record is the command's --json, bad input is one line and exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ceiling
from ceiling.hardware.resolve import resolve_device
from ceiling.model.decode import DecodeSetup, decode_ceiling
from ceiling.model.decode_expected import (
    bandwidth_share,
    costs_for,
    expected_rows,
    gemm_seconds,
    tile_utilisation,
)
from ceiling.model.serve.engine import Engine, Layout
from ceiling.model.serve.iteration import Iteration, chunk_pairs
from ceiling.model.serve.scheduler import Policy
from ceiling.model.serve.workload import DATASETS, dataset_lengths, tokens_scale
from ceiling.model.transformer import get_model


@pytest.mark.parametrize(
    ("model", "device", "setup", "batch", "context"),
    [
        ("llama-3-8b", "h100-sxm", DecodeSetup(), 1, 0),
        ("llama-3-8b", "h100-sxm", DecodeSetup(), 64, 2048),
        ("llama-3-70b", "a100-80gb", DecodeSetup(tp=4), 32, 1000),
        ("llama-2-7b", "a100-80gb", DecodeSetup(weights_dtype="int4"), 8, 500),
        ("mixtral-8x7b", "h100-sxm", DecodeSetup(weights_dtype="fp8", kv_dtype="fp8", tp=2), 16,
         300),
        ("llama-3-8b", "h100-sxm", DecodeSetup(weights_dtype="fp8"), 512, 100),
        ("deepseek-v3", "h200-sxm", DecodeSetup(weights_dtype="fp8", tp=8), 64, 4000),
    ],
)  # fmt: skip
def test_decode_and_serve_agree_at_a_fixed_batch(model, device, setup, batch, context):
    cfg, spec = get_model(model), resolve_device(device, None)
    at = DecodeSetup(**{**setup.__dict__, "context": context})
    c = decode_ceiling(cfg, spec, [batch], at)
    costs = costs_for(spec, compute=c.dtypes.compute)
    (expected,) = expected_rows(c, cfg.layers, costs, cfg=cfg, sms=spec.sms)
    step = Iteration(cfg, spec, setup, costs).terms(batch, batch * context)
    assert step.time_s == pytest.approx(expected.step_s, rel=1e-12)
    assert step.memory_s == pytest.approx(expected.memory_s, rel=1e-12)
    assert step.activation_s == pytest.approx(expected.activation_s, rel=1e-12)


def test_a_prefill_chunk_costs_its_flops_and_reads_its_cache():
    cfg, spec = get_model("llama-3-8b"), resolve_device("h100-sxm", None)
    costs = costs_for(spec)
    it = Iteration(cfg, spec, DecodeSetup(), costs)
    t = it.terms(0, 0.0, 512, chunk_pairs(1024, 512), 1024.0, sampled=1)
    head = cfg.vocab * cfg.hidden
    gemm = 2.0 * (cfg.params_matmul - head) * 512 + 2.0 * head
    rate = spec.peak("bf16") * costs.matmul_efficiency
    # at most the FLOPs at the full rate: 512 rows fill their tiles but not every wave
    assert gemm / rate < t.gemm_s < 1.3 * gemm / rate
    assert t.gemm_s == pytest.approx(gemm_seconds(cfg, 1, 512, 1, rate, spec.sms))
    pairs = 512 * 1024 + 512 * 513 / 2
    attn = 4.0 * cfg.layers * cfg.q_dim * pairs
    assert t.attention_s == pytest.approx(attn / (spec.peak("bf16") * costs.attention_efficiency))
    kv = (1024 + 512) * cfg.kv_bytes_per_token(2)
    assert t.kv_s == pytest.approx(kv / (spec.memory_bandwidth_bytes_per_s * bandwidth_share()))
    assert t.bound == "compute"


def test_kv_cache_holds_what_the_memory_leaves():
    cfg, spec = get_model("llama-3-8b"), resolve_device("h100-sxm", None)
    e = Engine(cfg, spec, DecodeSetup(), costs_for(spec))
    room = 0.9 * spec.memory_bytes - cfg.params_total * 2
    per_token = 4 * cfg.hidden + cfg.q_dim + 2 * cfg.kv_dim + 2 * cfg.ffn_hidden
    room -= 8192 * per_token * 2
    assert e.kv_blocks == int(room / cfg.kv_bytes_per_token(2) // 16)
    # two pipeline stages: half the weights per device, the same tokens per in-flight batch
    e2 = Engine(cfg, spec, DecodeSetup(), costs_for(spec), Layout(pp=2))
    room2 = 0.9 * spec.memory_bytes - cfg.params_total - 8192 * per_token * 2
    assert e2.kv_blocks == int(room2 / cfg.kv_bytes_per_token(2) // 16)
    # TensorRT-LLM: 0.9 of what the weights and the activation buffers leave
    trt = Engine(cfg, spec, DecodeSetup(), costs_for(spec), engine="trtllm")
    room3 = 0.9 * (spec.memory_bytes - cfg.params_total * 2 - 8192 * per_token * 2)
    assert trt.kv_blocks == int(room3 / cfg.kv_bytes_per_token(2) // 16)


def test_trtllm_reserves_each_requests_kv_by_default():
    import ceiling

    run = dict(spec="h100-sxm", input_tokens=128, output_tokens=32, offline=20)
    assert ceiling.serve("llama-3-8b", engine="trtllm", **run).inputs["reserve_kv"] is True
    assert ceiling.serve("llama-3-8b", engine="vllm", **run).inputs["reserve_kv"] is False
    off = ceiling.serve("llama-3-8b", engine="trtllm", reserve_kv=False, **run)
    assert off.inputs["reserve_kv"] is False


def test_sharegpt_lengths_have_the_published_output_mean():
    p, o = dataset_lengths("sharegpt", 20000, seed=1)
    d = DATASETS["sharegpt"]
    assert o.mean() == pytest.approx(d.mean_output, rel=0.03)
    assert p.mean() == pytest.approx(d.mean_prompt, rel=0.03)
    assert p.max() <= 1024 and (p + o).max() <= 2048 and min(p.min(), o.min()) >= 4
    # a log-normal of σ = 1: the median about 0.6 of the mean
    assert np.median(o) / o.mean() == pytest.approx(np.exp(-0.5), rel=0.15)


def test_sharegpt_lengths_are_in_the_served_models_tokens():
    # counted with Llama 3's tokenizer (3.94 characters a token on English text); Llama 2's
    # 32k vocabulary holds 3.17 (Dubey et al. 2024, §3.2): the same text is 1.243× the tokens
    d = DATASETS["sharegpt"]
    assert tokens_scale(d, 32_000) == pytest.approx(3.94 / 3.17)
    assert tokens_scale(d, 128_256) == tokens_scale(d, 151_936) == tokens_scale(d, None) == 1.0
    assert tokens_scale(d, 50_257) == pytest.approx(3.94 / 3.17)  # nearer 32k on a log scale
    p, o = dataset_lengths("sharegpt", 20000, seed=1, vocab=32_000)
    assert o.mean() == pytest.approx(d.mean_output * 3.94 / 3.17, rel=0.03)
    assert p.mean() == pytest.approx(d.mean_prompt * 3.94 / 3.17, rel=0.03)
    assert p.max() <= 1024 and (p + o).max() <= 2048  # the clients' caps, in the model's tokens
    llama2 = ceiling.serve("llama-2-7b", spec="a100-80gb", dataset="ShareGPT", offline=50)
    llama3 = ceiling.serve("llama-3-8b", spec="a100-80gb", dataset="sharegpt", offline=50)
    assert "×1.24 the tokens in this model's 32,000-token vocabulary" in llama2.inputs["workload"]
    assert "×" not in llama3.inputs["workload"]


def test_serve_result_is_the_commands_json(cli):
    r = ceiling.serve("llama-3-8b", spec="h100-sxm", input_tokens=128, output_tokens=64,
                      rate=20.0, num_requests=200)  # fmt: skip
    d = r.to_dict()
    assert d["requests"] == 200 and d["output_tokens"] == 200 * 64
    assert 0 < d["ttft_s"]["p50"] <= d["ttft_s"]["p99"]
    assert d["tpot_s"]["p50"] >= d["iteration"]["time_s"] * 0.5
    args = ("serve", "llama-3-8b", "--spec", "h100-sxm", "--input-tokens", "128",
            "--output-tokens", "64", "--rate", "20", "--num-requests", "200", "--json")  # fmt: skip
    code, out, err = cli(*args)
    assert code == 0, err
    assert {k: v for k, v in json.loads(out).items() if k != "plot"} == d


def test_offline_throughput_grows_with_replicas_and_a_slo_finds_a_rate():
    one = ceiling.serve("llama-3-8b", spec="h100-sxm", input_tokens=256, output_tokens=32,
                        offline=200)  # fmt: skip
    two = ceiling.serve("llama-3-8b", spec="h100-sxm", gpus=2, input_tokens=256,
                        output_tokens=32, offline=200)  # fmt: skip
    assert two.inputs["layout"]["replicas"] == 2
    assert two.metrics.output_tokens_per_s > 1.5 * one.metrics.output_tokens_per_s
    r = ceiling.serve("llama-3-8b", spec="h100-sxm", input_tokens=256, output_tokens=32,
                      num_requests=100, rate=5.0, slo="ttft_p99=200ms,tpot_p99=30ms",
                      target_rate=50.0)  # fmt: skip
    assert r.max_rate_per_s > 0 and r.at_max_rate.ttft_s.p99 <= 0.2
    best = r.fewest_gpus[0]
    assert best["gpus"] == best["tp"] * best["replicas"]
    assert best["replicas"] * best["max_rate_per_s"] >= 50.0


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--rate", "0"), "--rate"),
        (("--rate", "2", "--concurrency", "4"), "one load"),
        (("--gpus", "3", "--tp", "2"), "--gpus"),
        (("--slo", "ttft=1s"), "unknown target"),
        (("--weights", "int3"), "weights"),
        (("--dataset", "nosuch"), "unknown dataset"),
        (("--input-tokens", "10"), "both"),
        (("--target-rate", "5"), "--slo"),
        (("--acceptance", "1.5", "--speculative", "ngram", "--spec-tokens", "2"), "acceptance"),
        (("--input-tokens", "9000", "--output-tokens", "9000"), "positions"),
        (("--measure", "ftp://x"), "http"),
        (("--ramp-up", "2s"), "--concurrency"),
        (("--concurrency", "2", "--ramp-up", "-1s"), "--ramp-up"),
        (("--concurrency", "2", "--ramp-up", "2 fortnights"), "--ramp-up"),
        (("--concurrency", "2", "--ramp-up", "1e40s"), "--ramp-up"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, args, words):
    code, out, err = cli("serve", "llama-3-8b", "--spec", "h100-sxm", "--num-requests", "5", *args)
    assert code == 2, (out, err)
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_ramp_up_staggers_the_closed_loop_out_of_lockstep():
    # 8 streams of 512-token prompts: started together they stay together, each prompt
    # prefilled beside the seven others; spread over a request's time, each mostly alone
    kw = dict(spec="h100-sxm", concurrency=8, num_requests=96, input_tokens=512,
              output_tokens=128)  # fmt: skip
    together = ceiling.serve("llama-3-8b", **kw)
    spread = ceiling.serve("llama-3-8b", ramp_up="1s", **kw)
    assert spread.inputs["ramp_up_s"] == 1.0 and "started over 1 s" in spread.inputs["load"]
    assert together.inputs["ramp_up_s"] == 0.0
    assert spread.metrics.ttft_s.p50 < 0.5 * together.metrics.ttft_s.p50
    # the same work at about the same rate
    assert spread.metrics.output_tokens_per_s == pytest.approx(
        together.metrics.output_tokens_per_s, rel=0.1
    )
    assert "outlasts" not in spread.inputs["load"]
    # a ramp-up far longer than the run: the first streams send every other request before
    # the last ones start, and the load says so
    slow = ceiling.serve("llama-3-8b", ramp_up="100s", **kw)
    assert "the ramp-up outlasts the run" in slow.inputs["load"]


def test_a_closed_loop_of_fewer_streams_than_replicas_serves_every_request():
    # 3 streams over 4 replicas: each stream's requests go round robin to the replicas with a
    # stream; none is dropped with the replica left idle
    r = ceiling.serve("llama-3-8b", spec="h100-sxm", gpus=4, replicas=4, concurrency=3,
                      num_requests=100, input_tokens=128, output_tokens=16)  # fmt: skip
    assert r.metrics.requests == 100 - 3  # the three the streams start with are the warm-up
    assert len(r.schedules) == 3


@pytest.mark.parametrize(
    ("more", "feature"),
    [
        (dict(speculative="ngram", spec_tokens=3, acceptance=0.6), "speculative decoding"),
        (dict(prefix_hit_rate=0.5), "prefix cache"),
        (dict(gpus=2, pp=2), "pipeline parallel"),
        (dict(weights="awq"), "awq weights"),
        (dict(engine="transformers"), "transformers serve"),
    ],
)
def test_a_mechanism_no_published_run_used_leaves_the_prediction_unchecked(more, feature):
    from ceiling.validation.features import serving_features

    kw = dict(spec="h100-sxm", rate=4.0, num_requests=20, input_tokens=128, output_tokens=16)
    plain = ceiling.serve("llama-3-8b", **kw)
    assert plain.accuracy()["throughput"].cases > 100
    r = ceiling.serve("llama-3-8b", **kw, **more)
    assert feature in serving_features(r.model, r)
    for band in r.accuracy().values():
        assert band.cases == 0 and band.regime.endswith(feature)
        assert band.text().startswith("no published run like this was checked")


def test_latent_attention_is_a_feature_no_published_serving_run_checks():
    from ceiling.validation.features import serving_features

    r = ceiling.serve("deepseek-v2-lite", spec="h100-sxm", rate=2.0, num_requests=10,
                      input_tokens=128, output_tokens=8)  # fmt: skip
    assert "MLA" in serving_features(r.model, r)
    assert all(b.cases == 0 for b in r.accuracy().values())


def test_a_requests_file(tmp_path, cli):
    f = tmp_path / "r.jsonl"
    f.write_text('{"prompt_tokens": 100, "output_tokens": 10, "arrival_s": 0}\n'
                 '{"prompt_tokens": 50, "output_tokens": 20, "arrival_s": 0.5}\n')  # fmt: skip
    r = ceiling.serve("llama-3-8b", spec="h100-sxm", requests=str(f))
    assert r.metrics.requests == 2 and r.metrics.output_tokens == 30
    assert "requests file" in r.inputs["load"]
    f.write_text('{"prompt_tokens": 0, "output_tokens": 10}\n')
    code, _, err = cli("serve", "llama-3-8b", "--spec", "h100-sxm", "--requests", str(f))
    assert code == 2 and "line 1" in err


def test_tile_utilisation_pads_and_quantises_waves():
    # 64 rows × 128 columns on 132 SMs: one 64×128 tile, 1 of 132 SMs busy
    assert tile_utilisation(64, 128, 132) == pytest.approx(1 / 132)
    # 256 × 132·256 columns: 128×256 tiles fill two whole waves exactly
    assert tile_utilisation(256, 132 * 256, 132) == pytest.approx(1.0)
    # 100 rows pad to 128 (or 2 × 64): 100/128 of the best tile
    assert tile_utilisation(100, 132 * 256, 132) == pytest.approx(100 / 128)
    assert tile_utilisation(7, 7, None) == 1.0


@pytest.mark.parametrize(
    "args",
    [(8, 8 * 1000.0, 0, 0.0, 0.0, 8, 1), (3, 900.0, 512, chunk_pairs(256, 512), 256.0, 4, 1),
     (4, 4 * 50.0, 0, 0.0, 0.0, 4, 3), (0, 0.0, 8192, chunk_pairs(0, 8192), 0.0, 1, 1)],
)  # fmt: skip
def test_the_fast_iteration_time_is_the_terms_time(args):
    cfg, spec = get_model("llama-3-8b"), resolve_device("h100-sxm", None)
    it = Iteration(cfg, spec, DecodeSetup(), costs_for(spec))
    t, compute = it.time_and_bound(*args)
    terms = it.terms(*args)
    assert t == pytest.approx(terms.time_s, rel=1e-12)
    assert compute == (terms.bound == "compute")


def test_the_engine_host_adds_its_share_to_every_iteration():
    from ceiling.model.serve import engine as eng

    cfg, spec = get_model("llama-3-8b"), resolve_device("h100-sxm", None)
    plain = Engine(cfg, spec, DecodeSetup(), costs_for(spec))
    sglang = Engine(cfg, spec, DecodeSetup(), costs_for(spec), host_share=0.1)
    args = (16, 16 * 700.0, 256, chunk_pairs(0, 256), 0.0, 17, 1)
    # the share scales the GPU's time; the host's time an iteration (fixed, and per
    # sequence that samples a token: 17 here) is added to both
    assert plain.iteration_s == eng.ITERATION_S > 0
    assert plain.sequence_s == eng.SEQUENCE_S > 0
    fixed = plain.iteration_s + 17 * plain.sequence_s
    assert sglang.time_fn(*args)[0] - fixed == pytest.approx(
        1.1 * (plain.time_fn(*args)[0] - fixed), rel=1e-12
    )
    r = ceiling.serve("gpt:tiny", spec="h100-sxm", offline=4, input_tokens=16,
                      output_tokens=4, engine="sglang")  # fmt: skip
    assert r.inputs["engine"] == "sglang" and r.inputs["host_share"] == eng.HOST_SHARE["sglang"]
    with pytest.raises(ceiling.errors.InvalidInput, match="engine"):
        ceiling.serve("gpt:tiny", spec="h100-sxm", offline=4, engine="tgi")


def test_a_request_pays_its_way_in_and_out_and_every_iteration_its_fixed_host_time():
    from ceiling.model import fitted
    from ceiling.model.serve import engine as eng

    def run(**values):
        with fitted.overridden(values):
            return ceiling.serve("llama-3-8b", spec="h100-sxm", concurrency=1, num_requests=3,
                                 input_tokens=128, output_tokens=33).metrics  # fmt: skip

    base = run(**{"serve.request_s": 0.0, "serve.iteration_s": 0.0})
    slow = run(**{"serve.request_s": 0.05, "serve.iteration_s": 0.0})
    # added as it is to each request's TTFT and end-to-end latency, not to its TPOT
    assert slow.ttft_s.mean == pytest.approx(base.ttft_s.mean + 0.05)
    assert slow.e2e_s.mean == pytest.approx(base.e2e_s.mean + 0.05)
    assert slow.tpot_s.mean == pytest.approx(base.tpot_s.mean)
    # alone in the engine, each of the 32 decode iterations after the first token takes
    # 2 ms more: the TPOT grows by it exactly
    ticking = run(**{"serve.request_s": 0.0, "serve.iteration_s": 0.002})
    assert ticking.tpot_s.mean == pytest.approx(base.tpot_s.mean + 0.002)
    assert eng.REQUEST_S > 0 and eng.ITERATION_S > 0


def test_multi_step_scheduling_pays_the_schedulers_share_once_a_block():
    """vLLM's --num-scheduler-steps 10: a decode step carries a tenth of the host's share
    of the GPU's time, and the fixed host time an iteration and its sequences' own time
    whole; an iteration with prompt tokens, a scheduler call, carries them all whole."""
    cfg, spec = get_model("llama-3-8b"), resolve_device("h100-sxm", None)
    costs = costs_for(spec)
    multi = Engine(cfg, spec, DecodeSetup(), costs, policy=Policy(scheduler_steps=10),
                   host_share=0.1)  # fmt: skip
    plain = Engine(cfg, spec, DecodeSetup(), costs)
    fixed, per_sequence = plain.iteration_s, plain.sequence_s
    decode = (16, 16 * 700.0, 0, 0.0, 0.0, 16, 1)
    mixed = (16, 16 * 700.0, 256, chunk_pairs(0, 256), 0.0, 17, 1)
    device = plain.time_fn(*decode)[0] - fixed - 16 * per_sequence
    assert multi.time_fn(*decode)[0] == pytest.approx(
        1.01 * device + fixed + 16 * per_sequence, rel=1e-12
    )
    device = plain.time_fn(*mixed)[0] - fixed - 17 * per_sequence
    assert multi.time_fn(*mixed)[0] == pytest.approx(
        1.1 * device + fixed + 17 * per_sequence, rel=1e-12
    )


def test_mla_decodes_absorbed_and_prefills_expanded():
    """DeepSeek-V3 (61 layers, 128 heads, latent 512, rope 64, nope 128, v 128), per pair:
    a decode scores over the latent and its rotary part and sums in the latent,
    2·(512 + 64) + 2·512 a head; a prompt over keys and values expanded from it,
    2·(128 + 64) + 2·128 a head. GQA is 4·l·q_dim either way."""
    from ceiling.model.serve.iteration import attention_per_pair

    prompt, decode = attention_per_pair(get_model("deepseek-v3"), 8)
    assert decode == 61 * 128 * (2 * 576 + 2 * 512) / 8
    assert prompt == 61 * 128 * (2 * 192 + 2 * 128) / 8
    assert attention_per_pair(get_model("llama-3-8b"), 1) == (4 * 32 * 4096,) * 2
