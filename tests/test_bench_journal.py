"""`bench` writes each measurement to a journal beside the profile as it finishes: a disk that
fills during the run, or at the end, keeps every finished measurement and says where, in one
line with exit code 2. The benchmarks here are stand-ins that append real result records made
from fixed samples (no timing)."""

from __future__ import annotations

import errno
import json
import os

import pytest

from ceiling.measure import suite
from ceiling.measure.matmul import MatmulResult
from ceiling.measure.memory import StreamResult
from ceiling.measure.stats import summarize

SAMPLES = [0.004, 0.005, 0.006]


def fake_matmul(report, *, progress=None, **kwargs):
    for n in (256, 512, 1024):
        if progress:
            progress(f"matmul fp32 {n}")
        result = MatmulResult("fp32", n, n, n, "cpu", SAMPLES, summarize(SAMPLES), 0.0, True)
        report.matmul.append(result)


def fake_memory(report, *, progress=None, **kwargs):
    report.memory = []
    for kernel in ("copy", "triad"):
        if progress:
            progress(f"memory {kernel}")
        report.memory.append(StreamResult(kernel, 10**6, 1.6e7, SAMPLES, summarize(SAMPLES), "cpu"))


def nothing(report, **kwargs):
    pass


@pytest.fixture
def bench_without_timing(monkeypatch, tmp_path):
    monkeypatch.setattr(suite, "bench_matmul", fake_matmul)
    monkeypatch.setattr(suite, "bench_memory", fake_memory)
    monkeypatch.setattr(suite, "bench_overhead", nothing)
    monkeypatch.setattr(suite, "bench_transfer", nothing)
    profile = tmp_path / "profile.json"
    monkeypatch.setenv("CEILING_PROFILE", str(profile))
    return profile


def journals(folder) -> list:
    return sorted(folder.glob("profile.json.*.journal.jsonl"))


def kept_rows(journal) -> list[tuple[str, dict]]:
    lines = journal.read_text().splitlines()
    return [(e["kind"], e["row"]) for e in map(json.loads, lines)]


def test_a_full_run_leaves_the_profile_and_no_journal(cli, bench_without_timing):
    code, out, err = cli("bench", "--quick", "--json")
    assert code == 0, err
    assert json.loads(out)["profile_saved_to"] == [str(bench_without_timing)]
    assert journals(bench_without_timing.parent) == []


def test_a_disk_that_fills_during_the_run_keeps_what_finished(
    cli, bench_without_timing, monkeypatch
):
    import io

    import ceiling.journal

    lines = []

    class FillsUp(io.FileIO):
        """The third line finds the disk full after half of it is written."""

        def write(self, data):
            if len(lines) < 2:
                lines.append(data)
                return super().write(data)
            if len(data) > 1:
                return super().write(bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(
        ceiling.journal, "open", lambda path, mode, buffering: FillsUp(path, mode), raising=False
    )
    code, out, err = cli("bench", "--quick")
    (journal,) = journals(bench_without_timing.parent)
    assert code == 2 and out == ""
    assert err == (
        f"error: cannot write {journal}: No space left on device; the run stopped: "
        f"the 2 finished measurement(s) are kept in {journal}\n"
    )
    kept = kept_rows(journal)
    assert [(kind, row["m"]) for kind, row in kept] == [("matmul", 256), ("matmul", 512)]
    assert not bench_without_timing.exists()


def test_a_disk_full_at_the_end_keeps_every_measurement(cli, bench_without_timing, monkeypatch):
    import ceiling.records

    def full(data, path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(ceiling.records, "replace_whole", full)
    code, out, err = cli("bench", "--quick")
    (journal,) = journals(bench_without_timing.parent)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: the profile was not saved (cannot write {bench_without_timing}")
    assert err.endswith(f"the 5 finished measurement(s) are kept in {journal}\n")
    kept = kept_rows(journal)
    assert [kind for kind, _ in kept] == ["matmul"] * 3 + ["memory"] * 2
    assert [row["kernel"] for _, row in kept[3:]] == ["copy", "triad"]
    assert kept[2][1]["tflops"] == pytest.approx(2 * 1024**3 / 0.004 / 1e12)


def test_a_run_killed_midway_leaves_each_finished_measurement_on_disk(
    bench_without_timing, monkeypatch
):
    from ceiling.journal import Journal

    journal = Journal.beside(bench_without_timing)

    def killed(report, *, progress=None, **kwargs):
        progress("memory copy")
        raise SystemExit(137)  # the kill comes during the memory measurement

    monkeypatch.setattr(suite, "bench_memory", killed)
    with pytest.raises(SystemExit):
        suite.run_all("cpu", True, after_each=lambda r: journal.catch_up(suite.finished_rows(r)))
    assert [(kind, row["m"]) for kind, row in kept_rows(journal.path)] == [
        ("matmul", 256),
        ("matmul", 512),
        ("matmul", 1024),
    ]


def test_no_measurement_finished_says_nothing_is_kept(cli, bench_without_timing, monkeypatch):
    import ceiling.journal

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ceiling.journal.os, "fsync", full)
    code, _, err = cli("bench", "--quick")
    assert code == 2 and err.count("\n") == 1
    assert err.endswith("the run stopped: no measurement had finished; nothing is kept\n")
