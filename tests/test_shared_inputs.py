"""The inputs several capabilities share are declared once (`ceiling.inputs`): every command
that takes one says it in the same words, every API function that takes one documents it in
those words, and an error about one names the keyword in Python and the flag on the command
line."""

from __future__ import annotations

import inspect

import pytest
import typer

import ceiling
from ceiling.cli.app import app
from ceiling.inputs import BY_NAME, MACHINE_PROFILE, SHARED, flag_of

# a command whose flag of a shared input means something narrower, and says so
NARROWER = {
    ("bench comm", "--spec"): "the device whose links bound the measured bus bandwidth",
    ("profile", "--seq"): "the sequence of a GPT target, not of a model to plan",
    ("scale", "--model"): "the ddp workload's built-in GPT preset, not a transformer to plan",
    ("scale", "--seq"): "the ddp workload's sequence",
}


def _commands(command, path=""):
    subs = getattr(command, "commands", None)
    if subs:
        for name, sub in subs.items():
            yield from _commands(sub, f"{path} {name}".strip())
    if getattr(command, "params", None):
        yield path, command


def _uses():
    root = typer.main.get_command(app)
    for path, command in _commands(root):
        for param in command.params:
            for shared in SHARED:
                if shared.flag in getattr(param, "opts", []):
                    yield path, shared, param


USES = list(_uses())


def test_shared_inputs_are_used_by_many_commands():
    by_flag = {}
    for path, shared, _ in USES:
        by_flag.setdefault(shared.flag, set()).add(path)
    assert {"plan", "report", "decode", "serve"} <= by_flag["--spec"]
    assert {"plan", "report", "serve"} <= by_flag["--gpus"]
    assert {"decode", "serve"} <= by_flag["--tp"] and {"decode", "serve"} <= by_flag["--weights"]


@pytest.mark.parametrize(
    ("path", "shared", "param"), USES, ids=[f"{p} {s.flag}" for p, s, _ in USES]
)
def test_every_command_says_a_shared_input_in_its_words(path, shared, param):
    if (path, shared.flag) in NARROWER:
        return
    assert (param.help or "").startswith(shared.help), (path, param.help)
    if shared.short:
        assert shared.short in param.opts


@pytest.mark.parametrize("name", sorted(ceiling.__all__))
def test_every_api_function_documents_its_shared_inputs(name):
    fn = getattr(ceiling, name)
    if not inspect.isfunction(fn):
        return
    shared = [BY_NAME[p] for p in inspect.signature(fn).parameters if p in BY_NAME]
    doc = " ".join((fn.__doc__ or "").split())
    for s in shared:
        assert " ".join(f"{s.name}: {s.help}".split()) in doc, (name, s.name)


def test_the_machine_profile_is_a_keyword_in_python_and_profile_on_the_command_line(cli):
    assert flag_of("machine_profile") == "profile" and flag_of("gpus") is None
    assert MACHINE_PROFILE.flag == "--profile"
    with pytest.raises(ceiling.errors.InvalidInput, match="machine_profile"):
        ceiling.plan("llama-3-8b", gpus=8, spec="h100-sxm", machine_profile="x.json")
    code, _, err = cli("plan", "llama-3-8b", "-n", "8", "--spec", "h100-sxm", "--profile", "x")
    assert code == 2 and "--profile" in err and "machine_profile" not in err
