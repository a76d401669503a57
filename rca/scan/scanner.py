"""One scan of the fleet at a given time: discover the targets, read every signal's recent series
in one range query per signal, and assess each target (forecasts and P(SLO breach)).

A scan costs a fixed number of queries whatever the fleet's size: one for discovery, one per
identity series of the profile, one range query per early signal and one for TTFT, plus, every
BASELINE_REFRESH_SECONDS, one per signal for the level at the same hour the day before. The range
queries read the whole history every BASELINE_REFRESH_SECONDS and the trend window in between.
It reads Prometheus only; `rca.scan.warnings` turns the assessments into states and incidents.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rca.collect.profile import Profile, profile_for
from rca.collect.prometheus import PrometheusSource
from rca.collect.promql import query_params
from rca.config import Settings
from rca.scan.fleet import FleetSource, Machines, ServingTarget, SignalSeries, assign, discover, fetch, machines
from rca.scan.forecast import (
    Limit,
    SignalForecast,
    forecast_signal,
    model_for,
    slo_forecast,
    slo_model,
    violation_depths,
)
from rca.scan.queries import FleetQuery, early_signals, fleet_query
from rca.scan.states import Assessment
from rca.signals.slo import DEPTH_SIGNAL, TTFT_SIGNAL

BASELINE_REFRESH_SECONDS = 600  # the history before the trend window and the day before, re-read this often
TTFT_SLO_TITLE = "TTFT p95 against its SLO"


@dataclass
class ScanReport:
    """What one scan saw and what it cost."""

    at: datetime
    targets: list[ServingTarget]
    assessments: dict[str, Assessment]  # by instance
    queries: int
    seconds: float


def step_for(settings: Settings) -> int:
    """The range queries' step: the scan interval, between 15 s and a minute."""
    return int(min(60, max(15, settings.scan_interval_seconds)))


def prometheus_fleet_source(settings: Settings) -> FleetSource:
    """A FleetSource over the configured Prometheus (POST, bounded retries, as collection uses)."""
    if not settings.prometheus_url:
        raise ValueError("RCA_PROMETHEUS_URL is not set; the scan reads Prometheus")
    client = PrometheusSource(
        settings.prometheus_url, settings.prometheus_timeout_seconds, settings.query_concurrency
    ).client
    return FleetSource(
        instant_query=lambda promql, at: client.custom_query(promql, params={"time": at.timestamp()}),
        range_query=lambda promql, start, end, step: client.custom_query_range(
            promql, start_time=start, end_time=end, step=f"{step}s"
        ),
        concurrency=settings.query_concurrency,
    )


@dataclass
class Scanner:
    """Scans the fleet; keeps the day-before baselines between scans (they change slowly)."""

    settings: Settings
    source: FleetSource
    profile: Profile = field(init=False)
    queries: list[FleetQuery] = field(init=False)
    limits: dict[str, Limit] = field(init=False)
    _yesterday: dict[str, dict[str, float]] = field(default_factory=dict, init=False)
    _yesterday_at: float | None = field(default=None, init=False)
    _history: dict[str, dict[str, SignalSeries]] = field(default_factory=dict, init=False)
    _history_at: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        file_config = self.settings.file_config()
        self.profile = profile_for(file_config)
        params = query_params(file_config)
        specs = {spec.id: spec for spec in self.profile.signals}
        self.limits = {
            spec.id: Limit(spec.id, spec.title, spec.unit, spec.comparison, spec.threshold)
            for spec in early_signals(self.profile)
            if spec.threshold is not None
        }
        if TTFT_SIGNAL in specs:
            spec = specs[TTFT_SIGNAL]
            self.limits[TTFT_SIGNAL] = Limit(TTFT_SIGNAL, TTFT_SLO_TITLE, spec.unit, ">", file_config.slo_ttft_seconds)
        built = [fleet_query(specs[signal], params) for signal in self.limits]
        self.queries = [query for query in built if query is not None]

    def _day_before(self, targets: list[ServingTarget], joined: Machines, at: datetime) -> dict[str, dict[str, float]]:
        """Each signal's median over the hour around the same time yesterday, per target."""
        now = at.timestamp()
        if self._yesterday_at is not None and abs(now - self._yesterday_at) < BASELINE_REFRESH_SECONDS:
            return self._yesterday
        found: dict[str, dict[str, float]] = {}
        for query in self.queries:
            promql = f"quantile_over_time(0.5, ({query.promql})[1h:1m] offset 23h30m)"
            rows = [row | {"values": [row["value"]]} for row in self.source.instant(promql, at) if "value" in row]
            found[query.spec.id] = {
                instance: series.samples[-1][1] for instance, series in assign(query, rows, targets, joined).items()
            }
        self._yesterday, self._yesterday_at = found, now
        return found

    def _series(
        self, targets: list[ServingTarget], joined: Machines, start: datetime, end: datetime, step: int
    ) -> dict[str, dict[str, SignalSeries]]:
        """Every signal's series over [start, end]. The whole history is read every
        BASELINE_REFRESH_SECONDS; in between only the trend window is, and the older samples
        (the baseline, the SLO model's violations) come from the last read: a quarter of the
        points per scan with the defaults."""
        now = end.timestamp()
        stale = self._history_at is None or not 0 <= now - self._history_at < BASELINE_REFRESH_SECONDS
        if stale:
            self._history = fetch(self.source, self.queries, targets, joined, start, end, step)
            self._history_at = now
            return self._history
        recent_start = end - timedelta(minutes=self.settings.scan_trend_minutes)
        recent = fetch(self.source, self.queries, targets, joined, recent_start, end, step)
        first, split = start.timestamp(), recent_start.timestamp()
        merged: dict[str, dict[str, SignalSeries]] = {}
        for signal, by_target in recent.items():
            before = self._history.get(signal, {})
            merged[signal] = {}
            for instance, found in by_target.items():
                older = before.get(instance)
                kept = [(ts, v) for ts, v in older.samples if first <= ts < split] if older else []
                merged[signal][instance] = SignalSeries(kept + found.samples, found.source)
        self._history = merged
        return merged

    def scan(self, at: datetime) -> ScanReport:
        started = time.perf_counter()
        before = self.source.queries
        joined = machines(self.source, self.profile, at)
        targets = discover(self.source, self.profile, at, joined)
        step = step_for(self.settings)
        end = datetime.fromtimestamp(at.timestamp() // step * step, at.tzinfo)
        start = end - timedelta(minutes=self.settings.scan_history_minutes)
        series = self._series(targets, joined, start, end, step) if targets else {}
        yesterday = self._day_before(targets, joined, at) if targets else {}
        assessments = self._assess(targets, series, yesterday, at.timestamp(), step)
        return ScanReport(
            at=at,
            targets=targets,
            assessments=assessments,
            queries=self.source.queries - before,
            seconds=time.perf_counter() - started,
        )

    def _assess(
        self,
        targets: list[ServingTarget],
        series: dict[str, dict[str, SignalSeries]],
        yesterday: dict[str, dict[str, float]],
        now: float,
        step: int,
    ) -> dict[str, Assessment]:
        trend_seconds = self.settings.scan_trend_minutes * 60
        horizon = self.settings.scan_horizon_minutes * 60
        slo_seconds = self.limits[TTFT_SIGNAL].threshold if TTFT_SIGNAL in self.limits else None
        own: dict[str, list[float]] = {}
        if slo_seconds is not None:
            for target in targets:
                depth = series.get(DEPTH_SIGNAL, {}).get(target.instance)
                ttft = series.get(TTFT_SIGNAL, {}).get(target.instance)
                if depth and ttft:
                    own[target.instance] = violation_depths(depth.samples, ttft.samples, slo_seconds, step)
        fleet = slo_model([depth for depths in own.values() for depth in depths], "fleet")
        assessments: dict[str, Assessment] = {}
        for target in targets:
            forecasts: dict[str, SignalForecast] = {}
            for signal, limit in self.limits.items():
                found = series.get(signal, {}).get(target.instance)
                if found is None:
                    continue
                day_before = yesterday.get(signal, {}).get(target.instance)
                forecast = forecast_signal(limit, found.samples, found.source, now, trend_seconds, day_before)
                if forecast is not None:
                    forecasts[signal] = forecast
            model = model_for(own.get(target.instance, []), fleet)
            slo = slo_forecast(model, forecasts.get(DEPTH_SIGNAL), horizon)
            assessments[target.instance] = Assessment(at=now, signals=list(forecasts.values()), slo=slo)
        return assessments
