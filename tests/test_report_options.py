"""What `ceiling report` is asked: the user's work or the demos, said as such; bad input
refused in one line before any section runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ceiling.errors import InvalidInput
from ceiling.report.build import choose_sections
from ceiling.report.work import DEMO_DEVICE, DEMO_GPUS, Choice, ReportOptions, subject


def test_without_work_every_choice_is_a_labelled_demo():
    o = ReportOptions()
    assert not o.any_work
    assert o.train_model() == Choice("gpt:tiny", True)
    assert o.cluster_gpus() == Choice(DEMO_GPUS, True)
    resolved, device = o.cluster_device()
    assert resolved.spec.key == DEMO_DEVICE and device.demo
    cfg, model = o.shape_model("llama-3-8b")
    assert cfg.name == "llama-3-8b" and model.demo
    text, demo = subject([(model, "--model", cfg.name), (device, "--spec", "on an H100")])
    assert demo and text == "Demo: llama-3-8b on an H100 (--model, --spec for yours)."


def test_the_users_model_and_cluster_are_used_and_not_called_demos():
    o = ReportOptions(model="llama-2-7b", spec="a100-80gb", gpus=64, seq=2048)
    cfg, model = o.shape_model("llama-3-8b")
    assert cfg.name == "llama-2-7b" and not model.demo
    resolved, device = o.cluster_device()
    assert resolved.spec.key == "a100-80gb" and not device.demo
    assert o.cluster_gpus() == Choice(64, False)
    text, demo = subject([(model, "--model", "llama-2-7b"), (device, "--spec", "on A100s")])
    assert not demo and text == "Yours: llama-2-7b on A100s."


def test_a_callable_model_trains_but_a_demo_is_planned_and_says_why():
    o = ReportOptions(model="mypackage.models:build")
    assert o.is_callable_model
    assert o.train_model() == Choice("mypackage.models:build", False)
    cfg, model = o.shape_model("llama-3-70b")
    assert cfg.name == "llama-3-70b" and model.demo and "no transformer shape" in model.why
    text, _ = subject([(model, "--model", cfg.name), (Choice(8, False), "--gpus", "on 8")])
    assert (
        text == "Yours: llama-3-70b on 8 (demo: a module:callable model has no transformer shape)."
    )
    assert not ReportOptions(model="hf:/some/config.json").is_callable_model


def test_the_trace_section_follows_the_machine_card_and_only_selects():
    keys = [s.key for s in choose_sections(ReportOptions(trace=Path(__file__)))]
    assert keys[:2] == ["machine", "trace"]
    only = choose_sections(ReportOptions(only=("planner", "amdahl")))
    assert [s.key for s in only] == ["amdahl", "planner"]  # reading order, not asking order
    with pytest.raises(InvalidInput, match="unknown section 'trace'"):
        choose_sections(ReportOptions(only=("trace",)))


def test_counts_below_one_are_refused():
    # from Python the argument is named as Python spells it (the command line says the flag)
    with pytest.raises(InvalidInput, match=r"^global_batch must be ≥ 1"):
        ReportOptions(global_batch=0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "0"], "--gpus"),
        (["--spec", "no-such-gpu"], "no-such-gpu"),
        (["--model", "no-such-model"], "no-such-model"),
        (["--seq", "0"], "--seq must be ≥ 1"),
        (["--trace", "/no/such/trace.json"], "does not exist"),
    ],
)
def test_bad_work_is_one_line_and_exit_2(cli, tmp_path, args, message):
    code, stdout, stderr = cli("report", *args, "-o", tmp_path / "r.html")
    assert code == 2 and stdout == ""
    assert stderr.count("\n") == 1 and stderr.startswith("error: ")
    assert message in stderr
    assert not (tmp_path / "r.html").exists()
