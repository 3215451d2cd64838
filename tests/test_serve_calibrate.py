"""`serve --calibrate MEASURED.json`: the costs fitted to one measured run reproduce it and
predict other loads; and serving on a CPU prices the host's time an op and says "CPU".

The "measured" runs here are the simulation itself under known costs, written as the JSON
`serve --measure --json` writes: the fit must find costs that give the same figures, and
the prediction at another load must agree with the simulation under the true costs."""

from __future__ import annotations

import dataclasses
import json

import pytest

import ceiling
from ceiling.errors import MalformedFile
from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile
from ceiling.model import fitted
from ceiling.model.serve.engine import SEQUENCE_S

RUN = dict(spec="h100-sxm", input_tokens=512, output_tokens=128, num_requests=200)
TRUE = {"serve.iteration_s": 0.012, "serve.request_s": 0.08}
TRUE_SCALE = 1.3


def _truth(rate: float, sequence_s: float = 0.0, **more):
    with fitted.overridden(TRUE):
        return ceiling.serve("llama-3-8b", rate=rate, device_scale=TRUE_SCALE,
                             sequence_s=sequence_s, **{**RUN, **more})  # fmt: skip


def _as_measured(rate: float, sequence_s: float = 0.0) -> dict:
    """The JSON of a run at `rate` whose measured figures are the simulation's under TRUE."""
    record = ceiling.serve("llama-3-8b", rate=rate, **RUN).to_dict()
    truth = _truth(rate, sequence_s)
    m = truth.metrics
    record["measured"] = {"ttft_s": m.ttft_s.to_json(), "tpot_s": m.tpot_s.to_json(),
                          "output_tokens_per_s": m.output_tokens_per_s}  # fmt: skip
    return record


def test_the_fit_reproduces_the_measured_run_and_predicts_another_load():
    cal_run = ceiling.serve("llama-3-8b", rate=8.0, calibrate=_as_measured(4.0), **RUN)
    cal = cal_run.calibration
    # the shipped costs miss the measured run; the fitted ones give it back
    (before,), (after,) = cal.errors(cal.before), cal.errors(cal.after)
    assert max(map(abs, before.values())) > 0.1 and max(map(abs, after.values())) < 0.03
    assert cal.device == "NVIDIA H100 SXM5 80GB" and cal_run.inputs["device_scale"] != 1
    # one load of too narrow a range of batches: the shipped time a sequence is kept
    assert cal.sequence_s == SEQUENCE_S
    # at twice the load, the calibrated prediction is the true costs' within 5 %
    truth = _truth(8.0).metrics
    got = cal_run.metrics
    for a, b in ((got.tpot_s.p50, truth.tpot_s.p50), (got.ttft_s.p50, truth.ttft_s.p50),
                 (got.output_tokens_per_s, truth.output_tokens_per_s)):  # fmt: skip
        assert a == pytest.approx(b, rel=0.05)
    assert json.dumps(cal_run.to_dict()["calibration"])


def test_runs_at_two_loads_also_fit_the_time_a_sequence():
    sequence_s = 0.002  # the host's time for each sequence an iteration
    runs = [_as_measured(rate, sequence_s) for rate in (2.0, 8.0)]
    cal_run = ceiling.serve("llama-3-8b", rate=5.0, calibrate=runs, **RUN)
    cal = cal_run.calibration
    assert cal.sequence_s == pytest.approx(sequence_s, rel=0.25)
    assert all(max(map(abs, e.values())) < 0.01 for e in cal.errors(cal.after))
    truth = _truth(5.0, sequence_s).metrics
    assert cal_run.metrics.tpot_s.p50 == pytest.approx(truth.tpot_s.p50, rel=0.05)
    # the device's scale is held near 1 (both runs are matched as well by a faster device and
    # a longer fixed iteration), which the prefill inside TTFT feels at another load
    assert cal_run.metrics.ttft_s.p50 == pytest.approx(truth.ttft_s.p50, rel=0.1)


def test_on_another_device_only_the_host_costs_carry_over():
    r = ceiling.serve("llama-3-8b", rate=4.0, calibrate=_as_measured(4.0),
                      **{**RUN, "spec": "a100-80gb"})  # fmt: skip
    assert r.inputs["device_scale"] == 1.0
    assert r.inputs["iteration_s"] == pytest.approx(r.calibration.iteration_s)


def test_files_that_are_not_a_measured_run_are_refused(tmp_path):
    plain = ceiling.serve("llama-3-8b", rate=4.0, **RUN).to_dict()
    with pytest.raises(ceiling.errors.InvalidInput, match="at least one"):
        ceiling.serve("llama-3-8b", rate=4.0, calibrate=[], **RUN)
    for broken, says in ((plain, "not a measured run"),
                         ({**_as_measured(4.0), "call": None}, "records no `call`"),
                         ({"measured": {"ttft_s": {}}, "call": {}}, "lacks TTFT")):  # fmt: skip
        with pytest.raises(MalformedFile, match=says):
            ceiling.serve("llama-3-8b", rate=4.0, calibrate=broken, **RUN)
    path = tmp_path / "m.json"
    path.write_text("{not json")
    with pytest.raises(MalformedFile):
        ceiling.serve("llama-3-8b", rate=4.0, calibrate=path, **RUN)


def test_the_command_line_shows_the_fit(cli, tmp_path):
    path = tmp_path / "measured.json"
    path.write_text(json.dumps(_as_measured(4.0)))
    code, out, err = cli("serve", "llama-3-8b", "--spec", "h100-sxm", "--request-rate", "6",
                         "--input-tokens", "512", "--output-tokens", "128", "--num-prompts",
                         "200", "--calibrate", path)  # fmt: skip
    assert code == 0, err
    assert "calibrated from" in out and "simulated again" in out


CPU = MeasuredDevice(
    name="Test CPU", kind="cpu", peak_flops_per_s={"fp32": 100e9, "bf16": 50e9},
    bandwidth_bytes_per_s=10e9, datasheet_peak_flops_per_s={"fp32": 200e9},
    memory_bytes=16 * 2**30,
    extra={"overhead": {"host_costs": {"forward_s": 20e-6, "backward_s": 30e-6}}},
)  # fmt: skip


def test_a_cpu_serves_fp32_and_pays_the_host_time_an_op(tmp_path, cli):
    path = save_profile(MachineProfile(1, "2026-01-01T00:00:00+00:00", "h", {}, [CPU]),
                        tmp_path / "cpu.json")  # fmt: skip
    args = dict(
        machine_profile=path, input_tokens=32, output_tokens=16, concurrency=2, num_requests=8
    )
    r = ceiling.serve("gpt:small", **args)
    assert r.inputs["weights"] == "fp32" and r.inputs["device_kind"] == "cpu"
    # each op of the eager forward: the profile's 20 µs, not a GPU's launch floor
    it = r.iteration_at_batch
    from ceiling.model.decode_expected import KERNELS_OUTSIDE_LAYERS, KERNELS_PER_LAYER

    kernels = KERNELS_PER_LAYER * r.model.layers + KERNELS_OUTSIDE_LAYERS
    assert it["launch_s"] == pytest.approx(kernels * 20e-6)
    code, out, err = cli("serve", "gpt:small", "--profile", path, "--input-tokens", "32",
                         "--output-tokens", "16", "--concurrency", "2",
                         "--num-requests", "8")  # fmt: skip
    assert code == 0, err
    assert "1 CPU =" in out and "GPUs" not in out.split("workload")[0]


def test_transformers_serve_pays_its_python_for_each_sequence_in_host_ops(tmp_path, cli):
    path = save_profile(MachineProfile(1, "2026-01-01T00:00:00+00:00", "h", {}, [CPU]),
                        tmp_path / "cpu.json")  # fmt: skip
    kw = dict(machine_profile=path, input_tokens=32, output_tokens=64, num_requests=24)
    from ceiling.model.serve.engine import SEQUENCE_OPS

    ops = SEQUENCE_OPS["transformers"]
    r = {c: ceiling.serve("gpt:small", engine="transformers", concurrency=c, **kw) for c in (1, 4)}
    # the engine's ops a sequence at the profile's 20 µs an op of the eager forward
    assert r[1].inputs["sequence_ops"] == {"ops": ops, "op_s": 20e-6, "op_measured": True}
    assert r[1].inputs["sequence_s"] == pytest.approx(ops * 20e-6)
    # three more sequences decoding add their time to every iteration, beside the device's
    generic = {c: ceiling.serve("gpt:small", concurrency=c, **kw) for c in (1, 4)}
    grew = r[4].metrics.tpot_s.p50 - r[1].metrics.tpot_s.p50
    grew_generic = generic[4].metrics.tpot_s.p50 - generic[1].metrics.tpot_s.p50
    assert grew - grew_generic == pytest.approx(3 * ops * 20e-6, rel=0.05)
    # a time a sequence given (a calibration's) replaces it; other engines have none
    given = ceiling.serve("gpt:small", engine="transformers", concurrency=1, sequence_s=1e-3, **kw)
    assert given.inputs["sequence_s"] == 1e-3 and given.inputs["sequence_ops"] is None
    assert generic[1].inputs["sequence_ops"] is None
    # without a measured host: the default time a kernel's host work
    from ceiling.model.plan.host import HOST_S_PER_KERNEL

    on_gpu = dict(spec="h100-sxm", concurrency=1, input_tokens=32, output_tokens=8,
                  num_requests=4)  # fmt: skip
    gpu = ceiling.serve("llama-3-8b", engine="transformers", **on_gpu)
    assert gpu.inputs["sequence_ops"]["op_s"] == HOST_S_PER_KERNEL
    assert not gpu.inputs["sequence_ops"]["op_measured"]
    # no published run checks this engine: its prediction says so, not the others' band
    band = gpu.accuracy()["throughput"]
    assert band.cases == 0 and band.regime.endswith("transformers serve")
    assert ceiling.serve("llama-3-8b", engine="vllm", **on_gpu).accuracy()["throughput"].cases > 0
    code, out, err = cli("serve", "gpt:small", "--profile", path, "--engine", "transformers",
                         "--input-tokens", "32", "--output-tokens", "16", "--concurrency", "2",
                         "--num-requests", "8")  # fmt: skip
    assert code == 0, err
    assert f"{ops} × the host's 20 µs an eager op, from the machine profile" in " ".join(
        out.split()
    )


def test_an_hf_model_on_a_cpu_pays_the_host_time_for_each_op_its_eager_forward_runs(tmp_path):
    """An eager transformers forward dispatches every op its Python calls (a Llama layer: tens
    of them, views among them), not a fused engine's ten kernels a layer: each pays the
    profile's host time an op, a view its measured share of it."""
    pytest.importorskip("transformers")
    from ceiling.profile.forward_ops import count_decode_ops

    views = {"forward_s": 20e-6, "backward_s": 30e-6, "forward_view_s": 2e-6}
    cpu = dataclasses.replace(CPU, extra={"overhead": {"host_costs": views}})
    path = save_profile(MachineProfile(1, "2026-01-01T00:00:00+00:00", "h", {}, [cpu]),
                        tmp_path / "cpu.json")  # fmt: skip
    config = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
              "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3,
              "vocab_size": 512, "max_position_embeddings": 256}  # fmt: skip
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    ops = count_decode_ops(config)
    assert ops is not None and ops.per_layer > 3 * 10 > ops.per_layer_views > 0
    # the count does not depend on the widths (it is taken on a shrunk copy)
    assert count_decode_ops({**config, "hidden_size": 256, "intermediate_size": 512}) == ops
    r = ceiling.serve(f"hf:{tmp_path / 'm'}", machine_profile=path, input_tokens=16,
                      output_tokens=8, concurrency=1, num_requests=4)  # fmt: skip
    layer, outside = ops.op_equivalents(0.1)  # a view: 2 of an op's 20 µs
    assert layer == ops.per_layer - 0.9 * ops.per_layer_views
    assert r.iteration_at_batch["launch_s"] == pytest.approx((3 * layer + outside) * 20e-6)
    assert r.inputs["eager_ops"]["per_layer"] == ops.per_layer
    # a family transformers cannot build: no count, the engine's kernels
    assert count_decode_ops({"model_type": "no-such-family"}) is None


def test_a_forward_count_is_kept_in_the_cache_folder(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from ceiling.profile import forward_ops

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    config = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2,
              "vocab_size": 128}  # fmt: skip
    counted = forward_ops.count_decode_ops(config)
    assert forward_ops.memo_path() == tmp_path / "ceiling" / "forward-ops.json"
    assert forward_ops.memo_path().exists()
    # the next call reads it: the count is not made again
    monkeypatch.setattr(forward_ops, "_counted", lambda config: pytest.fail("counted again"))
    assert forward_ops.count_decode_ops(config) == counted
    # an unreadable cache file only means counting again
    forward_ops.memo_path().write_text("{not json")
    monkeypatch.setattr(forward_ops, "_counted", lambda config: counted)
    assert forward_ops.count_decode_ops(config) == counted
