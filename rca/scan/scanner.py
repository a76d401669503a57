"""One scan of the fleet at a given time: discover the targets, read what the kept windows lack
of every signal's series, and assess each instance (forecasts, P(SLO breach), its engine's start).

The scanner keeps two windows of every signal of every instance (`rca.scan.window`): this hour at
the scan's step, and the hour around the same time yesterday at a minute, whose median is the
instance's baseline (moved on every 5 minutes). A scan reads each window's new steps (this
hour's last RE_READ_STEPS again: late scrapes change them) and, newest first, at most
RCA_SCAN_FILL_POINTS points (instances x steps) of the history a window has never read: at the
scanner's start, for a new instance or after a gap, that history comes in pieces over several
scans, and no scan costs much more than the next. An instance whose windows still lack history
is warming: judged on TTFT against its SLO only, as after a restart (`Assessment.warming`).

A scan costs a bounded number of queries whatever the fleet's size: one for discovery, one per
identity series of the profile, one for the engines' start times (`rca.scan.restarts`), and one
per signal and span read: this hour's new steps, yesterday's next 5 minutes (every 5 minutes),
and while an instance warms, a span of each window's missing history; and, at the first scan and
every RCA_SCAN_RULES_REFRESH_SECONDS, one for Prometheus' rules, whose SLO rules give each instance
its own TTFT SLO (`rca.scan.slo_rules`).
It reads Prometheus only; `rca.scan.warnings` turns the assessments into states and incidents.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from rca.collect.profile import Profile, profile_for
from rca.collect.prometheus import PrometheusSource
from rca.collect.promql import query_params
from rca.config import Settings
from rca.scan.fleet import (
    FleetSource,
    Machines,
    ServingInstance,
    SignalSeries,
    discover,
    fetch,
    machines,
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
from rca.scan.restarts import started, with_starts
from rca.scan.saturation import headrooms
from rca.scan.slo_rules import CONFIG_SOURCE, DEFAULT_SOURCE, RuleBook, Slo
from rca.scan.states import Assessment
from rca.scan.window import HourLevel, Window
from rca.signals.slo import DEPTH_SIGNAL, MIN_VIOLATIONS, TTFT_SIGNAL

DAY_SECONDS = 86400
# The baseline: the median of the hour around the same time yesterday (and how far it reached,
# `HourLevel`), at a minute (both ends in, as Prometheus 2 evaluates
# `quantile_over_time(0.5, (q)[1h:1m] offset 23h30m)`). It moves
# on every BASELINE_MOVE_SECONDS, its steps read at once: read a minute at a time, it cost every
# other scan a third more (every signal's range query again, for one step); 10 minutes at once
# made that scan 2.0 s at 1,000 targets, 5 minutes 1.8 s (the others 1.2 s).
BASELINE_SECONDS = 3600
BASELINE_STEP_SECONDS = 60
BASELINE_MOVE_SECONDS = 300
BASELINE_MOVE_STEPS = BASELINE_MOVE_SECONDS // BASELINE_STEP_SECONDS
RE_READ_STEPS = 3  # this hour's last steps read, the newest included, read again: late scrapes change them
TTFT_SLO_TITLE = "TTFT p95 against its SLO"


@dataclass
class ScanReport:
    """What one scan saw and what it cost."""

    at: datetime
    targets: list[ServingInstance]
    assessments: dict[str, Assessment]  # by instance
    queries: int
    seconds: float
    warming: set[str] = field(default_factory=set)  # instances whose windows still lack history
    slos: dict[str, Slo] = field(default_factory=dict)  # by instance: the TTFT SLO it was judged against


def step_for(settings: Settings) -> int:
    """The range queries' step: the scan interval, between 15 s and a minute."""
    return int(min(60, max(15, settings.scan_interval_seconds)))


def prometheus_fleet_source(settings: Settings) -> FleetSource:
    """A FleetSource over the configured Prometheus (POST, bounded retries, as collection uses)."""
    source = PrometheusSource.configured(settings)
    if source is None:
        raise ValueError("RCA_PROMETHEUS_URL is not set; the scan reads Prometheus")
    client = source.client

    def rules() -> Any:
        # prometheus-api-client has no call for the rules API; its session carries the same retries,
        # and refuses an answer other than 200 (`RefusedAnswer`).
        answer = client._session.get(
            f"{client.url}/api/v1/rules", headers=client.headers, auth=client.auth, timeout=client._timeout
        )
        return answer.json()["data"]["groups"]

    return FleetSource(
        instant_query=lambda promql, at: client.custom_query(promql, params={"time": at.timestamp()}),
        range_query=lambda promql, start, end, step: client.custom_query_range(
            promql, start_time=start, end_time=end, step=f"{step}s"
        ),
        concurrency=settings.query_concurrency,
        rules_query=rules,
    )


def baseline_window(end: float) -> tuple[float, float]:
    """The first and last step of yesterday's hour that the baseline at `end` is the median of."""
    last = (end - DAY_SECONDS + BASELINE_SECONDS / 2) // BASELINE_MOVE_SECONDS * BASELINE_MOVE_SECONDS
    return last - BASELINE_SECONDS, last


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


@dataclass
class Scanner:
    """Scans the fleet; keeps this hour's and yesterday's windows between scans."""

    settings: Settings
    source: FleetSource
    # Read all missing history at once: the backtest replays history and keeps no interval.
    whole_reads: bool = False
    profile: Profile = field(init=False)
    queries: list[FleetQuery] = field(init=False)
    headroom_queries: list[FleetQuery] = field(init=False)
    headroom_ids: tuple[str, str, str] = field(init=False)  # the profile's headroom series: used, running, waiting
    limits: dict[str, Limit] = field(init=False)
    rules: RuleBook = field(init=False)  # the operator's SLO rules, read again every so often
    _today: Window = field(init=False)
    _yesterday: Window = field(default_factory=lambda: Window(BASELINE_STEP_SECONDS), init=False)
    _models: dict[str, tuple[tuple[float, ...], SloModel]] = field(default_factory=dict, init=False)
    _baselines: tuple[int, dict[str, dict[str, HourLevel]]] = field(default=(-1, {}), init=False)

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
        # The config file's SLO wins only where the operator wrote it there; else each instance's
        # comes from the rules that cover it (`_slos`), and this one is the default.
        explicit = "slo_ttft_seconds" in file_config.model_fields_set
        self.rules = RuleBook(
            self.profile,
            self.settings.scan_rules_refresh_seconds,
            explicit_ttft=file_config.slo_ttft_seconds if explicit else None,
            default_ttft=file_config.slo_ttft_seconds,
        )
        if TTFT_SIGNAL in specs:
            spec = specs[TTFT_SIGNAL]
            source = CONFIG_SOURCE if explicit else DEFAULT_SOURCE
            self.limits[TTFT_SIGNAL] = Limit(
                TTFT_SIGNAL,
                TTFT_SLO_TITLE,
                spec.unit,
                ">",
                file_config.slo_ttft_seconds,
                latest=True,
                slo_source=source,
            )
        built = [fleet_query(specs[signal], params) for signal in self.limits]
        self.queries = [query for query in built if query is not None]
        roles = {spec.role: spec.id for spec in self.profile.headroom}
        self.headroom_ids = (roles.get("used", ""), roles.get("running", ""), roles.get("waiting", ""))
        room = [fleet_query(spec, params) for spec in self.profile.headroom]
        self.headroom_queries = [query for query in room if query is not None]
        self._today = Window(step_for(self.settings))

    def _most(self, targets: int) -> float:
        """Steps of never-read history one read may take: the budget's points over the fleet's size."""
        if self.whole_reads:
            return math.inf
        return max(1, self.settings.scan_fill_points // targets)

    def _read(self, targets: list[ServingInstance], joined: Machines, end: float) -> set[str]:
        """Both windows brought up to `end`: their new steps, and the newest span of what some
        instance has never read, this hour's before yesterday's, within the budget; returns the
        targets still warming. This hour holds the signals and the headroom series; yesterday's,
        whose medians are the signals' baselines, the signals only."""
        instances = [serving.instance for serving in targets]
        new_steps = RE_READ_STEPS + math.ceil(self.settings.scan_interval_seconds / self._today.step)
        # Each window, its queries, the span it needs, the steps it reads again, and the steps of
        # its usual read (never cut short by the budget: that is for history never read).
        windows = [
            (
                self._today,
                self.queries + self.headroom_queries,
                end - self.settings.scan_history_minutes * 60,
                end,
                RE_READ_STEPS,
                new_steps,
            ),
            (self._yesterday, self.queries, *baseline_window(end), 0, BASELINE_MOVE_STEPS),
        ]
        most = self._most(len(targets))
        plans = []
        for window, queries, start, stop, again, usual in windows:
            window.keep(start, stop)
            plans.append((window, queries, start, stop, window.fresh(stop, max(most, usual), again)))
        reads = [
            (window, queries, (max(start, fresh[0]), fresh[1])) for window, queries, start, _, fresh in plans if fresh
        ]
        left = most  # the budget is shared: this hour's history first, then yesterday's
        for window, queries, start, stop, fresh in plans:
            fill = window.fill(instances, start, fresh[0] - window.step if fresh else stop, left) if left else None
            if fill is not None:
                reads.append((window, queries, fill))
                left -= (fill[1] - fill[0]) // window.step + 1
        asked = [(queries, _utc(first), _utc(last), window.step) for window, queries, (first, last) in reads]
        for (window, _, span), found in zip(reads, fetch(self.source, targets, joined, asked), strict=True):
            window.splice(found, span, instances)
        return {i for i in instances if any(window.lacks(i, start, stop) for window, _, start, stop, _ in plans)}

    def _baseline(self) -> dict[str, dict[str, HourLevel]]:
        """Yesterday's levels, computed again only when its window changed (every 5 minutes)."""
        if self._baselines[0] != self._yesterday.changes:
            self._baselines = (self._yesterday.changes, self._yesterday.levels())
        return self._baselines[1]

    def scan(self, at: datetime) -> ScanReport:
        started_at = time.perf_counter()
        before = self.source.queries
        self.rules.refresh(self.source)
        joined = machines(self.source, self.profile, at)
        targets = discover(self.source, self.profile, at, joined, self.rules.labels())
        assessments: dict[str, Assessment] = {}
        warming: set[str] = set()
        slos = self._slos(targets)
        if targets:
            step = self._today.step
            end = at.timestamp() // step * step
            warming = self._read(targets, joined, end)
            instances = [serving.instance for serving in targets]
            series = self._today.of(instances)
            yesterday = self._baseline()
            assessments = self._assess(targets, series, yesterday, warming, at.timestamp(), step, slos)
            assessments = with_starts(assessments, started(self.source, at))
        return ScanReport(
            at=at,
            targets=targets,
            assessments=assessments,
            queries=self.source.queries - before,
            seconds=time.perf_counter() - started_at,
            warming=warming,
            slos={
                instance: Slo(limit.threshold, limit.slo_source or DEFAULT_SOURCE) for instance, limit in slos.items()
            },
        )

    def _slos(self, targets: list[ServingInstance]) -> dict[str, Limit]:
        """Each instance's TTFT limit: its own SLO and where it came from (one Limit per distinct SLO)."""
        base = self.limits.get(TTFT_SIGNAL)
        if base is None:
            return {}
        limits: dict[Slo, Limit] = {}
        found: dict[str, Limit] = {}
        for serving in targets:
            slo = self.rules.ttft_slo(serving)
            if slo not in limits:
                limits[slo] = replace(base, threshold=slo.seconds, slo_source=slo.source)
            found[serving.instance] = limits[slo]
        return found

    def _model(self, instance: str, depths: list[float], fleet: SloModel) -> SloModel:
        """The instance's SLO model; its own is refitted only when its violation depths changed."""
        if len(depths) < MIN_VIOLATIONS:
            return model_for(depths, fleet)
        key = tuple(depths)
        cached = self._models.get(instance)
        if cached is None or cached[0] != key:
            cached = self._models[instance] = (key, model_for(depths, fleet))
        return cached[1]

    def _assess(
        self,
        targets: list[ServingInstance],
        series: dict[str, dict[str, SignalSeries]],
        yesterday: dict[str, dict[str, HourLevel]],
        warming: set[str],
        now: float,
        step: int,
        slos: dict[str, Limit],
    ) -> dict[str, Assessment]:
        trend_seconds = self.settings.scan_trend_minutes * 60
        horizon = self.settings.scan_horizon_minutes * 60
        own: dict[str, list[float]] = {}
        for serving in targets:
            depth = series.get(DEPTH_SIGNAL, {}).get(serving.instance)
            ttft = series.get(TTFT_SIGNAL, {}).get(serving.instance)
            limit = slos.get(serving.instance)
            if depth and ttft and limit:  # the depths at which TTFT broke this instance's own SLO
                own[serving.instance] = violation_depths(depth.samples, ttft.samples, limit.threshold, step)
        self._models = {instance: kept for instance, kept in self._models.items() if instance in own}
        fleet = slo_model([depth for depths in own.values() for depth in depths], "fleet")
        by_signal = {
            signal: forecast_fleet(
                limit,
                series.get(signal, {}),
                yesterday.get(signal, {}),
                now,
                trend_seconds,
                slos if signal == TTFT_SIGNAL else None,
            )
            for signal, limit in self.limits.items()
        }
        rooms = headrooms(
            targets,
            series,
            self.headroom_ids,
            now,
            self.settings.scan_saturation_trend_minutes * 60,
            self.settings.scan_saturation_horizon_minutes * 60,
        )
        assessments: dict[str, Assessment] = {}
        for serving in targets:
            forecasts = {
                signal: found[serving.instance] for signal, found in by_signal.items() if serving.instance in found
            }
            model = self._model(serving.instance, own.get(serving.instance, []), fleet)
            slo = slo_forecast(model, forecasts.get(DEPTH_SIGNAL), horizon)
            assessments[serving.instance] = Assessment(
                at=now,
                signals=list(forecasts.values()),
                slo=slo,
                warming=serving.instance in warming,
                headroom=rooms.get(serving.instance),
            )
        return assessments
