import numpy as np
import pytest

from ceiling.errors import InvalidInput
from ceiling.measure.stats import percentile, summarize


def test_summary_exact_values():
    s = summarize([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (s.n, s.min, s.median, s.mean) == (5, 1.0, 3.0, 3.0)
    assert s.p10 == pytest.approx(1.4)
    assert s.p90 == pytest.approx(4.6)
    assert s.iqr == pytest.approx(2.0)  # p75 4 - p25 2
    assert s.noisy  # 2 / 3 > 0.1


def test_matches_numpy_percentiles():
    xs = list(np.random.default_rng(0).exponential(size=37))
    s = summarize(xs)
    p25, p75 = np.percentile(xs, [25, 75])
    assert s.iqr == pytest.approx(p75 - p25)
    assert s.p10 == pytest.approx(np.percentile(xs, 10))
    assert s.median == pytest.approx(np.median(xs))


def test_noise_threshold():
    quiet = summarize([1.0, 1.01, 1.02, 1.03, 1.04])
    assert quiet.iqr == pytest.approx(0.02)
    assert not quiet.noisy
    assert summarize([1.0, 1.0, 1.3, 1.3]).noisy  # IQR 0.225 / median 1.15 = 0.196


def test_single_sample():
    s = summarize([0.5])
    assert (s.min, s.median, s.p10, s.p90, s.iqr, s.noisy) == (0.5, 0.5, 0.5, 0.5, 0.0, False)


@pytest.mark.parametrize("bad", [[], [float("nan")], [-1.0]])
def test_bad_samples(bad):
    with pytest.raises(InvalidInput):
        summarize(bad)


def test_percentile_bounds():
    with pytest.raises(InvalidInput):
        percentile([1.0], 101)
