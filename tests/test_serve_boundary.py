"""`serve`'s inputs checked where they come in: a rate so low its arrivals would outrun the
simulated clock, and request files whose token counts or arrival times no simulation can
hold, are refused in one line naming the limit before anything is simulated; `ceiling.serve`
takes `machine_profile=` like every other call, and `profile=` still, with a warning."""

from __future__ import annotations

import json
import warnings

import pytest

import ceiling
from ceiling.api.serve_inputs import MAX_CLOCK_S
from ceiling.errors import InvalidInput
from ceiling.hardware.profile import MachineProfile, save_profile
from ceiling.model.serve.workload import MAX_TOKENS
from test_one_answer import TEST_CPU

SERVE = ("serve", "llama-2-7b", "--spec", "h100-sxm")


def test_a_rate_whose_arrivals_outrun_the_clock_is_refused_naming_the_limit(cli):
    code, out, err = cli(*SERVE, "--rate", "1e-300")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err == (
        "error: --rate must be at least 1e-06 requests/s for 1,000 requests, got 1e-300: "
        "their arrivals would span 1e+303 s, past the 1e+09 s (about 32 years) the "
        "simulated clock keeps to the microsecond\n"
    )
    with pytest.raises(InvalidInput, match=r"^rate must be at least 1e-08 requests/s for 10 "):
        ceiling.serve("llama-2-7b", spec="h100-sxm", rate=1e-9, num_requests=10)


def test_the_lowest_rate_allowed_runs():
    n = 10
    result = ceiling.serve("llama-2-7b", spec="h100-sxm", rate=n / MAX_CLOCK_S, num_requests=n)
    assert result.metrics.requests == n


def _requests(tmp_path, *rows: str):
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(row + "\n" for row in rows))
    return path


GOOD = '{"prompt_tokens": 10, "output_tokens": 10}'


@pytest.mark.parametrize(
    ("row", "said"),
    [
        (
            '{"prompt_tokens": 10, "output_tokens": 99999999999999999999999}',
            f"output_tokens must be a whole number from 1 to {MAX_TOKENS:,}, "
            "got 99999999999999999999999",
        ),
        (
            '{"prompt_tokens": 9223372036854775808, "output_tokens": 10}',
            "prompt_tokens must be a whole number from 1 to 1,073,741,824",
        ),
        ('{"prompt_tokens": 10, "output_tokens": 0}', "output_tokens must be a whole number"),
        ('{"prompt_tokens": 10, "output_tokens": 2.5}', "output_tokens must be a whole number"),
        ('{"prompt_tokens": 10, "output_tokens": true}', "output_tokens must be a whole number"),
        (
            '{"prompt_tokens": 10, "output_tokens": 10, "arrival_s": Infinity}',
            "arrival_s must be a time from 0 to 1e+09 s, got inf",
        ),
        (
            '{"prompt_tokens": 10, "output_tokens": 10, "arrival_s": NaN}',
            "arrival_s must be a time from 0 to 1e+09 s, got nan",
        ),
        (
            '{"prompt_tokens": 10, "output_tokens": 10, "arrival_s": 1e300}',
            "arrival_s must be a time from 0 to 1e+09 s, got 1e+300",
        ),
        (
            '{"prompt_tokens": 10, "output_tokens": 10, "arrival_s": -1}',
            "arrival_s must be a time from 0 to 1e+09 s, got -1",
        ),
    ],
)
def test_a_request_no_simulation_can_hold_is_refused_in_one_line(cli, tmp_path, row, said):
    path = _requests(tmp_path, GOOD, row)
    code, out, err = cli(*SERVE, "--requests", path)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: requests file line 2: {said}")


def test_length_lists_from_python_are_checked_alike():
    with pytest.raises(InvalidInput, match=r"^requests: an output length must be a whole number"):
        ceiling.serve("llama-2-7b", spec="h100-sxm", requests=([10], [10**30]))
    result = ceiling.serve("llama-2-7b", spec="h100-sxm", requests=([10, 20], [5, 6]))
    assert result.metrics.requests == 2


@pytest.fixture
def saved_cpu(tmp_path):
    profile = MachineProfile(1, "2026-01-01T00:00:00+00:00", "testhost", {}, [TEST_CPU])
    return save_profile(profile, tmp_path / "saved.json")


def test_serve_takes_machine_profile_like_every_other_call(saved_cpu):
    run = {
        "model": "gpt2",
        "num_requests": 20,
        "weights": "fp32",
        "input_tokens": 100,
        "output_tokens": 50,
    }
    new = ceiling.serve(**run, machine_profile=saved_cpu)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        old = ceiling.serve(**run, profile=saved_cpu)
    assert [w.category for w in warned] == [DeprecationWarning]
    assert "machine_profile=" in str(warned[0].message)
    assert warned[0].filename == __file__  # the caller's line, not ceiling's
    assert json.dumps(new.to_dict()) == json.dumps(old.to_dict())
    assert "Test CPU" in json.dumps(new.to_dict())
    with pytest.raises(InvalidInput, match=r"^profile is the old name of machine_profile"):
        ceiling.serve(**run, machine_profile=saved_cpu, profile=saved_cpu)
