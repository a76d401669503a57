"""The fleet-wide Theil-Sen (rca.scan.trend) gives scipy.stats.theilslopes' slope and interval."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import theilslopes

from rca.scan.trend import Trend, theil_sen


def series(rng: np.random.Generator) -> tuple[list[float], list[float]]:
    """A ragged window: 2 to 40 points, a trend with noise, often rounded into ties, gaps in time."""
    size = int(rng.integers(2, 41))
    x = np.sort(rng.choice(np.arange(60), size=size, replace=False)).astype(float) / 2
    y = rng.normal(0, 1) * x + rng.normal(0, rng.uniform(0.01, 3), size)
    if rng.random() < 0.4:
        y = np.round(y)  # gauges of integers: many equal values
    return list(x), list(y)


@pytest.mark.parametrize("confidence", [0.90, 0.95, 0.05])
def test_equals_scipy_on_random_tied_and_ragged_series(confidence: float) -> None:
    rng = np.random.default_rng(int(confidence * 100))
    windows = [series(rng) for _ in range(300)]
    found = theil_sen([x for x, _ in windows], [y for _, y in windows], confidence)
    for (x, y), trend in zip(windows, found, strict=True):
        slope, _, low, high = theilslopes(y, x, alpha=confidence)
        assert trend == Trend(pytest.approx(slope), pytest.approx(low, nan_ok=True), pytest.approx(high, nan_ok=True))


def test_a_flat_series_has_a_zero_slope_and_one_with_a_single_time_none() -> None:
    flat, single = theil_sen([[0.0, 1.0, 2.0], [5.0, 5.0]], [[3.0, 3.0, 3.0], [1.0, 2.0]], 0.9)
    assert flat == Trend(0.0, 0.0, 0.0)
    assert single is None
    assert theil_sen([], [], 0.9) == []
