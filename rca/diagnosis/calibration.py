"""Calibration: from the ranking's raw strength to how often an answer that strong is right.

The raw confidence of `ranking.rank` orders causes well but says little about how often the top one
is right (it was right 72 % of the time at a raw 0.43). A monotone map per kind of answer turns it
into that frequency: one for a cause at the top, one for `no_clear_cause` at the top when no cause
is a candidate (its raw value says only how much of the evidence could be measured). The maps are
fitted by `tools/fit_calibration.py` with isotonic regression on the tuning seeds of the generated
worlds and written into the `calibration:` section of taxonomy.yaml; nothing else writes them.
They calibrate to the generator's mix of causes, stacks and missing data (docs/diagnosis.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, Field, model_validator
from scipy.optimize import isotonic_regression

CAUSE = "cause"
NO_CAUSE = "no_cause"


class Curve(BaseModel):
    """A monotone, piecewise-linear map of raw strength (`raw`) to right-answer frequency (`right`)."""

    model_config = {"extra": "forbid"}

    raw: list[float] = Field(min_length=2)
    right: list[float] = Field(min_length=2)

    @model_validator(mode="after")
    def _monotone(self) -> Curve:
        if len(self.raw) != len(self.right):
            raise ValueError("raw and right must have the same length")
        if any(b <= a for a, b in zip(self.raw, self.raw[1:], strict=False)):
            raise ValueError("raw must increase")
        if any(b < a for a, b in zip(self.right, self.right[1:], strict=False)):
            raise ValueError("right must not decrease (the map is monotone)")
        if not all(0 <= v <= 1 for v in self.raw + self.right):
            raise ValueError("values must lie in [0, 1]")
        return self

    def __call__(self, raw: float) -> float:
        return float(np.interp(raw, self.raw, self.right))


class Calibration(BaseModel):
    model_config = {"extra": "forbid"}

    cause: Curve
    no_cause: Curve
    fitted_on: str = Field(description="what the maps were fitted on, for the reader")


def fit(points: Sequence[tuple[float, bool]]) -> Curve:
    """Isotonic regression of rightness on raw strength (answers of equal strength pooled first,
    so their order cannot split them). Each block of the fitted step function becomes one knot (its
    mean raw strength, its share right), shrunk towards 1/2 by one right and one wrong answer
    (Laplace) so that no finite sample makes the service claim it is never or always right;
    between knots the map is linear."""
    raw, index, counts = np.unique([p[0] for p in points], return_inverse=True, return_counts=True)
    rights = np.bincount(index, weights=[float(p[1]) for p in points])
    fitted = isotonic_regression(rights / counts, weights=counts).x
    xs: list[float] = []
    ys: list[float] = []
    start = 0
    for end in range(1, len(raw) + 1):
        if end < len(raw) and fitted[end] == fitted[start]:
            continue
        n = counts[start:end].sum()
        x = float((raw[start:end] * counts[start:end]).sum() / n)
        xs.append(round(x, 4))
        ys.append(round((float(rights[start:end].sum()) + 1) / (n + 2), 4))
        start = end
    ys = [float(y) for y in np.maximum.accumulate(ys)]  # the shrinkage cannot undo the order
    if len(xs) == 1:
        xs, ys = [xs[0], min(1.0, xs[0] + 1e-4)], [ys[0], ys[0]]
    return Curve(raw=xs, right=ys)
