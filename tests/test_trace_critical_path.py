"""The critical path of a step and what-if questions on it, by hand on small traces built from
the Kineto event schema, and checked for sense on the real traces."""

from __future__ import annotations

import json

import pytest

from ceiling.errors import InvalidInput
from ceiling.trace.analyze import analyze
from ceiling.trace.what_if import parse
from test_trace_cuda import _kernel, _launch, _write, _x, cuda_trace

US = 1e-6
PATH = ("compute", "communication", "host", "idle waits")


def _us(d: dict) -> dict:
    return {k: v / US for k, v in d.items()}


def _answers(path) -> dict:
    return {a.question: a.step_s / US for a in path.what_if}


def test_the_path_of_a_step_by_hand(tmp_path):
    """cuda_trace: the data loader (80) and the addmm op up to its launch (5), the gemm's
    launch to its start (5), gemm 300 and add 100 on stream 7, the copy queued behind the add
    250 later and 50 long, the synchronise returning at its end, the mul op to its launch (5)
    and the mul (50). The host's Python between ops (80-90, 800-895) is no recorded work."""
    r = analyze(_write(tmp_path / "t.json", cuda_trace()), critical_path=True)
    step = r.ranks[0].steps[0]
    path = step.critical_path
    assert path.length_s / US == pytest.approx(845)
    got = _us(path.seconds)
    assert got == pytest.approx({"compute": 500, "communication": 0, "host": 90, "idle waits": 255})
    assert path.length_s <= step.wall_s
    top = {(cat, name): s / US for cat, name, s in path.top}
    assert top[("compute", "sm90_xmma_gemm_bf16bf16_bf16f32")] == pytest.approx(300)
    assert top[("idle waits", "the stream's previous work")] == pytest.approx(250)
    assert r.critical_path[0].length_s == path.length_s  # the mean of one step


def test_what_if_on_the_path_by_hand(tmp_path):
    """gemm 2x: the chain behind it ends 150 earlier, but the all-reduce (launched at 112, 338
    later, 250 long) then holds the synchronise to 690: the step ends at 745. The all-reduce
    is off the path (overlapping it saves nothing); 1 µs launch calls start the gemm 3 µs
    sooner (launched at 90+5 after a 4 µs call, it started 5 µs after: now 2)."""
    doc = cuda_trace()
    r = analyze(_write(tmp_path / "t.json", doc), what_if="gemm=2x,comm=overlap,launch=1us")
    path = r.ranks[0].steps[0].critical_path
    assert _answers(path) == pytest.approx(
        {"gemm=2x": 745, "comm=overlap": 845, "launch=1us": 842, "all": 692}
    )
    assert {a.question: a.saving_s / US for a in path.what_if}["gemm=2x"] == pytest.approx(100)


def comm_trace(nccl_start=10, rank=0) -> dict:
    """A step held by its all-reduce: the c10d op (0-10) launches it at 2 onto stream 20, where
    it runs nccl_start-510 (100 MB of fp32 over 4 ranks); aten::mm (10-20) launches a 200 µs
    gemm at 12 (it runs 20-220); the host synchronises 20-515, then aten::add (515-525)
    launches a 50 µs kernel at 517 that runs 525-575."""
    nccl = {
        "Collective name": "allreduce",
        "In msg nelems": 25_000_000,
        "dtype": "Float",
        "Group size": 4,
    }
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 1000),
        _x("cpu_op", "c10d::allreduce_", 0, 10, **{"External id": 1}),
        _launch(2, 1, 1),
        _x("cpu_op", "aten::mm", 10, 10, **{"External id": 2}),
        _launch(12, 2, 2),
        _x("cuda_runtime", "cudaDeviceSynchronize", 20, 495),
        _x("cpu_op", "aten::add", 515, 10, **{"External id": 3}),
        _launch(517, 3, 3),
        _kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            nccl_start,
            510 - nccl_start,
            1,
            1,
            stream=20,
            **nccl,
        ),
        _kernel("volta_sgemm_128x64_nn", 20, 200, 2, 2),
        _kernel("vectorized_elementwise_kernel<add>", 525, 50, 3, 3),
    ]
    return {
        "deviceProperties": [{"id": 0, "name": "Tesla V100-SXM2-32GB"}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 4},
        "traceEvents": events,
    }


def test_a_step_held_by_its_collective_by_hand(tmp_path):
    """Path: the c10d op to its launch (2), launch to start (8), the all-reduce (500), the
    synchronise returning (5), the add op to its launch (2), launch to start (8), the add (50):
    575 µs of a 1000 µs step. Overlapped, the gemm (ending at 220) holds the synchronise: 280;
    twice as fast 325; at y GB/s bus bandwidth the all-reduce takes 100 MB x 2(4-1)/4 / y."""
    questions = "gemm=2x,comm=overlap,comm=2x,link=100GB/s,link=400GB/s"
    r = analyze(_write(tmp_path / "t.json", comm_trace()), what_if=questions)
    step = r.ranks[0].steps[0]
    assert step.wall_s / US == pytest.approx(1000)
    path = step.critical_path
    assert _us(path.seconds) == pytest.approx(
        {"compute": 50, "communication": 500, "host": 4, "idle waits": 21}
    )
    assert _answers(path) == pytest.approx(
        {
            "gemm=2x": 575,
            "comm=overlap": 280,
            "comm=2x": 325,
            "link=100GB/s": 75 + 1.5e8 / 100e9 / US,  # 1500 µs: slower than it ran
            "link=400GB/s": 75 + 1.5e8 / 400e9 / US,  # 375 µs
            # overlapped, the link no longer matters; the gemm twice as fast ends at 120
            "all": 180,
        }
    )


def test_a_collective_waiting_for_a_later_rank_is_a_wait(tmp_path):
    """Rank 1 reaches the all-reduce 300 µs later (its kernel runs 310-510): of rank 0's 500
    µs in it, 200 are the transfer (the least any rank spent) and 300 the wait for rank 1."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    _write(folder / "r0.json", comm_trace(rank=0))
    _write(folder / "r1.json", comm_trace(nccl_start=310, rank=1))
    r = analyze(folder, critical_path=True, workers=1)
    p0 = r.critical_path[0]
    assert p0.seconds["communication"] / US == pytest.approx(200)
    assert p0.seconds["idle waits"] / US == pytest.approx(21 + 300)
    assert p0.peer_wait_s / US == pytest.approx(300)
    assert p0.length_s / US == pytest.approx(575)  # the length stays: only the split moves
    assert r.critical_path[1].peer_wait_s == 0.0
    assert r.cross.straggler == r.cross.slowest_rank == 1


def launch_trace(calls=3) -> dict:
    """A launch-bound step: ops of 12 µs back to back, each a 10 µs launch from 1 µs in; each
    2 µs kernel starts 12 µs after its launch began, the stream idle in between."""
    events = [_x("user_annotation", "ProfilerStep#1", 0, 12 * calls)]
    for k in range(calls):
        t = 12 * k
        events += [
            _x("cpu_op", "aten::relu", t, 12, **{"External id": k + 1}),
            _x(
                "cuda_runtime",
                "cudaLaunchKernel",
                t + 1,
                10,
                correlation=k + 1,
                **{"External id": k + 1},
            ),
            _kernel("vectorized_elementwise_kernel<relu>", t + 13, 2, k + 1, k + 1),
        ]
    return {"traceEvents": events}


def test_launch_cost_by_hand(tmp_path):
    """Path: two whole ops (12 each, 10 of it launching), the last op to its launch (1), launch
    to kernel start (12), the kernel (2): 39 µs. With 3 µs launch calls: 2 ops of 5, 1, then
    the kernel starts 12 - 10 + 3 = 5 µs after its launch began, and runs 2: 18 µs."""
    r = analyze(_write(tmp_path / "t.json", launch_trace()), what_if="launch=3us")
    path = r.ranks[0].steps[0].critical_path
    assert _us(path.seconds) == pytest.approx(
        {"compute": 2, "communication": 0, "host": 25, "idle waits": 12}
    )
    assert _answers(path) == pytest.approx({"launch=3us": 18})


# a question and the words that say what is wrong with it
BAD_QUESTIONS = {
    "gemm=2": "written like 2x",
    "warp=2x": "unknown question 'warp'",
    "link=0GB/s": "above 0",
    "gemm=0x": "above 0",
    "launch=fast": "cannot read a duration",
    "": "KEY=VALUE",
    "comm": "KEY=VALUE",
}


@pytest.mark.parametrize("text", list(BAD_QUESTIONS))
def test_a_bad_question_is_named(text):
    with pytest.raises(InvalidInput, match=BAD_QUESTIONS[text]):
        parse(text)


def test_the_command_answers_and_refuses(tmp_path, cli):
    path = _write(tmp_path / "t.json", comm_trace())
    code, out, err = cli("trace", path, "--what-if", "comm=overlap")
    assert code == 0, err
    assert "critical path" in out and "comm=overlap" in out and "295 µs" in out
    code, out, err = cli("trace", path, "--critical-path", "--json")
    assert code == 0, err
    cp = json.loads(out)["ranks"][0]["critical_path"]
    assert cp["length_s"] / US == pytest.approx(575) and set(cp["seconds"]) == set(PATH)
    code, out, err = cli("trace", path, "--what-if", "gemm=fast")
    assert code == 2 and "gemm=fast" in err and "Traceback" not in err


def test_without_the_flag_no_path_is_made(tmp_path):
    r = analyze(_write(tmp_path / "t.json", comm_trace()))
    assert r.critical_path == {} and r.ranks[0].steps[0].critical_path is None


def test_the_planner_calibrated_by_the_trace_moves_the_same_way(tmp_path):
    """Each question answered on the trace's critical path and by the planner calibrated with
    that trace (GPT tiny in fp16, 8-way data parallel on the trace's V100): hiding
    communication buys time in both, a slower interconnect and a costlier launch cost time."""
    import ceiling

    path = _write(tmp_path / "t.json", comm_trace())
    answers = {
        a.question: a.saving_s
        for a in analyze(path, what_if="comm=overlap,link=10GB/s,launch=200us")
        .critical_path[0]
        .what_if
    }

    def plan_step(**change) -> float:
        r = ceiling.plan(
            "gpt:tiny", 8, spec="v100", dtype="fp16", fixed="d=8", calibrate=path, top=1, **change
        )
        return r.best.step_time_s

    planner = {
        "comm=overlap": plan_step(dp_overlap=False) - plan_step(dp_overlap=True),
        "link=10GB/s": plan_step() - plan_step(intra_bw="10GB/s", inter_bw="10GB/s"),
        # the planner's host hides under the GPU's step until a launch costs ~100 µs here
        "launch=200us": plan_step(host_kernel_us=1) - plan_step(host_kernel_us=200),
    }
    for question, saving in planner.items():
        assert saving != 0 and answers[question] != 0
        assert (saving > 0) == (answers[question] > 0), question
    assert answers["comm=overlap"] > 0 and answers["link=10GB/s"] < 0


def test_a_host_path_beside_a_full_gpu_queue_is_cautioned():
    from types import SimpleNamespace

    from ceiling.render.critical_path_tables import host_wait_note
    from ceiling.trace.results import PATH_COMPUTE, PATH_HOST, CriticalPath

    hosty = CriticalPath(0.1, {PATH_HOST: 0.095, PATH_COMPUTE: 0.005}, [])
    queued = SimpleNamespace(rank=0, gpu_lag_s=0.0108)
    note = host_wait_note(hosty, queued)
    assert note is not None and "95% of the path is host time" in note
    assert "10.8 ms behind" in note
    # the host feeding the GPU just in time, or a path mostly on the device: nothing to say
    assert host_wait_note(hosty, SimpleNamespace(rank=0, gpu_lag_s=20e-6)) is None
    devicey = CriticalPath(0.1, {PATH_HOST: 0.05, PATH_COMPUTE: 0.05}, [])
    assert host_wait_note(devicey, queued) is None


def test_the_queue_line_agrees_with_idle_spent_waiting_on_the_host():
    from types import SimpleNamespace

    from ceiling.render.trace_tables import gpu_lines
    from ceiling.trace.breakdown import LAUNCH

    def rank(waited):
        step = SimpleNamespace(idle_reasons={LAUNCH: waited})
        return SimpleNamespace(gpu_lag_s=0.0108, steps=[step], step_s=0.6, hta=None)

    # the queue is full on median, and hardly any idle waits for a launch: not launch-bound
    (line,) = gpu_lines(rank(0.001))
    assert "so the run is not launch-bound" in line
    # but 181 ms of a 600 ms step waited for work not yet launched: both said, no contradiction
    (line,) = gpu_lines(rank(0.181))
    assert "yet idles 181 ms a step for work not yet launched" in line
    assert "not launch-bound" not in line
