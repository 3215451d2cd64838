"""Run a function on every rank of a torch.distributed job: spawned here, or under torchrun.

A job is "module:function" plus keyword arguments; every rank calls
`function(ctx, **kwargs)` with a `WorkerContext` once the process group is up (gloo on CPU,
NCCL on CUDA with a gloo group beside it for coordination), and rank 0's return value
(JSON-able) is the job's result.

Locally, `launch_local` starts one Python process per rank (RANK, WORLD_SIZE, LOCAL_RANK;
the ranks meet through a store file, see `ceiling.measure.rendezvous`) and watches them:
a rank that exits non-zero or is killed stops the whole job at once, and so does a rank
that makes no progress for `stall_s` (see `ceiling.measure.stall`) and the overall
deadline; every worker is killed before the error is raised, and each worker dies with its
parent (PR_SET_PDEATHSIG on Linux), so nothing is left behind. A run's folder
(`ceiling-dist-*`) records its launcher's pid, and folders whose launcher was killed
before it could remove them are removed by the next run. Across machines the same job runs
under `torchrun`, which sets MASTER_ADDR/PORT and the rest: `run_under_launcher` picks them up.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ceiling.errors import CeilingError, InvalidInput, WorkerFailed
from ceiling.measure import rendezvous, stall

# Seconds between checks of the workers' state by the launching process.
POLL_S = 0.05
# How long a rank that failed on a broken link waits for the rank that broke it to exit.
PEER_GRACE_S = 3.0
# How long a worker gets to exit after SIGTERM before SIGKILL.
TERMINATE_GRACE_S = 2.0
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
RUN_PREFIX = "ceiling-dist-"
OWNER_FILE = "launcher.pid"
# A worker exits with this code after printing a CeilingError (a user mistake) on one line.
USER_ERROR_EXIT = 3


@dataclass(frozen=True)
class Job:
    """What every rank runs: `target` is "module:function", called as function(ctx, **kwargs)."""

    target: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    device: str = "auto"  # "auto" | "cpu" | "cuda"
    threads_per_worker: int | None = None  # torch intra-op threads in each worker
    timeout_s: float = 300.0
    stall_s: float = stall.STALL_S  # stop the job when no rank progresses this long


@dataclass
class WorkerContext:
    """A rank's view of the job, handed to the job's function."""

    rank: int
    world_size: int
    local_rank: int
    device: str  # "cpu" or "cuda:<i>"
    backend: str  # "gloo" or "nccl"
    cpu_group: Any = None  # a gloo group over all ranks, for coordination and objects
    progress_path: str | None = None
    launcher: str = "local"  # "local" or "torchrun"

    def sync(self) -> None:
        """Wait for queued device work (a no-op on CPU)."""
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)

    def barrier(self, group: Any = None) -> None:
        import torch.distributed as dist

        dist.barrier(group=group if group is not None else self.cpu_group)

    def gather_objects(self, obj: Any, group: Any = None) -> list[Any]:
        """Every rank's `obj`, in rank order (on every rank)."""
        import torch.distributed as dist

        g = group if group is not None else self.cpu_group
        out: list[Any] = [None] * dist.get_world_size(g)
        dist.all_gather_object(out, obj, group=g)
        return out

    def progress(self, message: str) -> None:
        """A line for the launching process to show (rank 0 only; others are ignored)."""
        if self.rank != 0 or not self.progress_path:
            return
        with open(self.progress_path, "a", encoding="utf-8") as f:
            f.write(message.replace("\n", " ") + "\n")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody is listening on right now (bind to port 0 and let the OS choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def under_launcher() -> bool:
    """True inside a process started by torchrun (or anything setting the env:// variables)."""
    return all(v in os.environ for v in LAUNCHER_VARS)


def resolve_target(target: str) -> Callable[..., Any]:
    """The function MODULE:FUNCTION (or FILE.py:FUNCTION) names."""
    from ceiling.usercode import load_callable

    return load_callable(target)


def use_cuda(requested: str, local_world: int, cuda_available: bool, cuda_count: int) -> bool:
    """Whether this node's ranks run on CUDA (NCCL) or on the CPU (gloo).

    NCCL needs a GPU of its own per rank: with more ranks on a machine than GPUs, "auto"
    runs them on the CPU with gloo (every rank decides alike, so they agree), and an
    explicit "cuda" is refused with the numbers."""
    from ceiling.errors import UnsupportedOnDevice

    if requested == "cpu":
        return False
    if requested == "cuda" and not cuda_available:
        raise UnsupportedOnDevice("--device cuda asked for, but torch sees no CUDA device")
    if not cuda_available:
        return False
    if local_world > cuda_count:
        if requested == "cuda":
            raise UnsupportedOnDevice(
                f"{local_world} workers on this machine but {cuda_count} GPU(s): NCCL needs one "
                f"GPU per worker; use at most {cuda_count} workers per machine or --device cpu"
            )
        return False
    return True


def _run_job(
    job: Job, launcher: str, progress_path: str | None, done_path: Path | None = None
) -> tuple[int, Any]:
    """Inside one rank: set up the process group, run the function, tear down. `done_path`
    is written once every rank has passed the final barrier: the work is complete, and a
    crash in the teardown that follows is not a failure of the run."""
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if job.threads_per_worker:
        torch.set_num_threads(job.threads_per_worker)
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    cuda = use_cuda(job.device, local_world, available, count)
    if cuda:
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        device, backend = f"cuda:{index}", "nccl"
    else:
        device, backend = "cpu", "gloo"
    rendezvous.init_group(backend, job.timeout_s)
    try:
        cpu_group = dist.group.WORLD if backend == "gloo" else dist.new_group(backend="gloo")
        ctx = WorkerContext(
            rank=rank,
            world_size=world,
            local_rank=local_rank,
            device=device,
            backend=backend,
            cpu_group=cpu_group,
            progress_path=progress_path,
            launcher=launcher,
        )
        result = resolve_target(job.target)(ctx, **job.kwargs)
        dist.barrier(group=cpu_group)
        if done_path is not None:
            done_path.write_text("")
    finally:
        dist.destroy_process_group()
    return rank, result


def run_under_launcher(job: Job) -> tuple[int, Any]:
    """Run `job` as this process's rank under torchrun; returns (rank, result)."""
    if not under_launcher():
        raise InvalidInput("not started by torchrun: RANK, WORLD_SIZE, MASTER_ADDR/PORT unset")
    rendezvous.launcher_env()  # a bad value is one line before torch starts
    return _run_job(job, "torchrun", None)


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the launching process dies."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the launcher's cleanup still applies
        pass


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Failed|Exit)\b")


def _last_error_line(path: Path, exception_only: bool = False) -> str:
    """The exception line of the last traceback in a rank's log, else (unless
    `exception_only`) the last line that is not a warning."""
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
    # torch prefixes a rank's log lines with "[rankN]: "; the message names the rank
    lines = [
        ln.split("]:", 1)[1].strip() if ln.startswith("[rank") and "]:" in ln else ln
        for ln in lines
    ]
    for ln in reversed(lines):
        if _EXCEPTION_LINE.match(ln) and "Warning" not in ln.split(":", 1)[0]:
            return ln[:300]
    if exception_only:
        return ""
    for ln in reversed(lines):
        if ln and not ln.startswith(("warnings.warn", "return func")) and "Warning" not in ln:
            return ln[:300]
    return ""


def _is_peer_error(line: str) -> bool:
    low = line.lower()
    return any(k in low for k in ("connection", "peer", "broken pipe", "gloo", "timed out"))


def stop_processes(procs: list[subprocess.Popen]) -> None:
    """SIGTERM, a short grace, then SIGKILL; waits for each so none is left behind."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.terminate()
    end = time.monotonic() + TERMINATE_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(end - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            p.wait()


@contextlib.contextmanager
def _stop_signals_unwind():
    """While workers run, SIGTERM and SIGHUP to this process unwind it (exit 128 + signal)
    so the workers are stopped and the temporary files removed, as Ctrl-C does; without it
    the workers would die only by PR_SET_PDEATHSIG and the files stay behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum, frame):
        above = previous.get(signum)
        if callable(above):  # a caller that handles it (the report keeps its page)
            above(signum, frame)
        raise SystemExit(128 + signum)

    previous = {}
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            previous[sig] = signal.signal(sig, unwind)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def launch_local(
    job: Job,
    world_size: int,
    *,
    on_progress: Callable[[str], None] | None = None,
    on_start: Callable[[list[int]], None] | None = None,
) -> Any:
    """Spawn `world_size` ranks on this machine, run `job`, return rank 0's result.

    Raises WorkerFailed naming the rank when a worker dies, fails or stops making
    progress, or when the job runs past `job.timeout_s`; all workers are stopped and the
    run's folder removed before it returns or raises.
    """
    if world_size < 1:
        raise InvalidInput(f"need at least 1 worker, got {world_size}")
    remove_stale_run_folders()
    with _stop_signals_unwind(), tempfile.TemporaryDirectory(prefix=RUN_PREFIX) as tmp:
        tmpdir = Path(tmp)
        _write_owner(tmpdir)
        job_path = tmpdir / "job.json"
        job_path.write_text(json.dumps(asdict(job)))
        (tmpdir / "progress.txt").write_text("")
        _spawn_and_watch(job, world_size, tmpdir, job_path, on_progress, on_start)
        result_path = tmpdir / "result.json"
        if not result_path.exists():
            raise WorkerFailed("rank 0 finished without writing a result")
        return json.loads(result_path.read_text())


def _process_start(pid: int) -> float | None:
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # no such process, or no access to it
        return None


def _write_owner(tmpdir: Path) -> None:
    pid = os.getpid()
    (tmpdir / OWNER_FILE).write_text(json.dumps({"pid": pid, "started": _process_start(pid)}))


def _owner_alive(folder: Path) -> bool:
    """True unless the folder's launcher is known to be gone: a folder without a readable
    owner file (being set up, or not ours) is left alone."""
    try:
        owner = json.loads((folder / OWNER_FILE).read_text())
        pid, started = int(owner["pid"]), owner.get("started")
    except (OSError, ValueError, KeyError, TypeError):
        return True
    now_started = _process_start(pid)
    if now_started is None:
        return False
    # the same pid, reused by a later process, is not the owner
    return started is None or abs(now_started - float(started)) < 1.0


def remove_stale_run_folders(root: str | None = None) -> list[Path]:
    """Remove this user's `ceiling-dist-*` folders whose launcher is dead (killed before it
    could clean up); returns the folders removed."""
    removed = []
    base = Path(root or tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for folder in base.glob(f"{RUN_PREFIX}*"):
            try:
                if folder.is_symlink() or not folder.is_dir():
                    continue
                if folder.stat().st_uid != os.getuid() or _owner_alive(folder):
                    continue
            except OSError:
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _worker_env(job: Job, rank: int, world_size: int, tmpdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    launcher_only = ("TORCHELASTIC_RUN_ID", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR")
    for var in (*launcher_only, "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE"):
        env.pop(var, None)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        PYTHONWARNINGS="ignore",
        **rendezvous.local_env(str(tmpdir / "store")),
    )
    if job.threads_per_worker:
        env["OMP_NUM_THREADS"] = str(job.threads_per_worker)
    return env


def _spawn_and_watch(job, world_size, tmpdir, job_path, on_progress, on_start) -> None:
    procs: list[subprocess.Popen] = []
    logs = []
    try:
        for rank in range(world_size):
            log = open(tmpdir / f"rank{rank}.log", "wb")  # noqa: SIM115 (closed below)
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "ceiling.measure.distributed",
                        str(job_path),
                        str(tmpdir),
                    ],
                    env=_worker_env(job, rank, world_size, tmpdir),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=_die_with_parent,
                    start_new_session=True,
                )
            )
        if on_start is not None:
            on_start([p.pid for p in procs])
        _watch(procs, job, tmpdir, tmpdir / "progress.txt", on_progress)
    finally:
        stop_processes(procs)
        for log in logs:
            log.close()


def _watch(
    procs: list[subprocess.Popen],
    job: Job,
    tmpdir: Path,
    progress_path: Path,
    on_progress: Callable[[str], None] | None,
) -> None:
    start = time.monotonic()
    seen = 0
    world = len(procs)
    first_failure = 0.0
    watch = stall.StallWatch(world, job.stall_s)
    next_beat_check = start

    def drain() -> None:
        nonlocal seen
        if on_progress is not None:
            with open(progress_path, encoding="utf-8") as f:
                lines = f.read().splitlines()
            for line in lines[seen:]:
                on_progress(line)
            seen = len(lines)

    while True:
        codes = [_code_of_run(p, tmpdir / f"rank{r}.done") for r, p in enumerate(procs)]
        drain()
        failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            # A rank killed by a signal, or failing on its own, is the cause; the others then
            # fail on broken links to it, sometimes before the cause has finished exiting, so
            # a broken link alone waits a moment for the rank that broke it.
            # A rank killed by a signal may have raised first (a Python exception, then an
            # abort while torch's threads are torn down): its exception is the detail.
            details = {
                r: _last_error_line(tmpdir / f"rank{r}.log", exception_only=c < 0)
                for r, c in failed
            }
            only_links = all(c >= 0 and _is_peer_error(details[r]) for r, c in failed)
            if only_links and None in codes:
                first_failure = first_failure or time.monotonic()
                if time.monotonic() - first_failure < PEER_GRACE_S:
                    time.sleep(POLL_S)
                    continue
            _stop_on_failure(procs, failed, details, start, drain)
        if all(c == 0 for c in codes):
            return
        now = time.monotonic()
        if now >= next_beat_check:
            next_beat_check = now + stall.BEAT_S
            _stop_if_hung(procs, codes, watch, tmpdir, now, drain)
        elapsed = now - start
        if elapsed > job.timeout_s:
            running = [str(r) for r, c in enumerate(codes) if c is None]
            stop_processes(procs)
            raise WorkerFailed(
                f"the run did not finish within {job.timeout_s:g} s (rank "
                f"{', '.join(running)} of {world} still running, now stopped); a worker hangs "
                "or the work is too large for the timeout"
            )
        time.sleep(POLL_S)


def _stop_on_failure(procs, failed: list, details: dict, start: float, drain) -> None:
    """Stop every rank and raise the failure of the rank that caused it: one killed by a
    signal or failing on its own before one that only lost its link to another."""
    world = len(procs)
    failed.sort(key=lambda rc: (rc[1] >= 0, _is_peer_error(details[rc[0]]), rc[0]))
    rank, code = failed[0]
    elapsed = time.monotonic() - start
    detail = details[rank]
    stop_processes(procs)
    drain()  # what the ranks reported before they stopped
    if code == USER_ERROR_EXIT and detail:  # the worker's own one-line CeilingError
        raise WorkerFailed(f"worker rank {rank} of {world}: {detail.split(': ', 1)[-1]}")
    msg = f"worker rank {rank} of {world} {_describe_exit(code)} after {elapsed:.1f} s"
    if detail:
        msg += f": {detail}"
    raise WorkerFailed(msg + "; the other workers were stopped")


def _stop_if_hung(procs, codes: list, watch, tmpdir: Path, now: float, drain) -> None:
    """Stop every rank and raise when a running rank's heartbeat (or, before its first beat,
    its CPU time) has stood still too long."""
    world = len(procs)
    beats = stall.read_beats(tmpdir, world)
    for rank, proc in enumerate(procs):
        cpu_s = _cpu_s(proc) if rank not in beats else None
        if cpu_s is not None:
            beats[rank] = stall.starting_beat(cpu_s, now)
    for rank, beat in beats.items():
        watch.update(rank, beat, now)
    culprits = watch.hung([r for r, c in enumerate(codes) if c is None], now)
    if culprits:
        stop_processes(procs)
        drain()
        raise WorkerFailed(f"{watch.describe(culprits, now)}; all ranks were stopped")


def _code_of_run(proc: subprocess.Popen, done: Path) -> int | None:
    """The rank's exit code as the run's outcome: a rank that passed the final barrier and
    then died in the teardown (gloo aborting as its peers leave) finished its work."""
    code = proc.poll()
    if code not in (None, 0) and done.exists():
        return 0
    return code


def _cpu_s(proc: subprocess.Popen) -> float | None:
    """The CPU time a worker process has used so far, or None when it cannot be read."""
    import psutil

    try:
        times = psutil.Process(proc.pid).cpu_times()
    except (psutil.Error, OSError):
        return None
    return times.user + times.system


def _exit_now(code: int) -> None:
    """Exit with `code` at once: after a failure, the normal interpreter shutdown can abort
    (SIGABRT) while torch's communication threads are destroyed, which would hide the code."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _worker_main(job_path: str, tmpdir: str) -> None:
    stall.start_beating(Path(tmpdir) / f"rank{os.environ.get('RANK', '0')}.beat")
    job = Job(**json.loads(Path(job_path).read_text()))
    done = Path(tmpdir) / f"rank{os.environ.get('RANK', '0')}.done"
    try:
        rank, result = _run_job(job, "local", str(Path(tmpdir) / "progress.txt"), done)
    except CeilingError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        _exit_now(USER_ERROR_EXIT)
    except BaseException:
        traceback.print_exc()
        _exit_now(1)
    if rank == 0:
        out = Path(tmpdir) / "result.json"
        part = out.with_suffix(".part")
        part.write_text(json.dumps(result))
        os.replace(part, out)
    # gloo's threads can abort the interpreter's shutdown (SIGABRT) when a peer has already
    # gone: the work is done, so leave without it.
    _exit_now(0)


if __name__ == "__main__":
    _worker_main(sys.argv[1], sys.argv[2])
