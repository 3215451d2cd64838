"""Faults around a run, each ending in one line (or quietly where nothing went wrong): a
worker stopped before its first beat, a closed pipe, a full disk under a figure, a rank
with no master, a pipeline stage without work, numbers of hundreds of digits."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ceiling.measure import distributed, stall
from ceiling.measure.stall import StallWatch

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _feed(watch, seconds, beats_at):
    for t in range(seconds + 1):
        for rank, b in beats_at(float(t)).items():
            watch.update(rank, b, float(t))


def _waiting(t):
    return {"cpu_s": 1.0, "pos": ["job.py", 5, 0], "in_collective": True, "t": t}


def test_a_worker_stopped_before_its_first_beat_is_named_by_the_stall_watch():
    w = StallWatch(2, stall_s=30)
    _feed(w, 29, lambda t: {0: _waiting(t), 1: stall.starting_beat(0.4, t)})
    assert w.hung([0, 1], 29.0) == []
    _feed(w, 31, lambda t: {0: _waiting(t), 1: stall.starting_beat(0.4, t)})
    assert w.hung([0, 1], 31.0) == [1]
    assert "start-up, before its first beat" in w.describe([1], 31.0)


def test_a_worker_still_importing_torch_is_not_hung():
    w = StallWatch(2, stall_s=30)
    _feed(w, 100, lambda t: {0: _waiting(t), 1: stall.starting_beat(0.5 * t, t)})
    assert w.hung([0, 1], 100.0) == []


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")
def test_the_launcher_reads_a_starting_workers_cpu_time():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        first = distributed._cpu_s(proc)
        assert first is not None and first >= 0.0
        os.kill(proc.pid, signal.SIGSTOP)
        assert distributed._cpu_s(proc) >= first
    finally:
        proc.kill()
        proc.wait()
    assert distributed._cpu_s(proc) is None  # gone: nothing to read


def test_a_closed_pipe_is_not_an_error():
    run = subprocess.run(
        f"{sys.executable} -m ceiling specs --json | head -c 10",
        shell=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        executable="/bin/bash",
    )
    assert len(run.stdout) == 10 and run.stderr == ""
    status = subprocess.run(
        f"set -o pipefail; {sys.executable} -m ceiling specs --json | head -c 10 >/dev/null",
        shell=True,
        env={**os.environ, "PYTHONPATH": SRC},
        executable="/bin/bash",
    )
    assert status.returncode == 0


def test_a_rank_with_no_master_says_so_in_one_line():
    from ceiling.errors import InvalidInput
    from ceiling.measure import rendezvous

    class Env:  # rank 1's view of the launch, with nobody listening at the master's port
        rank, master_addr, master_port = 1, "127.0.0.1", _free_port()

    with pytest.raises(InvalidInput, match="nothing listens there") as raised:
        rendezvous._wait_for_master(Env, 1.0)
    assert "\n" not in str(raised.value)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("forward", ["0", "1,0,1,1", "-1"])
def test_a_pipeline_stage_without_forward_work_is_refused(cli, forward):
    code, out, err = cli("simulate", "pipeline", f"--forward={forward}")
    assert code == 2 and out == "" and err.count("\n") == 1, err


def test_huge_numbers_are_printed_readably(cli):
    from ceiling.units import format_number

    assert format_number(1234567.89, 1) == "1,234,567.9"
    assert format_number(3.65e297) == "3.65e+297"
    code, out, _ = cli("plan", "llama-3-8b", "-n", "8", "--spec", "h100-sxm", "--tokens", "1e300")
    assert code == 0 and "e+" in out and not any(c * 40 in out for c in "0123456789")


def test_help_says_module_callable_runs_the_users_code(cli):
    for command in ("profile", "step", "scale", "repeat", "report"):
        code, out, _ = cli(command, "--help")
        assert code == 0 and "with your rights" in " ".join(out.split()), command


def test_a_figure_on_a_full_disk_leaves_no_empty_file(cli, tmp_path, monkeypatch):
    from ceiling import records

    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, fd, *args, **kwargs):
            self.f = real_fdopen(fd, *args, **kwargs)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(records.os, "fdopen", FullDisk)
    fig = tmp_path / "f.png"
    code, out, err = cli("amdahl", "0.9", "--plot", fig)
    assert code == 2 and "No space left" in err and "ceiling" in out
    assert not fig.exists() and list(tmp_path.iterdir()) == []


def test_ctrl_c_during_report_start_up_says_so_in_one_line(cli, monkeypatch, tmp_path):
    from ceiling.cli import app

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(app, "require_torch", interrupted)
    code, out, err = cli("report", "--quick", "-o", tmp_path / "page.html")
    assert code == 130 and out == "" and err == "interrupted\n"


def test_sigterm_ends_a_report_as_ctrl_c_does(cli, monkeypatch, tmp_path):
    import time

    from ceiling.cli import app

    def terminated():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(app, "require_torch", terminated)
    code, _out, err = cli("report", "--quick", "-o", tmp_path / "page.html")
    assert code == 130 and err == "interrupted\n"
    assert signal.getsignal(signal.SIGTERM) == before  # put back afterwards


def test_workers_stopped_by_sigterm_hand_it_to_the_report_above():
    import time

    from ceiling.cli.report import terminated_as_interrupted

    with (
        terminated_as_interrupted(),
        distributed._stop_signals_unwind(),
        pytest.raises(KeyboardInterrupt),
    ):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this
    with distributed._stop_signals_unwind(), pytest.raises(SystemExit) as raised:
        os.kill(os.getpid(), signal.SIGTERM)  # alone: the command unwinds, 128 + 15
        time.sleep(5)
    assert raised.value.code == 143


def test_sigterm_mid_report_keeps_the_complete_page_and_writes_the_partial_beside(
    cli, tmp_path, monkeypatch
):
    import json
    import time

    from ceiling.report import sections
    from ceiling.report.compose import SectionSpec

    amdahl = next(s for s in sections.SECTIONS if s.key == "amdahl")
    state = {"terminate": False}

    def last(ctx, out):
        if state["terminate"]:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler interrupts this
        out.text("finished")

    monkeypatch.setattr(sections, "SECTIONS", [amdahl, SectionSpec("last", "Last", last)])
    page = tmp_path / "r.html"
    assert cli("report", "-o", page)[0] == 0
    complete = page.read_bytes()
    state["terminate"] = True
    code, _out, err = cli("report", "-o", page)
    assert code == 130 and err.endswith("interrupted\n")
    assert page.read_bytes() == complete
    record = json.loads((tmp_path / "r-interrupted.json").read_text())
    assert [s["status"] for s in record["sections"]] == ["ok", "skipped"]
