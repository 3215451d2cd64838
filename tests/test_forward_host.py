"""A model's own host time per forward op: its forward timed at its batch and at half of it
(model.forward_host, profile.forward_host), and a profile's forward priced with it."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ceiling.errors import InvalidInput
from ceiling.model.forward_host import TORCH_MODULES, ForwardHost, fixed_time_s, forward_host
from ceiling.model.roofline import Roofs
from ceiling.profile.forward_host import MAX_TURNS, MIN_TURNS, half_batch, time_forward_turns


def test_the_fixed_part_is_the_line_through_both_batches_at_zero():
    # t(n) = 2 ms + n · 4 ms
    assert fixed_time_s(10e-3, 6e-3, 2, 1) == pytest.approx(2e-3)
    assert fixed_time_s(14e-3, 6e-3, 3, 1) == pytest.approx(2e-3)  # an odd batch
    with pytest.raises(InvalidInput, match="half"):
        fixed_time_s(1.0, 1.0, 2, 2)


@given(
    fixed=st.floats(0.0, 1.0),
    per_sample=st.floats(1e-6, 1.0),
    samples=st.integers(2, 512),
)
def test_a_forward_linear_in_its_batch_gives_back_its_fixed_part(fixed, per_sample, samples):
    half = samples // 2
    full_s, half_s = fixed + samples * per_sample, fixed + half * per_sample
    got = fixed_time_s(full_s, half_s, samples, half)
    assert got == pytest.approx(fixed, abs=1e-9 * (1 + samples * per_sample))


def test_host_per_op_is_the_median_turns_fixed_part_less_the_weights_over_the_ops():
    turns = [(10e-3, 6e-3)] * 3 + [(30e-3, 6e-3)] + [(11e-3, 6.5e-3), (10e-3, 6.1e-3)] * 2
    host = forward_host(turns, ops=100, samples=2, half=1, weights_s=0.5e-3)
    # fixed parts 2, 2, 2, -18 (a spoilt turn), 2, 2.2, 2, 2.2 ms: median 2 ms; less 0.5 ms
    # of weights, over 100 ops
    assert host.per_op_s == pytest.approx(15e-6) and host.fixed_s == pytest.approx(2e-3)
    assert (host.weights_s, host.ops, host.samples, host.half, host.turns) == (0.5e-3, 100, 2,
                                                                               1, 8)  # fmt: skip
    assert host.spread_s == pytest.approx(0.15e-3)  # quartiles 2 and 2.15 ms
    assert host.row()["per_op_s"] == pytest.approx(15e-6)
    assert host.describe() == (
        "this model's own, a mean over its 100 forward ops: the forward's time that does not "
        "grow with the batch (batch 2 against 1, median of 8 turns, less 0.5 ms reading the "
        "weights)"
    )
    assert host.times is None
    beside = dataclasses.replace(host, replaced_s=20e-6, replaced=TORCH_MODULES)
    assert beside.describe().endswith("; torch's own modules 20 µs") and beside.times == 0.75


def test_no_host_figure_when_the_work_hides_it_the_turns_disagree_or_there_are_no_ops():
    assert forward_host([(10e-3, 5e-3)], ops=10, samples=2, half=1) is None  # fixed 0
    assert forward_host([(10e-3, 6e-3)], ops=10, samples=2, half=1, weights_s=3e-3) is None
    assert forward_host([(10e-3, 6e-3)], ops=0, samples=2, half=1) is None
    assert forward_host([], ops=10, samples=2, half=1) is None
    # fixed parts 2, 2, 12, -8 ms: the turns spread over 12.5 ms, more than the 2 ms left
    noisy = [(10e-3, 6e-3), (10e-3, 6e-3), (10e-3, 11e-3), (20e-3, 6e-3)]
    assert forward_host(noisy, ops=10, samples=2, half=1) is None
    steady = [(10e-3, 6e-3), (10e-3, 6e-3), (10e-3, 6.1e-3), (10.1e-3, 6e-3)]
    assert forward_host(steady, ops=10, samples=2, half=1).per_op_s == pytest.approx(2e-4)


def test_half_a_batch_cuts_the_tensors_the_samples_lead():
    ids = torch.arange(32).reshape(4, 8)
    positions = torch.arange(8)  # shared by every sample: kept whole
    half, n = half_batch({"input_ids": ids, "labels": ids, "positions": positions, "k": 3}, 4)
    assert n == 2 and torch.equal(half["input_ids"], ids[:2])
    assert torch.equal(half["labels"], ids[:2])
    assert half["positions"] is positions and half["k"] == 3
    (x, y), n = half_batch((torch.zeros(5, 3), torch.ones(5)), 5)
    assert n == 2 and x.shape == (2, 3) and y.shape == (2,)
    assert half_batch({"input_ids": ids}, 1) is None  # one sample has no half
    assert half_batch({"positions": positions}, 4) is None  # no tensor leads with samples


class _LinearForward:
    """A runner whose forward takes 3 ms plus 2 ms a sample on a fake clock."""

    device = torch.device("cpu")

    def __init__(self, samples: int) -> None:
        self.now, self.samples, self.batches = 0.0, samples, []

    def clock(self) -> float:
        return self.now

    def forward_only(self, batch=None) -> None:
        n = self.samples if batch is None else batch.shape[0]
        self.batches.append(n)
        self.now += 3e-3 + n * 2e-3


def test_turns_alternate_the_batches_and_stop_at_their_budget():
    runner = _LinearForward(8)
    turns = time_forward_turns(runner, torch.zeros(4), budget_s=0.1, clock=runner.clock)
    # each turn: 19 ms at 8, 11 ms at 4, the order swapped each turn
    assert turns == [pytest.approx((19e-3, 11e-3))] * 4  # 4 turns pass the 0.1 s budget
    assert runner.batches == [8, 4, 4, 8, 8, 4, 4, 8]
    few = time_forward_turns(_LinearForward(8), torch.zeros(4), budget_s=0.0)
    assert len(few) == MIN_TURNS
    many = time_forward_turns(runner, torch.zeros(4), budget_s=1e9, clock=runner.clock)
    assert len(many) == MAX_TURNS
    assert forward_host(turns, ops=10, samples=8, half=4).fixed_s == pytest.approx(3e-3)


def test_the_forward_phase_takes_the_models_own_host_figure():
    from ceiling.profile.explain import with_forward_host

    by_phase = {"forward": 20e-6, "forward_view": 2e-6, "backward": 9e-6}
    roofs = Roofs(1e12, 1e11, per_op_s=2e-6, serial_dispatch=True, host_s_by_phase=by_phase)
    # the model's forward pays 1.5× torch's figure for the same ops: views as the rest
    host = ForwardHost(15e-6, 3e-3, 0.0, 200, 2, 1, 5, 0.0, 10e-6, TORCH_MODULES)
    priced = with_forward_host(roofs, host)
    assert priced.host_s("forward") == pytest.approx(30e-6)
    assert priced.host_s("forward_view") == pytest.approx(3e-6)
    assert priced.host_s("recompute") == pytest.approx(30e-6)  # a replay of the forward
    assert priced.host_s("backward") == 9e-6 and priced.host_s("optimizer") == 2e-6
    # nothing to scale: the mean for every forward op
    alone = with_forward_host(roofs, dataclasses.replace(host, replaced_s=0.0, replaced=""))
    assert alone.host_s("forward") == alone.host_s("forward_view") == 15e-6


def _stub(samples: int, serial: bool = True, train: bool = True, forward=None):
    phases = {"forward": 20e-6, "forward_view": 2e-6} if train else {}
    roofs = Roofs(1e12, 1e11, per_op_s=4e-6, serial_dispatch=serial, host_s_by_phase=phases)
    workload = SimpleNamespace(samples_per_step=samples, name="stub", params=1000)
    runner = SimpleNamespace(batch={"x": torch.zeros(samples, 4)}, optimizer=None,
                             forward_only=forward or (lambda batch=None: None))  # fmt: skip
    call = SimpleNamespace(phase="forward", category="matmul", op="aten.mm")
    view = SimpleNamespace(phase="forward", category="view", op="aten.view")
    calls = [call] * 8 + [view] * 2 + [SimpleNamespace(phase="backward")] * 5
    return runner, workload, calls, roofs


def test_the_models_host_is_measured_on_a_cpu_with_a_half_batch_where_it_matters(monkeypatch):
    from ceiling.model.forward_host import python_hint
    from ceiling.profile import forward_host as timing
    from ceiling.profile.run import _forward_host

    monkeypatch.setattr(timing, "time_forward_turns", lambda runner, half: [(10e-3, 6e-3)] * 3)
    host = _forward_host(*_stub(2), 0.0, 4, step_s=0.005)
    assert host.ops == 10 and host.fixed_s == pytest.approx(2e-3)
    assert host.weights_s == pytest.approx(1000 * 4 / 1e11)
    # torch's figure for the same ops: 8 at 20 µs and 2 views at 2 µs, 16.4 µs a mean
    assert host.replaced == TORCH_MODULES and host.replaced_s == pytest.approx(16.4e-6)
    assert _forward_host(*_stub(3), 0.0, 4, step_s=0.005).half == 1  # an odd batch
    assert _forward_host(*_stub(1), 0.0, 4, step_s=0.005) is None  # no half of one sample
    assert _forward_host(*_stub(2, serial=False), 0.0, 4, step_s=0.005) is None  # a GPU
    # torch's figure puts the forward's host at 164 µs, under 2 % of an 8.3 ms step
    assert _forward_host(*_stub(2), 0.0, 4, step_s=0.0083) is None

    def fails(batch=None):
        raise RuntimeError("shape mismatch")

    assert _forward_host(*_stub(2, forward=fails), 0.0, 4, step_s=0.005) is None
    # inference: the per-op floor is replaced, and no hint compares it with torch's modules
    inference = _forward_host(*_stub(2, train=False), 0.0, 4, step_s=0.001)
    assert inference.replaced == "the per-op floor"
    assert inference.replaced_s == pytest.approx(4e-6)
    assert python_hint(inference, 0.001) == []


@pytest.mark.slow
def test_a_profiled_training_step_prices_its_forward_at_the_models_own_host(monkeypatch):
    from ceiling.profile import explain, run
    from ceiling.profile import forward_host as timing
    from ceiling.profile.runner import StepRunner
    from ceiling.profile.targets import load_target

    workload = dataclasses.replace(
        load_target("gpt:tiny", batch=2, seq=16),
        make_optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.0, foreach=True),
    )
    measured = []

    def turns(runner, half):
        measured.append(half[0].shape[0])  # (tokens, targets), after the half really ran
        return [(10e-3, 6e-3)] * 3

    monkeypatch.setattr(timing, "time_forward_turns", turns)
    torchs = []  # the roofs the model's figure replaces torch's in

    def spy(roofs, host):
        torchs.append(roofs)
        return explain.with_forward_host(roofs, host)

    monkeypatch.setattr(run, "with_forward_host", spy)
    monkeypatch.setattr(StepRunner, "timed_steps", lambda self, n: [0.05] * max(n, 1))
    monkeypatch.setattr(run, "FORWARD_HOST_SHARE", 0.0)
    measured_roofs = run.local_roofs

    def memory_beyond_reach(*args, **kwargs):
        """This machine's roofs, its memory made so fast that reading the weights takes no
        time: the 2 ms fixed time stays the model's host time however slowly a loaded
        machine measured its memory (it was taken off whole, and the figure dropped)."""
        roofs, source = measured_roofs(*args, **kwargs)
        return dataclasses.replace(
            roofs, bandwidth_bytes_per_s=1e18, cache_bandwidth_bytes_per_s=None
        ), source

    monkeypatch.setattr(run, "local_roofs", memory_beyond_reach)
    e = run.profile_target(workload, train=True, steps=1, warmup_steps=0).explanation
    assert measured == [1]
    host = e.forward_host
    assert host.fixed_s == pytest.approx(2e-3) and host.samples == 2 and host.half == 1
    (before,) = torchs
    for phase in ("forward", "forward_view", "recompute"):
        assert e.roofs.host_s(phase) == pytest.approx(host.times * before.host_s(phase))
    assert e.roofs.host_s("backward") == before.host_s("backward")
    from ceiling.render.waterfall import explanation_json, roofs_rows
    from ceiling.units import format_time

    row = ["host time per forward op", f"{format_time(host.per_op_s)} — {host.describe()}"]
    assert row in roofs_rows(e, 0.05)
    row = explanation_json(e)
    assert row["forward_host"] == host.row()
    assert row["host_s_per_op_by_phase"]["forward"] == e.roofs.host_s("forward")


def test_a_line_when_the_models_python_costs_well_over_torchs_modules():
    from ceiling.model.forward_host import python_hint

    host = ForwardHost(30e-6, 3e-3, 0.0, 100, 2, 1, 5, 0.0, 15e-6, TORCH_MODULES)
    (line,) = python_hint(host, step_s=0.02)
    assert line == (
        "the model's own Python: its forward pays 30 µs of host time an op, 2× what torch's "
        "own modules pay for the same ops (15 µs), 3 ms of the 20 ms step; torch.compile "
        "traces it away"
    )
    assert python_hint(host, step_s=0.04) == []  # under a tenth of the step
    assert python_hint(dataclasses.replace(host, replaced_s=25e-6), 0.02) == []
    assert python_hint(None, 0.02) == [] and python_hint(host, None) == []


@pytest.mark.slow
def test_ceiling_step_explains_its_step_as_ceiling_profile_does(monkeypatch):
    """`ceiling step` prices its recorded step with the same roofs as `ceiling profile`:
    each matmul shape at its own measured rate, the forward at the model's own host time."""
    from ceiling.profile import forward_host as timing
    from ceiling.profile import run
    from ceiling.profile.step_run import measure_step

    halves = []

    def turns(runner, half):
        halves.append(half[0].shape[0])
        return [(10e-3, 6e-3)] * 3

    monkeypatch.setattr(timing, "time_forward_turns", turns)
    monkeypatch.setattr(run, "FORWARD_HOST_SHARE", 0.0)
    report = measure_step("mlp", workers=(0,), batch=4, steps=1, warmup_steps=0, threads=1)
    e = report.explanation
    assert halves == [2]
    assert e.forward_host is not None and e.forward_host.fixed_s == pytest.approx(2e-3)
    assert e.forward_host.samples == 4 and e.forward_host.half == 2
    assert e.matmul_shapes_measured > 0  # the Linear layers' shapes, each timed
    # the waterfall still sums to the fastest worker count's step, its data wait apart
    (row,) = report.rows
    assert sum(b.seconds for b in e.waterfall) == pytest.approx(row.step_s)
