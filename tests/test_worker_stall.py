"""A hung rank told apart from a busy or a waiting one; run folders of dead launchers
removed; the launcher's variables checked. Beats and machine facts are fed in, not timed."""

import json
import os
import socket
import subprocess
import sys

import pytest

from ceiling.errors import InvalidInput
from ceiling.measure import distributed, rendezvous, stall
from ceiling.measure.stall import StallWatch


def beat(cpu_s, line, in_collective=False, where="job.py:12 in step", t=None):
    """A worker's beat: `cpu_s` its threads' CPU time, `t` its clock (default: the reader's)."""
    out = {"cpu_s": cpu_s, "pos": ["job.py", line, 0], "in_collective": in_collective}
    out["where"] = where
    if t is not None:
        out["t"] = t
    return out


def feed(watch, seconds, beats_at):
    """Beats once a second for `seconds`: beats_at(t) -> {rank: beat}."""
    for t in range(seconds + 1):
        for rank, b in beats_at(t).items():
            watch.update(rank, b, float(t))


def test_a_sleeping_rank_is_blamed_while_the_others_wait_for_it():
    w = StallWatch(2, stall_s=30)
    feed(w, 29, lambda t: {0: beat(1.0, 5, in_collective=True), 1: beat(1.0, 9)})
    assert w.hung([0, 1], 29.0) == []
    feed(w, 31, lambda t: {0: beat(1.0, 5, in_collective=True), 1: beat(1.0, 9)})
    assert w.hung([0, 1], 31.0) == [1]
    msg = w.describe([1])
    assert msg.startswith("worker rank 1 of 2 made no progress for 30 s (at job.py:12 in step")
    assert "the other ranks waited for it" in msg


def test_a_rank_busy_in_one_long_call_is_not_hung():
    # the Python position stands still, but the CPU time moves: a long C++ kernel
    w = StallWatch(2, stall_s=30)
    feed(w, 120, lambda t: {0: beat(float(t), 7), 1: beat(0.5, 5, in_collective=True)})
    assert w.hung([0, 1], 120.0) == []


def test_ranks_waiting_while_another_computes_are_not_blamed():
    w = StallWatch(4, stall_s=30)
    waiting = {r: beat(0.2, 5, in_collective=True) for r in (1, 2, 3)}
    # rank 0 works in Python: the position changes at every beat
    feed(w, 100, lambda t: {0: beat(0.2, 100 + t), **waiting})
    assert w.hung([0, 1, 2, 3], 100.0) == []


def test_data_in_flight_counts_as_progress_and_a_dead_collective_does_not():
    w = StallWatch(2, stall_s=30)
    feed(w, 60, lambda t: {r: beat(0.5 * t, 5, in_collective=True) for r in (0, 1)})
    assert w.hung([0, 1], 60.0) == []
    w = StallWatch(2, stall_s=30)
    feed(w, 60, lambda t: {r: beat(0.5, 5, in_collective=True) for r in (0, 1)})
    assert w.hung([0, 1], 60.0) == [0, 1]
    assert "every rank waited in a collective that never completed" in w.describe([0, 1])


def test_the_beats_own_cost_idle_threads_and_polling_are_not_progress():
    """A sleeping rank's process still uses CPU time: its beating thread, gloo's loop thread
    (about 5 ms a second on a loaded machine), a rendezvous store's polling wait. Summed
    over the stall window that once passed for work, and a hung rank was never named."""
    w = StallWatch(2, stall_s=5)
    creeping = lambda t: {0: beat(0.01 * t, 5, in_collective=True), 1: beat(0.008 * t, 9)}  # noqa: E731
    feed(w, 4, creeping)
    assert w.hung([0, 1], 4.0) == []
    feed(w, 6, creeping)
    assert w.hung([0, 1], 6.0) == [1]


def test_a_stopped_rank_is_named_while_the_others_wait_idle_in_the_collective():
    """A stopped worker (SIGSTOP) beats no more; its last beat was inside the collective,
    like the others', which keep beating without working: it alone is to blame."""
    w = StallWatch(3, stall_s=30)
    feed(
        w,
        40,
        lambda t: {
            0: beat(0.004 * t, 5, True, t=float(t)),
            1: beat(0.3, 5, True, t=0.0),  # the same beat, read again and again
            2: beat(0.004 * t, 5, True, t=float(t)),
        },
    )
    assert w.hung([0, 1, 2], 40.0) == [1]
    msg = w.describe([1], 40.0)
    assert msg.startswith("worker rank 1 of 3 made no progress for 30 s (at job.py:12 in step")
    assert "it stopped beating" in msg and msg.endswith("the other ranks waited for it)")


def test_a_beat_leaves_out_the_beating_threads_own_cpu_time():
    import threading
    import time

    seen = {}
    start = time.process_time()

    def burn_then_beat():
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass
        seen.update(stall.beat())

    t = threading.Thread(target=burn_then_beat)
    t.start()
    t.join()
    assert seen["cpu_s"] - start < 0.15  # the 0.3 s burnt by the beating thread is not in it
    assert seen["where"] and seen["pos"] is not None and seen["t"] > 0


def test_importing_torch_distributed_is_not_waiting_in_a_collective(tmp_path, monkeypatch):
    """A rank stopped while it imports torch.distributed must be blamed, not taken for one
    waiting for the others: only a call into torch.distributed is a collective."""
    package = tmp_path / "torch" / "distributed"
    package.mkdir(parents=True)
    (package / "fake_collective.py").write_text(
        "from ceiling.measure import stall\n"
        "AT_IMPORT = stall._main_thread_state()\n"
        "def wait():\n"
        "    return stall._main_thread_state()\n"
    )
    monkeypatch.syspath_prepend(str(package))
    try:
        import fake_collective

        assert fake_collective.AT_IMPORT["in_collective"] is False
        assert fake_collective.wait()["in_collective"] is True
    finally:
        sys.modules.pop("fake_collective", None)


def test_a_rank_that_has_not_beaten_yet_is_left_to_the_deadline():
    w = StallWatch(2, stall_s=30)
    feed(w, 100, lambda t: {0: beat(1.0, 5)})
    assert w.hung([0, 1], 100.0) == []
    assert w.hung([0], 100.0) == [0]


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _run_folder(root, name, owner):
    folder = root / f"ceiling-dist-{name}"
    folder.mkdir()
    (folder / "rank0.log").write_text("x")
    if owner is not None:
        (folder / distributed.OWNER_FILE).write_text(json.dumps(owner))
    return folder


def test_only_folders_of_dead_launchers_are_removed(tmp_path):
    import psutil

    me = {"pid": os.getpid(), "started": psutil.Process().create_time()}
    dead = _run_folder(tmp_path, "dead", {"pid": _dead_pid(), "started": 1.0})
    reused = _run_folder(tmp_path, "reused", {"pid": os.getpid(), "started": 1.0})
    alive = _run_folder(tmp_path, "alive", me)
    unknown = _run_folder(tmp_path, "unknown", None)
    other = tmp_path / "not-ours"
    other.mkdir()
    removed = distributed.remove_stale_run_folders(str(tmp_path))
    assert sorted(removed) == sorted([dead, reused])
    assert not dead.exists() and not reused.exists()
    assert alive.exists() and unknown.exists() and other.exists()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "x"}, "RANK='x' in the environment is not a whole number"),
        ({"RANK": "2"}, "RANK=2 in the environment must be in [0, 1]"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE=0 in the environment must be at least 1"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT=70000 in the environment must be in [1, 65535]"),
        ({"MASTER_PORT": "http"}, "MASTER_PORT='http'"),
        ({"MASTER_ADDR": " "}, "MASTER_ADDR in the environment is empty"),
    ],
)
def test_bad_launcher_variables_are_one_line(env, message):
    base = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    with pytest.raises(InvalidInput) as err:
        rendezvous.launcher_env({**base, **env})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_busy_master_port_is_named_and_loopback_is_bound_alone():
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(InvalidInput, match=rf"MASTER_PORT={port} on 127.0.0.1 is in use"):
            rendezvous._listen("127.0.0.1", port)
    sock = rendezvous._listen("127.0.0.1", 0)
    try:
        assert sock.getsockname()[0] == "127.0.0.1"  # not 0.0.0.0: no other machine needs it
    finally:
        sock.close()


def test_a_busy_master_port_under_a_launcher_is_one_line_exit_2(cli, monkeypatch):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
        for k, v in {**env, "MASTER_PORT": str(port)}.items():
            monkeypatch.setenv(k, v)
        code, _, err = cli("bench", "comm", "--quick", "--ops", "all_reduce", "--device", "cpu")
    assert code == 2 and err.count("\n") == 1, err
    assert f"MASTER_PORT={port} on 127.0.0.1 is in use" in err
    monkeypatch.setenv("MASTER_PORT", "not-a-port")
    code, _, err = cli("scale", "synthetic", "--workers", "1", "--device", "cpu")
    assert (
        code == 2
        and err == "error: MASTER_PORT='not-a-port' in the environment is not a whole number\n"
    )
