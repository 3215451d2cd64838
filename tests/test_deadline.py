"""Work that never ends is stopped at its deadline; work too large is refused before it starts."""

import textwrap
import time

import pytest

from ceiling.errors import DoesNotFit, InvalidInput, TimedOut
from ceiling.measure.deadline import deadline

NEVER_RETURNS = textwrap.dedent(
    """
    import time

    def forever():
        while True:
            try:
                time.sleep(3600)
            except Exception:  # a target that swallows errors is still stopped
                pass

    def build():
        forever()

    def step(ctx):
        forever()
    """
)


@pytest.fixture
def never_returns(tmp_path, monkeypatch):
    (tmp_path / "never_returns.py").write_text(NEVER_RETURNS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "never_returns"


def test_the_deadline_stops_the_body_and_names_it():
    expected = r"^the test loop did not finish within 0.5 s"
    with pytest.raises(TimedOut, match=expected), deadline(0.5, "the test loop"):
        while True:  # only the deadline ends it (pytest-timeout would fail a hang)
            time.sleep(0.05)
    with deadline(5, "quick work"):  # work that ends in time is untouched, the timer disarmed
        pass
    time.sleep(0.1)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_a_bad_timeout_is_refused(bad):
    with (
        pytest.raises(InvalidInput, match="timeout_s must be a positive number"),
        deadline(bad, "x"),
    ):
        pass


def test_repeat_stops_a_target_that_never_returns(cli, never_returns):
    code, out, err = cli("repeat", f"{never_returns}:forever", "--timeout", "1")
    assert code == 2 and out == ""
    assert err == (
        f"error: repeat {never_returns}:forever did not finish within 1 s (--timeout) and was "
        "stopped\n"
    )


def test_profile_stops_a_target_that_never_returns(never_returns):
    from ceiling.profile.run import profile_target

    with pytest.raises(TimedOut, match=f"profiling {never_returns}:build did not finish within 1"):
        profile_target(f"{never_returns}:build", timeout_s=1)


def test_a_batch_whose_inputs_do_not_fit_is_refused_before_it_is_made():
    from ceiling.profile.run import check_batch_room

    # mlp: 256 float32 inputs and one int64 label per sample
    with pytest.raises(DoesNotFit) as err:
        check_batch_room("mlp", 100_000_000, None, available_bytes=64 * 2**30)
    msg = str(err.value)
    assert "inputs of batch 100,000,000 × 1,032 B per sample × 2" in msg
    assert "= 192 GiB needed, 64 GiB of memory available" in msg
    check_batch_room("mlp", 1000, None, available_bytes=64 * 2**30)
    # the same batch fits a machine with 480 GiB free
    check_batch_room("mlp", 100_000_000, None, available_bytes=480 * 2**30)


def test_a_model_with_too_many_layers_is_refused_even_on_meta():
    from ceiling.profile.run import profile_target

    with pytest.raises(InvalidInput) as err:  # refused before anything is built
        profile_target("custom:layers=100000,hidden=100000,heads=100", device="meta")
    assert "100,000 layers is more than the 1,024 a profile builds" in str(err.value)


def test_profile_command_takes_a_timeout(cli, never_returns):
    code, out, err = cli("profile", f"{never_returns}:build", "--timeout", "1")
    assert code == 2 and out == ""
    assert err == (
        f"error: profiling {never_returns}:build did not finish within 1 s (--timeout) and was "
        "stopped\n"
    )


def test_scale_threads_that_never_return_are_named_within_one_deadline(cli, never_returns):
    code, _, err = cli(
        "scale", f"{never_returns}:step", "--backend", "threads", "--workers", "3",
        "--timeout", "1",
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: threads did not finish within 1 s at N = 3 (still running: ")
    for rank in range(3):
        assert f"rank {rank} at {never_returns}.py:" in err
