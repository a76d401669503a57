"""P(TTFT SLO violation | queue depth): a Weibull model fitted on the investigation window.

DOMAIN.md (the source article) models the probability of an SLO violation given the queue depth
with a Weibull CDF, F(x) = 1 - exp(-(x/lambda)^k), where k > 1 means violations accelerate with
depth. As the article describes, the Weibull is fitted to the queue depths at which the TTFT SLO
was violated in the window, so F(x) is the share of those violations that happened at a depth
<= x: near 1 once the queue is as deep as the depths that broke the SLO before. It is supporting
evidence for queue-driven causes; the ranking does not read it (it ignores ids it does not name).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
from scipy.optimize import brentq
from scipy.stats import weibull_min

from rca.collect.prometheus import Collection, Samples, SeriesResult
from rca.domain.evidence import Finding
from rca.domain.status import FindingStatus
from rca.domain.values import format_value
from rca.signals.findings import BASELINE_GUARD_MINUTES, FindingBase, breach_onset, current_since

KEY = "slo_violation_probability"
DEPTH_SIGNAL = "queue_median"  # the same depth the queue signal reports, so the two findings agree
TTFT_SIGNAL = "ttft_p95"
DEFAULT_SLO_TTFT_SECONDS = 2.0
DEFAULT_PROBABILITY_THRESHOLD = 0.5
MIN_VIOLATIONS = 8  # fewer samples than this make k and lambda noise
SOURCE = "Weibull maximum-likelihood fit (scipy.stats.weibull_min) of queue depth at TTFT SLO violations"
TITLE = "P(TTFT SLO violation | queue depth)"


@dataclass(frozen=True)
class WeibullFit:
    """Shape k and scale lambda (location fixed at 0) of the depths at which the SLO broke."""

    shape: float
    scale: float
    violations: int

    def probability(self, depth: float) -> float:
        """F(depth) = 1 - exp(-(depth/lambda)^k); 0 for an empty queue."""
        return float(self.probabilities([depth])[0])

    def probabilities(self, depths: Iterable[float]) -> npt.NDArray[np.float64]:
        """F over many depths at once (the onset walks every sample of the window)."""
        values = np.clip(np.asarray(list(depths), dtype=np.float64), 0.0, None)
        return weibull_min.cdf(values, self.shape, loc=0, scale=self.scale)


class NotEnoughViolations(ValueError):
    """The window holds too few (or too uniform) violations for a fit worth reporting."""


def _weibull_mle(data: npt.NDArray[np.float64]) -> tuple[float, float]:
    """(shape, scale) maximising the likelihood with location 0: the root of the shape's profile
    score equation (unique, the score rises with k), then the scale in closed form.

    The same estimate as `weibull_min.fit(data, floc=0)`, whose general Nelder-Mead search took
    25 ms a fit; the fleet scan fits one model per serving instance every scan. Depths are divided by their
    maximum first (the equation is scale-free), so (x/max)^k never overflows.
    """
    top = float(data.max())
    logs = np.log(data / top)
    mean_log = float(logs.mean())

    def score(shape: float) -> float:
        weights = np.exp(shape * logs)
        return float(weights @ logs / weights.sum()) - 1.0 / shape - mean_log

    low, high = 1e-3, 1.0
    while score(high) < 0 and high < 1e6:
        low, high = high, high * 4
    if score(low) > 0 or score(high) < 0:
        return math.nan, math.nan
    shape = brentq(score, low, high, xtol=1e-12, rtol=1e-10)
    scale = top * float(np.mean(np.exp(shape * logs))) ** (1.0 / shape)
    return float(shape), scale


def fit_weibull(depths: Iterable[float], minimum: int = MIN_VIOLATIONS) -> WeibullFit:
    """Maximum-likelihood Weibull with location 0 over positive depths.

    Needs `minimum` samples and at least two distinct depths: with one depth the shape is
    unbounded (the fit degenerates into a step), which would report certainty from no spread.
    """
    data = np.asarray([d for d in depths if math.isfinite(d) and d > 0], dtype=float)
    if len(data) < minimum:
        raise NotEnoughViolations(f"only {len(data)} at a non-zero queue depth; not enough to fit (need {minimum})")
    if len(np.unique(data)) < 2:
        raise NotEnoughViolations(f"all at the same queue depth ({data[0]:.3g}); no spread to fit")
    shape, scale = _weibull_mle(data)
    if not (math.isfinite(shape) and math.isfinite(scale) and shape > 0 and scale > 0):
        raise NotEnoughViolations(f"the Weibull fit over {len(data)} did not converge")
    return WeibullFit(shape=float(shape), scale=float(scale), violations=len(data))


def _merge(result: SeriesResult, reduce: Callable[[list[float]], float]) -> Samples:
    """One sample per timestamp across the signal's series (the default profile returns one)."""
    by_ts: dict[float, list[float]] = {}
    for _, samples in result.series:
        for ts, value in samples:
            if math.isfinite(value):
                by_ts.setdefault(ts, []).append(value)
    return [(ts, reduce(values)) for ts, values in sorted(by_ts.items())]


def align(depth: Samples, ttft: Samples, tolerance: float) -> list[tuple[float, float, float]]:
    """(timestamp, depth, ttft) for each TTFT sample whose nearest depth sample is within
    `tolerance` seconds; both come from one range query grid, but gaps and offsets must not
    pair a violation with an unrelated depth."""
    if not depth or not ttft:
        return []
    d_ts = np.array([ts for ts, _ in depth])
    d_val = np.array([v for _, v in depth])
    t_ts = np.array([ts for ts, _ in ttft])
    right = np.clip(np.searchsorted(d_ts, t_ts), 0, len(d_ts) - 1)
    left = np.clip(right - 1, 0, len(d_ts) - 1)
    nearest = np.where(np.abs(d_ts[left] - t_ts) <= np.abs(d_ts[right] - t_ts), left, right)
    close = np.abs(d_ts[nearest] - t_ts) <= tolerance
    return [(float(t_ts[i]), float(d_val[nearest[i]]), ttft[i][1]) for i in np.flatnonzero(close)]


def _unavailable(
    base: FindingBase,
    detail: str,
    status: FindingStatus = FindingStatus.UNAVAILABLE,
    labels: dict[str, str] | None = None,
) -> Finding:
    return Finding(
        **base,
        status=status,
        breached=False,
        value=None,
        baseline=None,
        onset=None,
        series_labels=labels,
        detail=detail,
    )


def slo_finding(
    collection: Collection,
    alert_start: datetime,
    slo_seconds: float = DEFAULT_SLO_TTFT_SECONDS,
    threshold: float = DEFAULT_PROBABILITY_THRESHOLD,
) -> Finding:
    """The `slo_violation_probability` finding: F(current depth) under the window's Weibull fit.

    Breached when the probability is at or above `threshold`. Without enough violations to fit,
    the finding is `unavailable` and says how many there were; with none it is `ok`, value None
    (no model, and the service does not invent a number).
    """
    results = {r.spec.id: r for r in collection.results}
    depth_result, ttft_result = results.get(DEPTH_SIGNAL), results.get(TTFT_SIGNAL)
    queries = [r.promql for r in (depth_result, ttft_result) if r is not None and r.promql]
    base = FindingBase(
        key=KEY,
        kind="supporting",
        title=TITLE,
        threshold=threshold,
        comparison=">",
        unit="probability",
        query="\n".join(queries) or None,
        source=SOURCE,
    )
    slo = f"TTFT p95 > {slo_seconds:g} s"
    for signal, result in ((DEPTH_SIGNAL, depth_result), (TTFT_SIGNAL, ttft_result)):
        if result is None:
            return _unavailable(base, f"data unavailable: the profile has no {signal} signal")
        if result.not_measurable:
            return _unavailable(
                base, f"{signal}: {result.error or 'not measurable on this stack'}", status=FindingStatus.NOT_MEASURABLE
            )
        if not result.series:
            return _unavailable(base, f"data unavailable: {signal}: {result.error or 'no data'}")
    assert depth_result is not None and ttft_result is not None  # the loop above returned otherwise

    depth = _merge(depth_result, sum)  # waiting requests add up across series
    ttft = _merge(ttft_result, max)  # the SLO is broken if any series breaks it
    end = collection.window.end.timestamp()
    since = current_since(end, alert_start.timestamp())
    recent = [v for ts, v in depth if ts >= since]
    if not recent:
        return _unavailable(base, f"data unavailable: {DEPTH_SIGNAL}: no recent samples")
    current = statistics.median(recent)
    pairs = align(depth, ttft, tolerance=collection.window.step_seconds / 2)
    if not pairs:
        return _unavailable(
            base, f"data unavailable: no {TTFT_SIGNAL} sample lines up in time with a {DEPTH_SIGNAL} one"
        )
    violations = [(ts, d) for ts, d, t in pairs if t > slo_seconds]
    at_zero = sum(1 for _, d in violations if d <= 0)
    counts = {"violations": str(len(violations)), "slo_ttft_seconds": f"{slo_seconds:g}"}
    if not violations:
        return Finding(
            **base,
            status=FindingStatus.OK,
            breached=False,
            value=None,
            baseline=None,
            onset=None,
            series_labels=counts,
            detail=f"no TTFT SLO violation ({slo}) in the window ({len(pairs)} samples); nothing to fit",
        )
    if len(violations) < MIN_VIOLATIONS:
        return _unavailable(
            base,
            f"only {len(violations)} TTFT SLO violations ({slo}) in the window; "
            f"not enough to fit (need {MIN_VIOLATIONS})",
            labels=counts,
        )
    try:
        fit = fit_weibull(d for _, d in violations)
    except NotEnoughViolations as exc:
        return _unavailable(base, f"{len(violations)} TTFT SLO violations ({slo}) in the window, {exc}", labels=counts)

    value = fit.probability(current)
    guard = alert_start.timestamp() - BASELINE_GUARD_MINUTES * 60
    before = [v for ts, v in depth if ts < guard]
    baseline_depth = statistics.median(before) if before else None
    baseline = fit.probability(baseline_depth) if baseline_depth is not None else None
    breached = value >= threshold
    onset_ts = None
    if breached:
        probabilities = fit.probabilities(d for _, d in depth)
        onset_ts = breach_onset(
            [(ts, float(p)) for (ts, _), p in zip(depth, probabilities, strict=True)], lambda p: p >= threshold
        )
    trend = (
        "k > 1: violations accelerate with depth"
        if fit.shape > 1
        else "k <= 1: no acceleration with depth, violations are not concentrated at deep queues"
    )
    depth_text, shape_text, scale_text = (format_value(x, "") for x in (current, fit.shape, fit.scale))
    detail = (
        f"P({slo} | {depth_text} waiting) = {value:.2f} (Weibull k={shape_text}, "
        f"lambda={scale_text}, fitted on {fit.violations} violations; {trend})"
    )
    if baseline is not None and baseline_depth is not None:
        detail += f"; baseline {baseline:.2f} at {format_value(baseline_depth, '')} waiting"
    if at_zero:
        detail += f"; {at_zero} violations with an empty queue left out (not queue-driven)"
    labels = counts | {
        "weibull_shape": f"{fit.shape:.6g}",
        "weibull_scale": f"{fit.scale:.6g}",
        "fitted": str(fit.violations),
        "current_depth": f"{current:.6g}",
    }
    return Finding(
        **base,
        status=FindingStatus.BREACHED if breached else FindingStatus.OK,
        breached=breached,
        value=value,
        baseline=baseline,
        onset=datetime.fromtimestamp(onset_ts, UTC) if onset_ts else None,
        series_labels=labels,
        detail=detail,
    )
