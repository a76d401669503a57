"""One scan of the fleet at a given time: discover the targets, read every signal's recent series
in one range query per signal, and assess each target (forecasts and P(SLO breach)).

A scan costs a fixed number of queries whatever the fleet's size: one for discovery, one per
identity series of the profile, one range query per early signal and one for TTFT, plus, every
BASELINE_REFRESH_SECONDS, one per signal for the level at the same hour the day before. The range
queries read the whole history when the scanner starts or meets a new target, and otherwise only
the steps since the previous scan (the rest is kept from the last reads): Prometheus evaluates
3 steps a scan, not the 120 of the hour.
It reads Prometheus only; `rca.scan.warnings` turns the assessments into states and incidents.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rca.collect.profile import Profile, profile_for
from rca.collect.prometheus import PrometheusSource
from rca.collect.promql import query_params
from rca.config import Settings
from rca.scan.fleet import (
    FleetSource,
    Machines,
    ServingTarget,
    SignalSeries,
    assign,
    discover,
    fetch,
    machines,
    sample_time,
)
from rca.scan.forecast import (
    Limit,
    SloModel,
    forecast_fleet,
    model_for,
    slo_forecast,
    slo_model,
    violation_depths,
)
from rca.scan.queries import FleetQuery, early_signals, fleet_query
from rca.scan.states import Assessment
from rca.signals.slo import DEPTH_SIGNAL, MIN_VIOLATIONS, TTFT_SIGNAL

BASELINE_REFRESH_SECONDS = 600  # the levels of the day before are re-read this often
RE_READ_STEPS = 2  # the last steps of the previous read, read again: late scrapes change them
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


def _spliced(
    older: SignalSeries | None, recent: SignalSeries | None, first: float, split: float
) -> SignalSeries | None:
    """The kept samples in [first, split) of the last read followed by the recent read; the older
    ones are dropped when another alternative answered this time (not one series then)."""
    if older is None or (recent is not None and older.source != recent.source):
        return recent
    samples = older.samples
    begin = bisect_left(samples, first, key=sample_time)
    if recent is None:
        return SignalSeries(samples[begin:], older.source) if begin < len(samples) else None
    return SignalSeries(samples[begin : bisect_left(samples, split, key=sample_time)] + recent.samples, recent.source)


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
    _models: dict[str, tuple[tuple[float, ...], SloModel]] = field(default_factory=dict, init=False)
    _known: set[str] = field(default_factory=set, init=False)  # the targets of the last whole read
    _read_until: datetime | None = field(default=None, init=False)  # the end of the last range read

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
            self.limits[TTFT_SIGNAL] = Limit(
                TTFT_SIGNAL, TTFT_SLO_TITLE, spec.unit, ">", file_config.slo_ttft_seconds, latest=True
            )
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
        """Every signal's series over [start, end]. The whole history is read at the first scan,
        when a target appears that the last whole read did not know, and after a gap longer than
        the trend window; otherwise only the steps since the last read are, plus RE_READ_STEPS
        before them (a scrape that arrived late changes them), and the older samples come from
        the last reads: 3 points per series per scan instead of 120 with the defaults."""
        instances = {target.instance for target in targets}
        last, trend = self._read_until, timedelta(minutes=self.settings.scan_trend_minutes)
        if last is None or not timedelta(0) <= end - last <= trend or not instances <= self._known:
            self._history = fetch(self.source, self.queries, targets, joined, start, end, step)
            self._known, self._read_until = instances, end
            return self._history
        recent_start = max(start, last - timedelta(seconds=RE_READ_STEPS * step))
        recent = fetch(self.source, self.queries, targets, joined, recent_start, end, step)
        self._read_until = end
        first, split = start.timestamp(), recent_start.timestamp()
        merged: dict[str, dict[str, SignalSeries]] = {}
        for signal, by_target in recent.items():
            before = self._history.get(signal, {})
            merged[signal] = {}
            for instance in by_target.keys() | before.keys():
                spliced = _spliced(before.get(instance), by_target.get(instance), first, split)
                if spliced is not None:
                    merged[signal][instance] = spliced
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

    def _model(self, instance: str, depths: list[float], fleet: SloModel) -> SloModel:
        """The target's SLO model; its own is refitted only when its violation depths changed."""
        if len(depths) < MIN_VIOLATIONS:
            return model_for(depths, fleet)
        key = tuple(depths)
        cached = self._models.get(instance)
        if cached is None or cached[0] != key:
            cached = self._models[instance] = (key, model_for(depths, fleet))
        return cached[1]

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
        self._models = {instance: kept for instance, kept in self._models.items() if instance in own}
        fleet = slo_model([depth for depths in own.values() for depth in depths], "fleet")
        by_signal = {
            signal: forecast_fleet(limit, series.get(signal, {}), yesterday.get(signal, {}), now, trend_seconds)
            for signal, limit in self.limits.items()
        }
        assessments: dict[str, Assessment] = {}
        for target in targets:
            forecasts = {
                signal: found[target.instance] for signal, found in by_signal.items() if target.instance in found
            }
            model = self._model(target.instance, own.get(target.instance, []), fleet)
            slo = slo_forecast(model, forecasts.get(DEPTH_SIGNAL), horizon)
            assessments[target.instance] = Assessment(at=now, signals=list(forecasts.values()), slo=slo)
        return assessments
