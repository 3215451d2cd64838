"""A compiled model: its generated kernels are listed, its hints never advise compiling
it, and a CPU without a C++ compiler refuses --compile in one line. Fake profiler rows and
fake calls: nothing here compiles."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from ceiling.errors import InvalidInput, UnsupportedOnDevice
from ceiling.measure.compiled_overhead import frame_host_s
from ceiling.model.roofline import Roofs
from ceiling.profile import compiled, compiled_step, placement


def test_generated_kernels_are_picked_from_profiler_rows_slowest_first():
    rows = [
        ("aten::addmm", 2, 190.0),
        ("graph_0_cpp_fused_gelu_native_layer_norm_0", 1, 12.0),
        ("graph_0_cpp_fused_sum_1", 1, 0.9),
        ("triton_poi_fused_add_0", 3, 30.0),
        ("graph_0_cpp_fused_sum_1", 2, 2.1),  # the same kernel in a second graph call
        ("CompiledFunction", 1, 536.9),
    ]
    found = compiled.kernels(rows)
    assert [(k.name, k.calls) for k in found] == [
        ("triton_poi_fused_add_0", 3),
        ("graph_0_cpp_fused_gelu_native_layer_norm_0", 1),
        ("graph_0_cpp_fused_sum_1", 3),
    ]
    assert found[2].time_s == pytest.approx(3.0e-6)


def _call(op, category, time_s, flops=0.0):
    return SimpleNamespace(op=op, category=category, time_s=time_s, flops=flops, bytes=4e3,
                           matmul_dims=None, phase="forward")  # fmt: skip


def test_a_compiled_model_is_never_advised_to_compile():
    # elementwise ops take 90 % of op time at no FLOPs, all short: the fuse and launch hints
    calls = [_call("aten.mm", "matmul", 1e-6, 1e6)] + [_call("aten.add", "elementwise", 9e-6)] * 9
    eager = " ".join(placement.hints(calls, 1e12, 1e11, 4))
    assert "fuse them (torch.compile)" in eager and "CUDA graphs or torch.compile" in eager
    # on a CPU there are no CUDA graphs to advise
    on_cpu = " ".join(placement.hints(calls, 1e12, 1e11, 4, device="cpu"))
    assert "launch/dispatch-bound" in on_cpu and "CUDA graphs" not in on_cpu
    # compiled, those eager ops do not run: the compiled step's own hints replace them
    done = " ".join(placement.hints(calls, 1e12, 1e11, 4, compiled=True))
    assert "elementwise" not in done and "launch/dispatch-bound" not in done
    assert "torch.compile" not in done


def test_a_compiled_module_is_recognised():
    model = nn.Linear(2, 2)
    assert not compiled.is_compiled(model)
    assert compiled.is_compiled(torch.compile(model))  # lazily: nothing compiles yet
    model.compile()
    assert compiled.is_compiled(model)


def test_compile_without_a_cpp_compiler_is_one_line(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)
    with pytest.raises(UnsupportedOnDevice, match="needs a C\\+\\+ compiler"):
        compiled.check_compiler("cpu")
    compiled.check_compiler("cuda:0")  # triton, not a C++ compiler, builds GPU kernels
    from ceiling.profile.run import profile_target

    with pytest.raises(InvalidInput, match="--compile"):
        profile_target("mlp", device="meta", compile=True)


# ---- the compiled step from its kernels ----------------------------------------------------

ROOFS = Roofs(1e12, 1e10, per_op_s=2e-6, serial_dispatch=True)


def _profiled(extern=None, outside_s=5e-3, wall_s=20e-3, frames=1):
    generated = [
        compiled.Kernel("graph_0_cpp_fused_gelu_0", 2, 3e-3),
        compiled.Kernel("graph_1_cpp_fused_sum_0", 1, 1e-3),  # not seen compiling
    ]
    extern = {"aten::mm": (4, 2e-3)} if extern is None else extern
    return compiled.ProfiledStep(generated, extern, frames, outside_s, wall_s, frame_calls=2)


SITES = {
    "graph_0_cpp_fused_gelu_0": [compiled.Site("graph_0_cpp_fused_gelu_0", "generated", 4e6, 2e6)],
    "aten::mm": [  # two places the graph calls mm, at two shapes
        compiled.Site("aten::mm", "extern", 600.0, 400.0, 2.0 * 8 * 16 * 32, (8, 16, 32)),
        compiled.Site("aten::mm", "extern", 600.0, 400.0, 2.0 * 4 * 4 * 4, (4, 4, 4)),
    ],
}


def test_each_kernel_is_predicted_from_its_bytes_and_flops_at_the_roofs():
    step = compiled_step.predict(
        _profiled(), SITES, ROOFS, 1e10, rates={(8, 16, 32): 1e9}, op_rates={"aten::mm": 1e10},
        predicted_outside_s=5e-3, step_s=19e-3, frame_host_s=40e-6,
    )  # fmt: skip
    rows = {k.name: k for k in step.kernels}
    fused = rows["graph_0_cpp_fused_gelu_0"]
    assert (fused.bytes_read, fused.bytes_written, fused.flops) == (8e6, 4e6, 0.0)
    # two calls, each its host cost then 6 MB at 10 GB/s
    assert fused.predicted_s == pytest.approx(2 * (2e-6 + 6e6 / 1e10))
    assert fused.bound == "memory"
    mm = rows["aten::mm"]
    # four calls over two sites: each site twice, the first at its shape's measured rate,
    # the second at the rate mm's eager calls ran at (its 128 FLOPs: memory-bound)
    assert mm.flops == pytest.approx(2 * (8192 + 128))
    assert mm.bytes_read == pytest.approx(2400.0) and mm.matmul_dims is None
    compute = 2 * (8192 / 1e9 + 128 / 1e10)
    assert mm.predicted_s == pytest.approx(4 * 2e-6 + compute)
    assert mm.bound == "compute"
    unseen = rows["graph_1_cpp_fused_sum_0"]
    assert unseen.bytes is None and unseen.predicted_s is None and step.uncaptured == 1
    assert step.predicted_kernel_s == pytest.approx(2 * 6e6 / 1e10 + compute)
    # six kernel calls, each its host cost, and two frame calls, each its guards and wrappers
    assert step.predicted_host_s == pytest.approx(6 * 2e-6 + 2 * 40e-6)
    assert step.predicted_step_s == pytest.approx(
        step.predicted_kernel_s + step.predicted_host_s + 5e-3
    )
    assert step.kernel_s == pytest.approx(6e-3)
    assert step.host_s == pytest.approx(20e-3 - 6e-3 - 5e-3)
    assert step.kernels[0].name == "graph_0_cpp_fused_gelu_0"  # slowest first


def test_a_fused_kernel_computes_its_functions_at_their_measured_cost():
    costs = {"gelu": 1e-6, "exp": 2e-7}  # seconds per element, as measured on a device
    roofs = Roofs(1e12, 1e10, per_op_s=2e-6, serial_dispatch=True, function_s_per_element=costs)
    functions = (("add", 1000), ("exp", 500), ("gelu", 1000))  # add: no measured cost
    site = compiled.Site("k", "generated", 4e6, 2e6, functions=functions)
    profiled = compiled.ProfiledStep([compiled.Kernel("k", 1, 1e-3)], {}, 1, 0.0, 2e-3)
    (k,) = compiled_step.predict(profiled, {"k": [site]}, roofs, 1e10).kernels
    # 1 ms of GELU and 0.1 ms of exp outlast the 0.6 ms its 6 MB take
    assert k.predicted_s == pytest.approx(2e-6 + 1000 * 1e-6 + 500 * 2e-7)
    assert k.bound == "compute"


def test_on_a_gpu_the_host_queues_kernels_ahead():
    gpu = Roofs(1e12, 1e10, per_op_s=2e-6, serial_dispatch=False)
    step = compiled_step.predict(_profiled(extern={}), SITES, gpu, 1e10)
    # the host's 2 µs launch is hidden under the first kernel's 600 µs but for the first
    assert step.predicted_host_s == pytest.approx(2e-6)
    assert step.predicted_kernel_s == pytest.approx(2 * 6e6 / 1e10)


def _event(name, parent, us):
    return SimpleNamespace(name=name, cpu_parent=parent, cpu_time_total=us)


def test_the_profiled_step_splits_into_kernels_graphs_and_eager_ops_outside():
    region = _event("Torch-Compiled Region: 0/0", None, 900.0)
    graph = _event("## Call CompiledFxGraph f1 ##", _event("CompiledFunction", region, 850.0), 800)
    optimizer = _event("Optimizer.step#AdamW.step", None, 300.0)
    events = [
        region,
        graph,
        _event("aten::mm", graph, 100.0),  # an extern kernel of the graph
        _event("aten::mm", None, 50.0),  # an eager mm outside it: not the graph's
        optimizer,
        _event("aten::add_", optimizer, 20.0),  # inside the optimizer's 300 µs
        _event("autograd::engine::evaluate_function: CompiledFunctionBackward", None, 400.0),
        _event("TorchDynamo Cache Lookup", None, 10.0),  # guards: host time
        _event("Torch-Compiled Region: 1/0", None, 100.0),  # after a graph break
    ]
    rows = [("graph_0_cpp_fused_sum_0", 2, 30.0), ("aten::mm", 2, 150.0)]
    step = compiled.read_events(events, {"aten::mm"}, 2e-3, rows)
    assert step.extern == {"aten::mm": (1, pytest.approx(100e-6))}
    assert step.frames == 2 and step.frame_calls == 2
    assert step.outside_s == pytest.approx(350e-6)
    assert [(k.name, k.calls) for k in step.generated] == [("graph_0_cpp_fused_sum_0", 2)]


def _step(**changes):
    fused = compiled.Kernel("graph_0_cpp_fused_add_0", 10, 8e-3, "generated", 4e7, 4e7, 0.0)
    mm = compiled.Kernel("aten::mm", 4, 2e-3, "extern", 1e6, 1e6, 1e9)
    base = dict(kernels=[fused, mm], frames=1, profiled_step_s=11e-3, kernel_s=10e-3,
                outside_s=0.5e-3, predicted_kernel_s=9e-3, predicted_host_s=28e-6,
                predicted_outside_s=0.4e-3)  # fmt: skip
    return compiled_step.CompiledStep(**{**base, **changes})


def test_a_compiled_step_is_told_what_is_left_never_to_compile_it():
    # fused kernels: 80 % of kernel time, 80 MB at 10 GB/s = 8 ms, all of their time
    said = compiled_step.hints(_step(frames=3), 1e10, "cpu")
    assert "3 compiled frames run per step: 2 graph break(s)" in said[0]
    assert "move 0.08 GB a step (8 ms at the bandwidth roof, 1e+02 % of their time)" in said[1]
    assert "bandwidth bounds them" in said[1]
    slow = compiled_step.hints(_step(), 1e12, "cpu")  # at 1 TB/s the same bytes take 80 µs
    assert len(slow) == 1 and "their cost per call" in slow[0]
    busy = _step(outside_s=4e-3, profiled_step_s=25e-3)  # outside 16 %, host 11 ms: 44 %
    said = " ".join(compiled_step.hints(busy, 1e10, "cuda:0"))
    assert "eager ops outside the compiled graphs" not in said
    assert "44 % of the profiled step is host time" in said and "reduce-overhead" in said
    eager = " ".join(compiled_step.hints(_step(outside_s=6e-3, profiled_step_s=20e-3), 1e10,
                                         "cpu"))  # fmt: skip
    assert "eager ops outside the compiled graphs (the optimizer" in eager and "30 %" in eager
    assert all("torch.compile" not in h for h in said)
    unseen = compiled_step.hints(_step(uncaptured=2), 1e10, "cpu")
    assert "2 kernel(s) ran but were not seen compiling" in unseen[-1]


# ---- one real compile: a 2-layer MLP's forward, shared by the tests below -----------------

BATCH, D_IN, HIDDEN, D_OUT = 16, 64, 128, 32


@pytest.fixture(scope="module")
def profiled_mlp():
    import ceiling

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, D_OUT))
    return ceiling.profile(torch.compile(model), torch.randn(BATCH, D_IN), train=False, steps=1)


@pytest.mark.slow
def test_a_compiled_mlp_is_its_kernels_with_their_bytes_and_flops(profiled_mlp):
    r = profiled_mlp.report
    step = profiled_mlp.compiled_step
    assert r.compiled and step.uncaptured == 0 and step.frames == 1
    rows = {k.name: k for k in step.kernels}
    # inductor fuses the GELU into one generated kernel: the first matmul's output in, its
    # own out (fp32), nothing else
    (gelu,) = [k for k in step.kernels if k.kind == "generated"]
    assert "gelu" in gelu.name and gelu.calls == 1
    assert (gelu.bytes_read, gelu.bytes_written, gelu.flops) == (4.0 * BATCH * HIDDEN,) * 2 + (0,)
    # the two linears are library addmm calls: bias, input and weight in, output out
    addmm = rows["aten::addmm"]
    assert addmm.kind == "extern" and addmm.calls == 2
    assert addmm.flops == 2.0 * BATCH * (D_IN * HIDDEN + HIDDEN * D_OUT)
    assert addmm.flops == r.hardware_flops_per_step == r.model_flops_per_step
    weights_in = HIDDEN + BATCH * D_IN + D_IN * HIDDEN + D_OUT + BATCH * HIDDEN + HIDDEN * D_OUT
    assert addmm.bytes_read == 4.0 * weights_in
    assert addmm.bytes_written == 4.0 * BATCH * (HIDDEN + D_OUT)
    assert all(k.predicted_s > 0 for k in step.kernels)
    # the fused GELU: its host cost, then its bytes (at the bandwidth measured for a call of
    # its size where that is below the roof) or its GELUs at their measured cost
    roofs = r.explanation.roofs
    bw = roofs.bandwidth_at(gelu.bytes, r.explanation.memory_roof_bytes_per_s)
    gelu_s = BATCH * HIDDEN * roofs.function_s_per_element.get("gelu", 0.0)
    assert gelu.predicted_s == pytest.approx(roofs.per_op_s + max(gelu.bytes / bw, gelu_s))
    assert step.predicted_step_s == pytest.approx(
        step.predicted_kernel_s + step.predicted_host_s + step.predicted_outside_s
    )
    # three kernel calls and one frame call, at its host cost measured here
    per_op = r.explanation.roofs.per_op_s
    frame = frame_host_s("cpu", False, per_op)
    assert frame > 0
    assert step.predicted_host_s == pytest.approx(3 * per_op + frame)
    assert all("torch.compile" not in h for h in r.hints)


@pytest.mark.slow
def test_the_compiled_step_reaches_json_and_the_table(profiled_mlp, capsys):
    from ceiling.cli.profile import render

    record = profiled_mlp.to_dict()
    step = profiled_mlp.compiled_step
    assert record["compiled_step"]["predicted_step_s"] == step.predicted_step_s
    assert record["compiled_step"]["graph_breaks"] == 0
    by_name = {k["name"]: k for k in record["compiled_kernels"]}
    assert by_name["aten::addmm"]["flops"] == 2.0 * BATCH * (D_IN * HIDDEN + HIDDEN * D_OUT)
    render(profiled_mlp.report, 12)
    out = capsys.readouterr().out
    assert "Compiled step's kernels" in out and "aten::addmm" in out
    assert "measured (one profiled step) vs predicted" in out
    # the parts' profiled step, shown apart from the plain steps' median
    assert "the profiled step's wall time" in out and "median of the timed steps" in out
    # every column of the kernels' table is there at 80 characters
    (header,) = [line for line in out.splitlines() if line.lstrip().startswith("kernel ")]
    assert header.split() == ["kernel", "calls", "bytes", "FLOPs", "time", "predicted", "bound"]


def test_a_long_kernel_name_folds_whole_within_80_columns():
    from rich.console import Console

    from ceiling.cli.profile import _compact_table

    cols = ["kernel", "calls", "bytes", "FLOPs", "time", "predicted", "bound"]
    forward = "graph_0_cpp_fused__unsafe_view_gelu_2"
    backward = "graph_0_cpp_fused__unsafe_view_gelu_gelu_backward_view_2"
    numbers = ["4", "6.29 MB", "2.95 GFLOP", "1.12 ms", "1.51 ms", "overhead"]
    table = _compact_table("kernels", cols, [[forward, *numbers], [backward, *numbers]], fold=True)
    console = Console(width=80, record=True)
    console.print(table)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert all(line.rstrip().endswith("overhead") for line in lines if "GFLOP" in line)
    # each name is there whole, folded over lines: two kernels never read alike
    names = "".join(line[: line.find(" ")] if " " in line else line for line in lines[3:])
    assert forward in names and backward in names
