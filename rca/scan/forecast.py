"""Where each signal of an instance stands and where it is heading: current value against its
threshold, a robust trend (Theil-Sen, `rca.scan.trend`, every instance at once), the time left before it
crosses, and whether it has left the instance's own normal range at all.

The normal range is the instance's history, not the fleet's: a host that always runs its cores at
85 % is past the 82 % threshold but not degrading, and only a departure from its own baseline
(the same hour yesterday when Prometheus still has it, else the history before the trend window)
counts. The probability of a TTFT SLO breach comes from the queue-depth Weibull model of
`rca.signals.slo`, fitted on the instance's own violations or, when it has too few, the fleet's.
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rca.collect.prometheus import Samples
from rca.scan.fleet import SignalSeries, sample_time
from rca.scan.trend import Trend, theil_sen
from rca.scan.window import HourLevel
from rca.signals.findings import COMPARE, DEPARTURE_SIGMAS, MAD_TO_SIGMA, MIN_NORMAL_SAMPLES, departure
from rca.signals.slo import MIN_VIOLATIONS, NotEnoughViolations, WeibullFit, align, fit_weibull

CURRENT_SECONDS = 120  # "now" is the median of the last two minutes: one noisy sample moves nothing
MIN_TREND_POINTS = 6
TREND_CONFIDENCE = 0.90  # a trend counts when this confidence interval of its slope excludes zero
RELATIVE_MARGIN = 0.05  # a departure is at least 5 % of the baseline, however flat the history
COUNT_UNIT = "requests"  # a signal in this unit counts whole requests (the queue's median)


@dataclass(frozen=True)
class Limit:
    """What a signal is judged against: the profile's threshold (or the TTFT SLO)."""

    signal: str
    title: str
    unit: str
    comparison: str  # ">" or "<"
    threshold: float
    # Judged on its latest sample rather than the median of the last CURRENT_SECONDS: for a value
    # that is already a quantile over minutes (TTFT p95 over 5 m), that median only adds a minute
    # of delay before the breach that a rule-evaluated SLA alert sees at its next evaluation.
    latest: bool = False
    # Where the threshold came from, for the TTFT SLO (`rca.scan.slo_rules`): "rule <alert> (group
    # <group>, <file>)", "config file" or "default"; None for a profile threshold.
    slo_source: str | None = None


@dataclass(frozen=True)
class SignalForecast:
    """One signal of one instance at one scan."""

    limit: Limit
    source: str
    current: float
    baseline: float | None  # the instance's own normal level; None without enough history
    slope_per_minute: float | None  # Theil-Sen over the trend window; None when too few points
    cross_in_seconds: float | None  # until it crosses the threshold at this trend; None: not heading there
    breached: bool  # beyond the threshold now
    departed: bool  # beyond its own normal range, in the direction of the threshold
    moving_since: float | None  # unix time it left its normal range, when departed
    normal_edge: float | None = None  # how far its normal life reaches towards the threshold (`NormalRange.edge`)

    @property
    def degrading(self) -> bool:
        """Beyond its threshold and away from its own normal: a host busy as always is not."""
        return self.breached and self.departed

    def figures(self) -> dict[str, float | str | bool | None]:
        """What a transition stores about this signal."""
        figures: dict[str, float | str | bool | None] = {
            "signal": self.limit.signal,
            "source": self.source,
            "current": self.current,
            "threshold": self.limit.threshold,
            "comparison": self.limit.comparison,
            "baseline": self.baseline,
            "slope_per_minute": self.slope_per_minute,
            "cross_in_seconds": self.cross_in_seconds,
            "breached": self.breached,
            "departed": self.departed,
            "moving_since": self.moving_since,
            "normal_edge": self.normal_edge,
        }
        if self.limit.slo_source is not None:
            figures["slo_source"] = self.limit.slo_source
        return figures


def trends(windows: Sequence[Samples], now: float, trend_seconds: float) -> list[Trend | None]:
    """Each series' Theil-Sen trend per minute over the trend window, all in one batch; None with
    fewer than MIN_TREND_POINTS, a zero trend when the window never changed."""
    recent = [samples[bisect_left(samples, now - trend_seconds, key=sample_time) :] for samples in windows]
    fitted = theil_sen(
        [[(ts - now) / 60 for ts, _ in window] for window in recent],
        [[v for _, v in window] for window in recent],
        TREND_CONFIDENCE,
    )
    found: list[Trend | None] = []
    for window, trend in zip(recent, fitted, strict=True):
        if len(window) < MIN_TREND_POINTS:
            found.append(None)
        elif len({v for _, v in window}) < 2:
            found.append(Trend(0.0, 0.0, 0.0))
        else:
            found.append(trend)
    return found


@dataclass(frozen=True)
class NormalRange:
    """An instance's normal level of one signal."""

    centre: float  # the same hour yesterday when known, else the history's median
    spread: float  # the history's noise: a departure is further than this from the centre
    own: float  # the history's median: where this hour has been
    reached: float | None = None  # how far the same hour yesterday reached towards the threshold

    def edge(self, sign: float) -> float:
        """How far its normal life reaches towards the threshold (`sign` +1 above, -1 below):
        the noise beyond the centre, beyond this hour's own level, or beyond where the same hour
        yesterday reached, whichever is furthest (a busy host's queue at 3 yesterday and 5 all
        this hour has lived at both; one whose TTFT wandered up to 1.6 s yesterday has lived
        there)."""
        levels = [self.centre, self.own] + ([self.reached] if self.reached is not None else [])
        return sign * (max(sign * level for level in levels) + self.spread)


def normal_range(
    normal: list[float], yesterday: HourLevel | None, sign: float = 1.0, resolution: float = 0.0
) -> NormalRange | None:
    """The instance's normal level from its history and the same hour yesterday; None without
    history to tell. `sign` is the threshold's side (+1 above, -1 below). `resolution` is the
    least step its values move by: the median of a count of requests steps by whole requests, so
    one step is within its noise however flat the history (a median that sat at 4 all hour and
    reads 5 now has not left its normal)."""
    if len(normal) < MIN_NORMAL_SAMPLES:
        return None
    own = statistics.median(normal)
    centre = yesterday.median if yesterday is not None else own
    mad = statistics.median(abs(v - own) for v in normal)  # the noise of the history, around its own level
    spread = max(DEPARTURE_SIGMAS * MAD_TO_SIGMA * mad, RELATIVE_MARGIN * abs(centre), resolution, 1e-9)
    return NormalRange(centre, spread, own, yesterday.reach(sign) if yesterday is not None else None)


def forecast_signal(
    limit: Limit,
    samples: Samples,
    source: str,
    now: float,
    trend_seconds: float,
    yesterday: HourLevel | None = None,
) -> SignalForecast | None:
    """The signal's forecast at `now` from its samples (oldest first, as Prometheus returns them); None when it has no
    sample in the last CURRENT_SECONDS (an instance that stopped reporting is not judged on old data).

    `yesterday` is the instance's level at the same hour the day before, when known: its median is
    the baseline then, the history before the trend window otherwise."""
    [trend] = trends([samples], now, trend_seconds)
    return _forecast(limit, samples, source, now, trend_seconds, yesterday, trend)


def forecast_fleet(
    limit: Limit,
    series: dict[str, SignalSeries],
    yesterday: Mapping[str, HourLevel],
    now: float,
    trend_seconds: float,
    per_target: Mapping[str, Limit] | None = None,
) -> dict[str, SignalForecast]:
    """`forecast_signal` for one signal of every instance (by instance), the trends in one batch;
    an instance in `per_target` is judged against its own limit there (its TTFT SLO)."""
    instances = list(series)
    fitted = trends([series[i].samples for i in instances], now, trend_seconds)
    found: dict[str, SignalForecast] = {}
    for instance, trend in zip(instances, fitted, strict=True):
        signal = series[instance]
        own = per_target.get(instance, limit) if per_target else limit
        forecast = _forecast(own, signal.samples, signal.source, now, trend_seconds, yesterday.get(instance), trend)
        if forecast is not None:
            found[instance] = forecast
    return found


def _forecast(
    limit: Limit,
    samples: Samples,
    source: str,
    now: float,
    trend_seconds: float,
    yesterday: HourLevel | None,
    trend: Trend | None,
) -> SignalForecast | None:
    after_now = bisect_right(samples, now, key=sample_time)
    recent = [v for _, v in samples[bisect_left(samples, now - CURRENT_SECONDS, key=sample_time) : after_now]]
    if not recent:
        return None
    current = recent[-1] if limit.latest else statistics.median(recent)
    compare = COMPARE[limit.comparison]
    breached = compare(current, limit.threshold)
    sign = 1.0 if limit.comparison == ">" else -1.0
    cross_in = None
    if trend is not None and not breached:
        heading = (trend.low > 0) if sign > 0 else (trend.high < 0)  # the whole interval points at it
        if heading and trend.slope != 0:
            cross_in = max(0.0, (limit.threshold - current) / trend.slope * 60)
    normal_samples = [v for _, v in samples[: bisect_left(samples, now - trend_seconds, key=sample_time)]]
    normal = normal_range(normal_samples, yesterday, sign, 1.0 if limit.unit == COUNT_UNIT else 0.0)
    if normal is None:
        baseline, departed = (yesterday.median if yesterday else None), True  # nothing says this level is normal for it
    else:
        baseline, departed = normal.centre, sign * (current - normal.centre) > normal.spread
    moving_since = None
    if departed:
        moving_since = departure(samples, now, normal_samples, limit.comparison) if normal else now
    return SignalForecast(
        limit=limit,
        source=source,
        current=current,
        baseline=baseline,
        slope_per_minute=trend.slope if trend else None,
        cross_in_seconds=cross_in,
        breached=breached,
        departed=departed,
        moving_since=moving_since,
        normal_edge=normal.edge(sign) if normal else None,
    )


def violation_depths(depth: Samples, ttft: Samples, slo_seconds: float, step_seconds: float) -> list[float]:
    """Queue depths at which TTFT broke its SLO, as `rca.signals.slo` pairs them."""
    return [d for _, d, t in align(depth, ttft, tolerance=step_seconds / 2) if t > slo_seconds and d > 0]


@dataclass(frozen=True)
class SloModel:
    """The queue-depth Weibull of `rca.signals.slo`, fitted on the depths at which TTFT broke its
    SLO, and which depths those were ("own: 23 violations, k=2.1, lambda=6.3"), or why there is none."""

    fit: WeibullFit | None
    description: str


def slo_model(depths: list[float], scope: str) -> SloModel:
    """The Weibull over these violation depths (`scope`: whose they are, "own" or "fleet")."""
    try:
        fit = fit_weibull(depths)
    except NotEnoughViolations as exc:
        return SloModel(None, f"no SLO model ({scope}): {exc}")
    return SloModel(fit, f"{scope}: {fit.violations} violations, k={fit.shape:.2g}, lambda={fit.scale:.2g}")


def model_for(own: list[float], fleet: SloModel) -> SloModel:
    """The instance's own model when it has MIN_VIOLATIONS, else the fleet's (fitted once per scan)."""
    return slo_model(own, "own") if len(own) >= MIN_VIOLATIONS else fleet


@dataclass(frozen=True)
class SloForecast:
    """P(TTFT SLO breach) at the queue depth forecast for the horizon, and the model behind it."""

    probability: float | None
    depth_at_horizon: float | None
    model: str


def slo_forecast(model: SloModel, depth: SignalForecast | None, horizon_seconds: float) -> SloForecast:
    """F(depth forecast at the horizon) under the model: the depth now plus its rise, if rising."""
    if depth is None:
        return SloForecast(None, None, "no queue depth")
    rising = max(0.0, depth.slope_per_minute or 0.0) if depth.limit.comparison == ">" else 0.0
    at_horizon = depth.current + rising * horizon_seconds / 60
    if model.fit is None:
        return SloForecast(None, at_horizon, model.description)
    probability = model.fit.probability(at_horizon)
    return SloForecast(probability if math.isfinite(probability) else None, at_horizon, model.description)
