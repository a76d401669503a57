"""Theil-Sen slopes, with Sen's confidence interval, of many series at once.

The estimate is `scipy.stats.theilslopes`'s (median of the pairwise slopes; the interval from the
normal approximation of Kendall's tau with its tie correction), computed for the whole fleet in a
few array operations: the scan trends every signal of every instance each scan, and 4,000 calls of
the scalar function spent 3 s in its per-call overhead. tests/scan/test_trend.py holds it equal to
scipy's on random, tied and ragged series.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.stats import norm

Matrix = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Trend:
    """Slope and its confidence interval, in the value's unit per unit of x."""

    slope: float
    low: float
    high: float


def _padded(rows: Sequence[Sequence[float]], width: int) -> Matrix:
    out = np.full((len(rows), width), np.nan)
    for r, row in enumerate(rows):
        out[r, : len(row)] = row
    return out


def _tie_term(values: Matrix) -> Matrix:
    """Per row, the sum of k(k-1)(2k+5) over groups of k equal finite values (Kendall's correction)."""
    ordered = np.sort(values, axis=1)  # NaN last
    finite = np.isfinite(ordered)
    starts = np.ones_like(finite)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    group = np.cumsum(starts, axis=1) - 1  # the group index of each value within its row
    width = values.shape[1]
    rows = np.broadcast_to(np.arange(len(values))[:, None], values.shape)
    sizes = np.bincount((rows * width + group)[finite], minlength=len(values) * width).astype(float)
    per_group = sizes * (sizes - 1) * (2 * sizes + 5)
    return per_group.reshape(len(values), width).sum(axis=1)


def theil_sen(xs: Sequence[Sequence[float]], ys: Sequence[Sequence[float]], confidence: float) -> list[Trend | None]:
    """One Trend per series (x and y of equal length, any lengths); None for a series with no
    two distinct x. `confidence` as theilslopes' `alpha` (0.90: the 90 % interval)."""
    if not ys:
        return []
    width = max(len(y) for y in ys)
    x, y = _padded(xs, width), _padded(ys, width)
    first, second = np.triu_indices(width, 1)
    dx, dy = x[:, second] - x[:, first], y[:, second] - y[:, first]
    valid = np.isfinite(dx) & np.isfinite(dy) & (dx != 0)
    slopes = np.sort(np.where(valid, dy / np.where(valid, dx, 1.0), np.nan), axis=1)  # NaN last
    count = valid.sum(axis=1)
    counted = np.maximum(count, 1)

    def at(index: npt.NDArray[np.int64]) -> Matrix:
        return np.take_along_axis(slopes, np.clip(index, 0, counted - 1)[:, None], axis=1)[:, 0]

    median = (at((counted - 1) // 2) + at(counted // 2)) / 2
    alpha = 1 - confidence if confidence > 0.5 else confidence
    z = -norm.ppf(alpha / 2)
    points = np.isfinite(y).sum(axis=1)
    variance = (points * (points - 1) * (2 * points + 5) - _tie_term(x) - _tie_term(y)) / 18
    with np.errstate(invalid="ignore"):
        spread = z * np.sqrt(variance)
    defined = np.isfinite(spread)
    spread = np.where(defined, spread, 0.0)
    upper = np.minimum(np.round((count + spread) / 2).astype(np.int64), counted - 1)
    lower = np.maximum(np.round((count - spread) / 2).astype(np.int64) - 1, 0)
    low, high = np.where(defined, at(lower), np.nan), np.where(defined, at(upper), np.nan)
    return [Trend(float(median[r]), float(low[r]), float(high[r])) if count[r] else None for r in range(len(ys))]
