import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from ceiling.errors import InvalidInput, WorkerFailed
from ceiling.measure import distributed
from patience import HANG_S

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
JOBS = "test_distributed_jobs"


@pytest.fixture
def jobs_on_path(monkeypatch):
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", f"{HERE}{os.pathsep}{path}" if path else str(HERE))


def _assert_gone(pids, within_s=HANG_S):
    end = time.monotonic() + within_s
    alive = list(pids)
    while alive and time.monotonic() < end:
        alive = [
            p
            for p in alive
            if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]
        time.sleep(0.1)
    assert not alive, f"worker processes left behind: {alive}"


def test_free_port_is_bindable():
    import socket

    port = distributed.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_resolve_target_errors():
    from ceiling.errors import UnknownName

    with pytest.raises(InvalidInput, match="MODULE:CALLABLE"):
        distributed.resolve_target("nocolon")
    with pytest.raises(UnknownName, match=r"cannot import .* no such module"):
        distributed.resolve_target("no_such_module_xyz:f")
    with pytest.raises(UnknownName, match="no callable"):
        distributed.resolve_target("ceiling.errors:nothing_here")


def test_local_ranks_meet_through_a_file_and_talk_over_loopback(tmp_path, monkeypatch):
    """No rendezvous port (none to be taken, none reachable from the network, no reverse DNS
    lookup of 127.0.0.1), gloo bound to the loopback interface, a launcher's variables
    from the caller's environment not passed on."""
    from ceiling.measure import rendezvous

    monkeypatch.setenv("MASTER_PORT", "1")
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    env = distributed._worker_env(distributed.Job("m:f"), 1, 2, tmp_path)
    assert "MASTER_PORT" not in env and "MASTER_ADDR" not in env
    assert "TORCHELASTIC_USE_AGENT_STORE" not in env
    assert env[rendezvous.STORE_VAR] == str(tmp_path / "store")
    assert (env["RANK"], env["WORLD_SIZE"]) == ("1", "2")
    assert env["GLOO_SOCKET_IFNAME"] == rendezvous.loopback_interface()


def _torchrun_env(tmp_path, world="2", local_world="2", agents="1") -> dict[str, str]:
    """The variables torchrun gives local rank 1, its folder for the attempt made."""
    rank_dir = tmp_path / "run_abc" / "attempt_0" / "1"
    rank_dir.mkdir(parents=True, exist_ok=True)
    return {
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": world,
        "LOCAL_WORLD_SIZE": local_world,
        "GROUP_WORLD_SIZE": agents,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_ERROR_FILE": str(rank_dir / "error.json"),
    }


def test_torchrun_ranks_all_on_this_machine_meet_through_a_file(tmp_path):
    from ceiling.measure import rendezvous

    attempt = tmp_path / "run_abc" / "attempt_0"
    assert rendezvous.store_file(_torchrun_env(tmp_path)) == str(attempt / "ceiling-store")
    # ranks on other machines, or no folder from torchrun: its TCP store
    assert rendezvous.store_file(_torchrun_env(tmp_path, world="4", local_world="2")) is None
    assert rendezvous.store_file(_torchrun_env(tmp_path, agents="2")) is None
    assert rendezvous.store_file({**_torchrun_env(tmp_path), "TORCHELASTIC_ERROR_FILE": ""}) is None
    local = {**_torchrun_env(tmp_path), rendezvous.STORE_VAR: "/run/x"}
    assert rendezvous.store_file(local) == "/run/x"


def test_a_torchrun_rank_on_one_machine_opens_no_tcp_store(tmp_path, monkeypatch):
    """torch's TCP store client looks up the host name of the address it connects to (a
    reverse DNS query for 127.0.0.1): a rank whose peers are all on this machine must not
    make one. MASTER_PORT leads nowhere here, so a TCP rendezvous could not succeed."""
    import importlib

    import torch.distributed as dist

    from ceiling.measure import rendezvous

    def no_tcp_store(*_args, **_kwargs):
        raise AssertionError("a TCP store was made (it looks up the peer's host name)")

    env = _torchrun_env(tmp_path, world="1", local_world="1")
    env.update(RANK="0", LOCAL_RANK="0", MASTER_PORT="1")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "unset below")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    monkeypatch.delenv(rendezvous.STORE_VAR, raising=False)
    for module in (dist, importlib.import_module("torch.distributed.rendezvous")):
        monkeypatch.setattr(module, "TCPStore", no_tcp_store)
    rendezvous.init_group("gloo", timeout_s=HANG_S)
    try:
        assert dist.get_world_size() == 1
        assert os.environ.get("GLOO_SOCKET_IFNAME") == rendezvous.loopback_interface()
    finally:
        dist.destroy_process_group()


def test_a_failing_rank_is_named_and_the_others_stopped(jobs_on_path):
    seen, pids = [], []
    with pytest.raises(WorkerFailed) as err:
        distributed.launch_local(
            distributed.Job(f"{JOBS}:fail_on_rank_1", device="cpu", timeout_s=HANG_S),
            2,
            on_progress=seen.append,
            on_start=pids.extend,
        )
    assert seen == ["summed 3"]  # rank 0's progress line, after a real all-reduce (1 + 2)
    msg = str(err.value)
    assert "worker rank 1 of 2 exited with code 1" in msg
    assert "deliberate failure in the test job" in msg
    _assert_gone(pids)


def test_a_user_error_in_a_worker_is_the_message_not_the_broken_link(jobs_on_path):
    with pytest.raises(WorkerFailed) as err:
        distributed.launch_local(
            distributed.Job(f"{JOBS}:bad_input_on_rank_0", device="cpu", timeout_s=HANG_S), 2
        )
    assert str(err.value) == "worker rank 0 of 2: this setting needs a larger batch"


def test_a_hanging_rank_hits_the_timeout(jobs_on_path):
    pids = []
    with pytest.raises(WorkerFailed, match=r"did not finish within 3 s \(rank 0, 1 of 2"):
        distributed.launch_local(
            distributed.Job(f"{JOBS}:hang_on_rank_1", device="cpu", timeout_s=3),
            2,
            on_start=pids.extend,
        )
    _assert_gone(pids)


def _leftovers(tmp_path) -> tuple[list[Path], list[int]]:
    """Run folders and processes of a command run with TMPDIR=tmp_path still there."""
    folders = list(tmp_path.glob("ceiling-dist-*"))
    procs = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if str(tmp_path) in " ".join(p.info["cmdline"] or []):
                procs.append(p.pid)
    return folders, procs


def test_a_hung_rank_in_scale_is_one_line_exit_2_and_leaves_nothing(jobs_on_path, tmp_path):
    """Rank 1 sleeps forever while rank 0 waits for it: named within the stall time (5 s
    here, 30 s by default), long before the overall deadline (which would say "did not
    finish within"); no process, no folder left. The sleeping rank's process still uses a
    little CPU time (its beating thread, gloo's loop thread): that is not progress."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    cmd = [sys.executable, "-m", "ceiling", "scale", f"{JOBS}:hang_step_on_rank_1"]
    cmd += ["--workers", "1,2", "--steps", "2", "--stall-timeout", "5", "--device", "cpu"]
    # ~15 s idle; worker start-up (torch import) stretches it on a loaded shared machine
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=HANG_S)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: worker rank 1 of 2 made no progress for 5 s")
    assert "in hang_step_on_rank_1" in proc.stderr and proc.stderr.count("\n") == 1
    assert _leftovers(tmp_path) == ([], [])


def test_a_stopped_worker_in_bench_comm_is_named_and_leaves_nothing(tmp_path):
    """A worker stopped (SIGSTOP) in the middle of the collectives beats no more while the
    other waits for it in the collective: it is named, every worker stopped, exit 2."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    cmd = [sys.executable, "-m", "ceiling", "bench", "comm", "--workers", "2", "--device"]
    cmd += ["cpu", "--ops", "all_reduce", "--min-bytes", "4KiB", "--max-bytes", "4KiB"]
    cmd += ["--iters", "100000000", "--stall-timeout", "5"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    try:
        workers = _workers_of(proc, 2)
        rank1 = next(w for w in workers if w.environ().get("RANK") == "1")
        beat = next(tmp_path.glob("ceiling-dist-*")) / "rank1.beat"
        _wait_for(lambda: '"in_collective": true' in _text(beat), within_s=HANG_S)
        rank1.send_signal(signal.SIGSTOP)
        _out, err = proc.communicate(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, err
    assert err.startswith("error: worker rank 1 of 2 made no progress for 5 s"), err
    assert "it stopped beating" in err and err.count("\n") == 1
    _assert_gone([w.pid for w in workers])
    assert _leftovers(tmp_path) == ([], [])


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _wait_for(condition, within_s: float) -> None:
    end = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"not seen within {within_s:g} s")
        time.sleep(0.1)


def _workers_of(proc: subprocess.Popen, n: int) -> list[psutil.Process]:
    """The `n` worker processes the command `proc` spawned, once they are all there."""
    parent = psutil.Process(proc.pid)
    workers: list[psutil.Process] = []

    def started() -> bool:
        nonlocal workers
        workers = [c for c in parent.children() if "ceiling.measure.distributed" in c.cmdline()]
        return len(workers) >= n

    _wait_for(started, within_s=HANG_S)
    return workers


def _default_interrupt() -> None:
    """In the command's process before exec: Ctrl-C interrupts it. A suite started in the
    background by a shell without job control (`make test &` in a script) ignores SIGINT,
    and a child inherits that; the command would then run on past the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _scale_with_two_workers(settle_s: float = 3.0):
    """A long `ceiling scale` run on 2 spawned workers: (process, its two workers)."""
    cmd = [sys.executable, "-m", "ceiling", "scale", "synthetic", "--workers", "1,2"]
    cmd += ["--work-ms", "400", "--steps", "200", "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_interrupt)  # fmt: skip
    try:
        workers = _workers_of(proc, 2)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    time.sleep(settle_s)  # past start-up, into the measured steps
    return proc, workers


def test_killing_a_worker_mid_run_stops_the_command_and_leaves_no_orphans():
    proc, workers = _scale_with_two_workers()
    try:
        rank1 = next(w for w in workers if w.environ().get("RANK") == "1")
        rank1.send_signal(signal.SIGKILL)
        _out, err = proc.communicate(timeout=HANG_S)  # a hang detector, not a speed check
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2
    assert "error: worker rank 1 of 2 was killed by signal SIGKILL" in err
    assert "Traceback" not in err
    _assert_gone([w.pid for w in workers])


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stopping_the_command_stops_its_workers(sig, code):
    """SIGTERM (a job scheduler, `kill`) or Ctrl-C to the command: it stops its workers,
    removes its files and exits 128 + signal, leaving nothing behind."""
    proc, workers = _scale_with_two_workers(settle_s=2.0)
    tmpdir = Path(workers[0].cmdline()[-1])  # the run's folder, the worker's last argument
    assert tmpdir.name.startswith("ceiling-dist-") and tmpdir.is_dir()
    try:
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=HANG_S)  # a hang detector, not a speed check
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    assert "Traceback" not in err
    _assert_gone([w.pid for w in workers])
    assert not tmpdir.exists()


def test_two_torchrun_agents_as_two_machines(tmp_path):
    """Two torchrun agents on 127.0.0.1, one process each, meeting by c10d rendezvous."""
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed beside this Python")
    port = distributed.free_port()
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    run_id = f"ceiling-test-{uuid.uuid4().hex[:8]}"
    agents = []
    for node in range(2):
        cmd = [str(torchrun), "--nnodes", "2", "--nproc-per-node", "1"]
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"]
        # a run id of its own (no clash with another run of this test on the machine) and a
        # join timeout, so an agent whose partner never comes gives up instead of waiting
        cmd += ["--rdzv-id", run_id]
        cmd += ["--rdzv-conf", f"join_timeout={HANG_S:.0f}", "--max-restarts", "0"]
        cmd += ["-m", "ceiling", "bench", "comm", "--quick", "--ops", "all_reduce", "--json"]
        cmd += ["--timeout", f"{HANG_S:.0f}"]
        out = open(tmp_path / f"agent{node}.out", "w")  # noqa: SIM115
        agents.append((subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env), out))
    try:
        for p, _ in agents:
            p.wait(timeout=HANG_S)
    finally:
        for p, out in agents:
            if p.poll() is None:
                # SIGTERM first: torchrun passes it on to its worker, SIGKILL would orphan it
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            out.close()
    logs = [(tmp_path / f"agent{i}.out").read_text() for i in range(2)]
    assert [p.returncode for p, _ in agents] == [0, 0], logs
    # Exactly one agent's worker is rank 0 and prints the JSON; the other prints nothing.
    docs = []
    for text in logs:
        start = text.find("{\n")
        if start >= 0:
            docs.append(json.loads(text[start : text.rindex("}") + 1]))
    assert len(docs) == 1, logs
    doc = docs[0]
    assert doc["ranks"] == 2
    assert doc["launcher"] == "torchrun"
    assert [r["op"] for r in doc["rows"]] == ["all_reduce"] * 3
    for r in doc["rows"]:
        assert r["busbw_gbps"] == r["algbw_gbps"] * 2 * (2 - 1) / 2


def test_ranks_use_cuda_only_with_a_gpu_each():
    from ceiling.errors import UnsupportedOnDevice

    assert distributed.use_cuda("auto", 2, True, 2) is True
    assert distributed.use_cuda("auto", 8, True, 1) is False  # 8 ranks, 1 GPU: gloo on CPU
    assert distributed.use_cuda("auto", 1, False, 0) is False
    assert distributed.use_cuda("cpu", 1, True, 8) is False
    with pytest.raises(UnsupportedOnDevice, match="8 workers on this machine but 1 GPU"):
        distributed.use_cuda("cuda", 8, True, 1)
    with pytest.raises(UnsupportedOnDevice, match="no CUDA device"):
        distributed.use_cuda("cuda", 1, False, 0)


def test_the_folder_of_a_killed_launcher_is_removed_by_the_next_run():
    """SIGKILL gives the launcher no chance to clean up: its workers die with it
    (PR_SET_PDEATHSIG) and its folder stays, until the next run finds its owner dead."""
    proc, workers = _scale_with_two_workers(settle_s=1.0)
    tmpdir = Path(workers[0].cmdline()[-1])
    live = distributed.remove_stale_run_folders(str(tmpdir.parent))
    assert tmpdir not in live and tmpdir.is_dir()  # its launcher is alive: left alone
    proc.kill()
    proc.communicate(timeout=HANG_S)
    _assert_gone([w.pid for w in workers])
    assert tmpdir.is_dir()
    assert tmpdir in distributed.remove_stale_run_folders(str(tmpdir.parent))
    assert not tmpdir.exists()


class _Exited:
    def __init__(self, code):
        self.code = code

    def poll(self):
        return self.code


def test_a_rank_that_died_after_the_final_barrier_finished_its_work(tmp_path):
    # gloo may abort a rank's teardown once its peers have left: SIGABRT after the barrier
    done = tmp_path / "rank1.done"
    assert distributed._code_of_run(_Exited(-6), done) == -6
    done.write_text("")
    assert distributed._code_of_run(_Exited(-6), done) == 0
    assert distributed._code_of_run(_Exited(None), done) is None
