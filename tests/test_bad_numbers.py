"""Numbers no option can mean are refused in one line that states the range (exit 2)."""

import pytest


@pytest.mark.parametrize(
    "argv,words",
    [
        (["simulate", "straggler", "--seed=-1"], ["--seed", "greater than or equal to 0"]),
        (["simulate", "straggler", "--slow", "nan"], ["--slow", "finite"]),
        (["simulate", "straggler", "--jitter", "inf"], ["--jitter", "finite"]),
        (["simulate", "straggler", "--seed", "99999999999999999999"], ["--seed", "at most"]),
        (["scale", "synthetic", "--serial", "-inf"], ["--serial", "finite"]),
        (
            ["plan", "llama-3-8b", "--spec", "h100-sxm", "--gpus", "1e308"],
            ["--gpus must be between 1 and 1,048,576", "got '1e308'"],
        ),
        (
            ["plan", "llama-3-8b", "--spec", "h100-sxm", "--gpus", "8", "--global-batch", "1e308"],
            ["--global-batch must be between 1 and 16,777,216"],
        ),
        (["plan", "llama-3-8b", "--spec", "h100-sxm", "--gpus", "0"], ["between 1 and"]),
        (["plan", "llama-3-8b", "--spec", "h100-sxm", "--gpus", "8", "--headroom", "nan"], []),
        (["repeat", "matmul", "--timeout", "nan"], ["--timeout", "finite"]),
        (["bench", "comm", "--quick", "--min-bytes", "nan"], ["byte size"]),
        (["bench", "comm", "--quick", "--max-bytes", "-1"], ["cannot be negative"]),
        (
            ["plan", "llama-3-8b", "--spec", "h100-sxm", "--gpus", "8", "--scaling", "9"],
            ["--scaling must be between 0 and 8 doublings, got 9"],
        ),
        (
            ["bench", "comm", "--device", "cpu", "--quick", "--stall-timeout", "0"],
            ["--stall-timeout must be a positive number, got 0"],
        ),
    ],
)
def test_a_number_out_of_its_range_is_one_line(cli, argv, words):
    code, out, err = cli(*argv)
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    for w in words:
        assert w in err, err


def test_a_timer_short_enough_to_fire_at_once_still_stops_cleanly(cli):
    code, _, err = cli("repeat", "matmul", "--runs", "2", "--timeout", "1e-300")
    assert code == 2 and "did not finish within 1e-300 s" in err
    assert len(err.strip().splitlines()) == 1


def test_the_number_check_reaches_every_option_of_every_command():
    import typer.main

    from ceiling.cli.app import app
    from ceiling.cli.params import check_numbers_everywhere

    root = check_numbers_everywhere(typer.main.get_command(app))
    unchecked = []

    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])
        for param in getattr(command, "params", []):
            if not getattr(param, "_ceiling_checked", False):
                unchecked.append(f"{' '.join(path)} {param.name}")

    walk(root, [])
    assert unchecked == []


@pytest.mark.parametrize("argv", [["--sizes", "1e308"], ["--shape", "9" * 400 + "x2x2"]])
def test_bench_matmul_refuses_a_size_beyond_any_device_before_measuring(cli, argv):
    code, _, err = cli("bench", "matmul", *argv)
    assert code == 2 and "at most 1,048,576" in err
    assert len(err.strip().splitlines()) == 1
