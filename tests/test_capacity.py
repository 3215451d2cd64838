"""Work refused up front with the arithmetic, on made-up machines (never this one's facts)."""

import pytest

from ceiling.errors import DoesNotFit, InvalidInput
from ceiling.hardware.capacity import (
    MAX_WORKERS_PER_CORE,
    WORKER_BYTES,
    Room,
    check_bytes,
    check_workers,
)
from ceiling.measure import comm

GiB = 2**30
TWO_CORES = Room(available_bytes=16 * GiB, cores=2)
BIG = Room(available_bytes=2048 * GiB, cores=192)


def test_workers_are_capped_at_a_stated_multiple_of_the_cores():
    check_workers(2 * MAX_WORKERS_PER_CORE, TWO_CORES)
    with pytest.raises(InvalidInput) as err:
        check_workers(1000, TWO_CORES)
    assert str(err.value).startswith(
        f"1000 worker processes on 2 core(s) is more than {MAX_WORKERS_PER_CORE} per core "
        f"({2 * MAX_WORKERS_PER_CORE})"
    )
    check_workers(1000, BIG)  # the same count is fine where there are cores for it


def test_workers_that_do_not_fit_in_memory_are_refused():
    tight = Room(available_bytes=3 * WORKER_BYTES, cores=64)
    check_workers(3, tight)
    with pytest.raises(DoesNotFit, match=r"4 workers × 200 MiB each = 800 MiB needed, 600 MiB"):
        check_workers(4, tight)


def test_bytes_are_checked_with_the_arithmetic():
    check_bytes(GiB, "1 × 1 GiB", TWO_CORES)
    with pytest.raises(DoesNotFit) as err:
        check_bytes(32 * GiB, "2 × 16 GiB", TWO_CORES, "use less")
    assert str(err.value) == "2 × 16 GiB = 32 GiB needed, 16 GiB of memory available; use less"


def test_bench_comm_refuses_a_terabyte_message_before_any_worker_starts():
    with pytest.raises(DoesNotFit) as err:
        comm.check_room(2, 2**40, "cpu", room=TWO_CORES)
    msg = str(err.value)
    assert "2 workers × (200 MiB + 4 × 1 TiB largest message) = 8 TiB needed" in msg
    assert "16 GiB of memory available" in msg
    comm.check_room(2, 16 * 2**20, "cpu", room=TWO_CORES)
    # on GPUs the buffers are device memory: only the worker count is checked here
    comm.check_room(2, 2**40, "cuda", room=TWO_CORES)
    with pytest.raises(InvalidInput, match="more than 8 per core"):
        comm.check_room(17, 4096, "cpu", room=TWO_CORES)


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "comm", "--workers", "2", "--max-bytes", "1PiB", "--device", "cpu"],
        ["scale", "synthetic", "--workers", "100000", "--device", "cpu"],
        ["decode", "gpt:tiny", "--measure", "--batch", "100000", "--device", "cpu"],
    ],
)
def test_the_commands_refuse_in_one_line(cli, args):
    code, out, err = cli(*args)
    assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1, err


def test_decode_refuses_a_step_too_large_to_time_before_building_anything():
    from ceiling.errors import DoesNotFit
    from ceiling.measure.decode import _check_room
    from ceiling.model.transformer import get_model

    tiny = get_model("gpt:tiny")
    with pytest.raises(DoesNotFit) as err:
        _check_room(tiny, [1, 100_000], 0, "cpu", 4, free_bytes=480 * GiB)
    msg = str(err.value)
    assert f"at batch 100,000 is 2 × {tiny.params_total:,} parameters × 100,000" in msg
    assert "measure batches up to" in msg
    _check_room(tiny, [1, 64], 0, "cpu", 4, free_bytes=16 * GiB)
    # memory: weights + KV cache + one step's activations and logits, against half the free
    with pytest.raises(DoesNotFit, match=r"at batch 8,000: weights .* GB \+ KV cache"):
        _check_room(tiny, [8000], 200, "cpu", 4, free_bytes=2 * GiB)
