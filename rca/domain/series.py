"""A finding's series as kept with the incident: downsampled, so that its page can draw it after
Prometheus has dropped the data and without reaching Prometheus at all.

Size is bounded per investigation: at most `MAX_SERIES` series (one per finding, breached ones
first) of at most `MAX_POINTS` values each, values rounded to `SIGNIFICANT_DIGITS`, and at most
`MAX_LABELS` labels of at most `MAX_LABEL_CHARS` characters. That is under 10,000 numbers, about
100 KB of JSON at most, whatever the window or the scrape interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

MAX_POINTS = 300
MAX_SERIES = 32
MAX_LABELS = 20
MAX_LABEL_CHARS = 200
SIGNIFICANT_DIGITS = 6


@dataclass(frozen=True)
class EvidenceSeries:
    """One finding's series on a regular grid: `values[i]` is at `start + i * step_seconds`, None
    where Prometheus had no sample. `baseline_end` closes the period the baseline was taken from
    (which opens at `start`)."""

    key: str  # the finding's key
    labels: dict[str, str]
    start: datetime
    step_seconds: int
    values: list[float | None]
    baseline_end: datetime | None


def bounded_labels(labels: dict[str, str]) -> dict[str, str]:
    """The first `MAX_LABELS` labels by name, each value cut to `MAX_LABEL_CHARS`."""
    return {name[:MAX_LABEL_CHARS]: value[:MAX_LABEL_CHARS] for name, value in sorted(labels.items())[:MAX_LABELS]}


def _rounded(value: float) -> float:
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def downsample(
    samples: Sequence[tuple[float, float]], start: float, end: float, step: int, comparison: str
) -> tuple[int, list[float | None]]:
    """`samples` (time, value) of [start, end] on at most `MAX_POINTS` buckets: returns the
    bucket width (a multiple of `step`) and one value per bucket. A bucket keeps its sample on the
    breach side (the largest for ">", the smallest for "<"), so that a short breach seen at full
    resolution is still seen on the chart."""
    buckets = max(1, math.ceil((end - start) / step) + 1)
    width = step * math.ceil(buckets / MAX_POINTS)
    count = max(1, min(MAX_POINTS, math.ceil((end - start) / width) + 1))
    pick = max if comparison == ">" else min
    values: list[float | None] = [None] * count
    for ts, value in samples:
        index = int((ts - start) // width)
        if 0 <= index < count and math.isfinite(value):
            held = values[index]
            values[index] = value if held is None else pick(held, value)
    return width, [None if v is None else _rounded(v) for v in values]
