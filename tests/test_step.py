import pytest

from ceiling.errors import InvalidInput
from ceiling.profile.step import COMPUTE, DATA_LOADER, HOST, breakdown, verdict


def test_breakdown_splits_the_step_and_gives_the_amdahl_ceiling():
    r = breakdown(0, step_s=0.100, data_s=0.060, compute_s=0.030, sync_s=0.001,
                  loader_batches_per_s=10.0)  # fmt: skip
    assert r.data_s == 0.060 and r.compute_s == 0.030
    assert r.host_s == pytest.approx(0.010)
    assert r.serial_fraction == pytest.approx(0.7)
    assert r.amdahl_ceiling == pytest.approx(1 / 0.7)
    assert r.model_batches_per_s == pytest.approx(25.0)  # 1 / (step - data)
    assert r.loader_limits  # 10 batches/s from the loader < 25 consumed
    assert r.bottleneck == DATA_LOADER
    assert r.data_share == pytest.approx(0.6)


def test_compute_is_capped_by_what_the_data_wait_leaves():
    r = breakdown(4, step_s=0.050, data_s=0.010, compute_s=0.070)
    assert r.compute_s == pytest.approx(0.040) and r.host_s == 0.0
    assert r.bottleneck == COMPUTE
    assert r.amdahl_ceiling == pytest.approx(0.050 / 0.010)


def test_host_bound_step():
    r = breakdown(2, step_s=0.010, data_s=0.001, compute_s=0.002)
    assert r.bottleneck == HOST
    assert r.host_s == pytest.approx(0.007)
    assert r.amdahl_ceiling == pytest.approx(1 / 0.8)


def test_no_compute_means_no_speedup_from_a_faster_device():
    assert breakdown(0, 0.1, 0.1, 0.0).amdahl_ceiling == 1.0


def test_verdict_names_the_loader_and_the_fall_in_step_time():
    rows = [
        breakdown(0, 0.100, 0.070, 0.020, loader_batches_per_s=12.0),
        breakdown(2, 0.040, 0.010, 0.020, loader_batches_per_s=25.0),
        breakdown(4, 0.025, 0.001, 0.020, loader_batches_per_s=50.0),
    ]
    text = verdict(rows)
    assert text[0].startswith("with 0 workers the data loader is the bottleneck: 70 %")
    assert "12.0 batches/s against 33.3" in text[0]
    assert "falls from 100.0 ms (0 workers) to 25.0 ms (4 workers), 4.00× faster" in text[1]
    assert "bottleneck is compute" in text[1]
    assert "20 % of the step" in text[2] and "5.00× at most" in text[2]


def test_bad_times_are_rejected():
    with pytest.raises(InvalidInput, match="step time"):
        breakdown(0, 0.0, 0.0, 0.0)
    with pytest.raises(InvalidInput, match="data time"):
        breakdown(0, 1.0, -0.1, 0.0)


def test_speedup_on_a_faster_device_follows_amdahl():
    r = breakdown(0, step_s=0.100, data_s=0.030, compute_s=0.050)  # p = 0.5
    assert r.speedup_on_faster_device(2.0) == pytest.approx(1 / (0.5 + 0.25))
    assert r.speedup_on_faster_device(1.0) == pytest.approx(1.0)
    assert r.amdahl_ceiling == pytest.approx(2.0)


def test_verdict_says_when_workers_crowd_the_step_off_the_cores():
    rows = [
        breakdown(0, 0.300, 0.250, 0.010),  # host 40 ms
        breakdown(4, 0.140, 0.010, 0.010),  # host 120 ms: 4 workers + 2 threads on 2 cores
    ]
    text = verdict(rows, cores=2, threads=2)
    crowded = [t for t in text if t.startswith("host time rises")]
    assert crowded == [
        "host time rises from 40.0 ms (0 workers) to 120.0 ms (4 workers): 4 loader workers "
        "and 2 torch threads share 2 cores; use fewer workers or fewer torch threads (--threads)"
    ]
    # enough cores, or a rise that is small against the step: no such line
    assert not any(t.startswith("host time") for t in verdict(rows, cores=8, threads=2))
    small = [breakdown(0, 0.300, 0.250, 0.040), breakdown(4, 0.140, 0.080, 0.045)]
    assert not any(t.startswith("host time") for t in verdict(small, cores=2, threads=2))


def test_contention_is_named_when_ops_wait_for_the_cpu():
    from ceiling.profile.step import contention

    assert contention(0.004, 0.005) == []
    (text,) = contention(0.004, 0.040)
    assert text.startswith("the step's ops took 4 ms at best but 40 ms in a typical recorded")
    assert "(10.0×)" in text


def test_verdict_when_the_loader_already_keeps_up():
    rows = [
        breakdown(0, 0.005, 0.0006, 0.004, loader_batches_per_s=1600.0),
        breakdown(2, 0.006, 0.0015, 0.004, loader_batches_per_s=600.0),
    ]
    text = verdict(rows)
    assert text[0] == "with 0 workers the bottleneck is compute"
    assert text[1].startswith("more loader workers do not help: with 0 the loader already gives")
    assert "1600.0 batches/s against 227.3" in text[1]
