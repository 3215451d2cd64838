"""A refused value names the Python argument when the API is called and the flag when the
command line ran the same check: one check, told in each caller's words."""

import pytest

import ceiling
from ceiling.api.arguments import BadArgument
from ceiling.errors import InvalidInput

PLAN = ("llama-2-7b", "--spec", "h100-sxm")


def test_plan_names_gpus_from_python_and_the_flag_from_the_command_line(cli):
    with pytest.raises(BadArgument) as raised:
        ceiling.plan("llama-2-7b", 0, spec="h100-sxm")
    message = str(raised.value)
    assert message.startswith("gpus must be between 1 and 1,048,576") and "--" not in message
    assert isinstance(raised.value, InvalidInput)  # still the user's mistake: exit 2
    code, out, err = cli("plan", *PLAN, "--gpus", "0")
    assert code == 2 and out == ""
    assert err.startswith("error: --gpus must be between 1 and 1,048,576")
    assert err.count("\n") == 1


def test_plan_names_a_two_word_argument_as_its_flag(cli):
    with pytest.raises(BadArgument, match=r"^global_batch must be between 1 and 16,777,216"):
        ceiling.plan("llama-2-7b", 8, spec="h100-sxm", global_batch=2**30)
    code, _, err = cli("plan", *PLAN, "--gpus", "8", "--global-batch", str(2**30))
    assert code == 2 and "error: --global-batch must be between 1 and 16,777,216" in err


def test_fit_names_time_unit_from_python_and_the_flag_from_the_command_line(cli, tmp_path):
    with pytest.raises(BadArgument, match=r"^time_unit must be one of ns, .*got 'parsec'$"):
        ceiling.fit([1, 2, 4], [10.0, 6.0, 4.0], time_unit="parsec")
    runs = tmp_path / "runs.csv"
    runs.write_text("n,time_s\n1,10\n2,6\n4,4\n")
    code, out, err = cli("fit", runs, "--time-unit", "parsec")
    assert code == 2 and out == ""
    assert err.startswith("error: --time-unit must be one of ns,") and "time_unit" not in err


def test_an_argument_the_command_has_no_flag_for_keeps_its_python_name():
    import typer

    from ceiling.cli.app import app
    from ceiling.cli.argument_names import flag_for, said_on_the_command_line

    command = typer.main.get_command(app)
    assert flag_for(command, ["bench", "matmul", "--shape", "9x9x9"], "shapes") == "--shape"
    assert flag_for(command, ["plan", "gpt2", "-n", "8"], "gpus") == "--gpus"
    refused = BadArgument("no_such_option", "must be 1, got 2")
    assert said_on_the_command_line(refused, command, ["plan"]) == str(refused)


def test_a_shared_dtype_check_names_the_argument_or_the_flag(cli):
    from ceiling.errors import CeilingError

    with pytest.raises(CeilingError, match=r"^dtype 'fp128' cannot be used"):
        ceiling.plan("llama-2-7b", 8, spec="h100-sxm", dtype="fp128")
    code, _, err = cli("plan", *PLAN, "--gpus", "8", "--dtype", "fp128")
    assert code == 2 and err.startswith("error: --dtype 'fp128' cannot be used")
    with pytest.raises(BadArgument, match=r"^dtype bf16: NVIDIA V100 .* has no such peak"):
        ceiling.plan("llama-2-7b", 8, spec="v100-sxm2", dtype="bf16")
    code, _, err = cli("plan", "llama-2-7b", "--spec", "v100-sxm2", "-n", "8", "--dtype", "bf16")
    assert code == 2 and err.startswith("error: --dtype bf16: NVIDIA V100")


def test_the_machine_profile_is_machine_profile_in_python_and_profile_on_the_command_line(cli):
    from ceiling.errors import CeilingError

    both = {"spec": "h100-sxm", "machine_profile": "p.json"}
    for call in (
        lambda: ceiling.plan("llama-2-7b", 8, **both),
        lambda: ceiling.decode("gpt2", **both),
    ):
        with pytest.raises(CeilingError) as raised:
            call()
        said = str(raised.value)
        assert said.startswith("give spec or machine_profile, not both") and "--" not in said
    code, out, err = cli("plan", *PLAN, "--gpus", "8", "--profile", "p.json")
    assert code == 2 and out == ""
    assert err.startswith("error: give --spec or --profile, not both")
