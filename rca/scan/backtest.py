"""Replay the scan over history: which warnings it would have raised, how far ahead of the TTFT
SLO breach, which breaches it missed and which warnings no breach followed. The breach is the
raw one: TTFT p95 (the scan's own TTFT signal, over 5 minutes) first beyond the instance's SLO,
not an alert's `for:`, which would add its own delay to every lead.

The scan runs at each step of [start, end] exactly as it runs live (same queries, forecasts and
states, `at` set in the past), and nothing is written here: `rca.scan.stored` keeps the warnings
as incidents when asked (`rca backtest --store`). The SLO condition is the scan's own TTFT
signal beyond the instance's own SLO over the same history (the one the scan judges it against:
the config file's, else the operator's rule that covers it as the rules read now, else 2 s;
`rca.scan.slo_rules`); a breach starts when it holds after at least RCA_SCAN_CALM_SECONDS
without it. An operator tunes horizons and thresholds on their own
fleet with this before turning warnings on (`rca backtest`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta

from rca.config import Settings
from rca.scan.fleet import FleetSource, ServingInstance
from rca.scan.scanner import Scanner
from rca.scan.service import policy_of
from rca.scan.states import Assessment, Policy, ScanState, TargetMemory, Transition, advance
from rca.signals.slo import TTFT_SIGNAL


@dataclass
class Episode:
    """One instance's warning, from when to when it cleared (unix seconds; no end: still warning),
    with what storing it needs: the instance, the assessment it warned on (its summary) and its
    transitions, from leaving `ok` (or from `cleared`, warning again) to `ok` or the next warning."""

    instance: str
    start: float
    end: float | None = None
    reason: str = ""
    serving: ServingInstance | None = field(default=None, repr=False, compare=False)
    assessment: Assessment | None = field(default=None, repr=False, compare=False)
    transitions: list[Transition] = field(default_factory=list, repr=False, compare=False)

    def as_dict(self) -> dict[str, object]:
        return {"instance": self.instance, "start": self.start, "end": self.end, "reason": self.reason}


@dataclass
class Verdict:
    """A breach and the warning before it (lead > 0: the warning came first)."""

    instance: str
    breach_at: float
    warned_at: float | None
    lead_seconds: float | None


@dataclass
class BacktestResult:
    start: float
    end: float
    scans: int
    targets: int
    warnings: list[Episode] = field(default_factory=list)
    breaches: list[Verdict] = field(default_factory=list)
    false_warnings: list[Episode] = field(default_factory=list)

    @property
    def missed(self) -> list[Verdict]:
        return [b for b in self.breaches if b.warned_at is None]

    @property
    def warned_before(self) -> list[Verdict]:
        """Breaches a warning came strictly before (a warning at the breach's own scan led nothing)."""
        return [b for b in self.breaches if b.lead_seconds is not None and b.lead_seconds > 0]

    def lead_quantile(self, q: float) -> float | None:
        """The q-quantile of the lead over every breach (`lead_quantile`)."""
        return lead_quantile([b.lead_seconds for b in self.breaches], q)

    @property
    def false_per_week(self) -> float | None:
        """False warnings per 7 instance-days of the replay."""
        days = self.targets * (self.end - self.start) / 86400
        return len(self.false_warnings) / days * 7 if days > 0 else None

    def as_dict(self) -> dict[str, object]:
        leads = sorted(b.lead_seconds for b in self.breaches if b.lead_seconds is not None)
        return {
            "start": datetime.fromtimestamp(self.start, UTC).isoformat(),
            "end": datetime.fromtimestamp(self.end, UTC).isoformat(),
            "scans": self.scans,
            "targets": self.targets,
            "warnings": [w.as_dict() for w in self.warnings],
            "breaches": [asdict(b) for b in self.breaches],
            "warned_before": len(self.warned_before),
            "missed": len(self.missed),
            "lead_p50_seconds": self.lead_quantile(0.5),
            "lead_p10_seconds": self.lead_quantile(0.1),
            "false_warnings": [w.as_dict() for w in self.false_warnings],
            "false_per_7_target_days": self.false_per_week,
            "median_lead_seconds": leads[len(leads) // 2] if leads else None,
        }


def lead_quantile(leads: list[float | None], q: float) -> float | None:
    """The q-quantile (lower) of these leads, a missed breach (None) counting as minus infinity
    (None when the quantile falls on one): a percentile over the warned ones only would flatter."""
    ordered = sorted(lead if lead is not None else -math.inf for lead in leads)
    if not ordered:
        return None
    value = ordered[int(q * (len(ordered) - 1))]
    return value if math.isfinite(value) else None


def _ttft_breached(assessment: Assessment) -> bool:
    return any(s.limit.signal == TTFT_SIGNAL and s.breached for s in assessment.signals)


@dataclass(frozen=True)
class Frame:
    """One scan of the history: its time, every instance's assessment and the targets by instance."""

    at: float
    assessments: dict[str, Assessment]
    targets: dict[str, ServingInstance] = field(default_factory=dict)


def scan_frames(
    settings: Settings,
    source: FleetSource,
    start: datetime,
    end: datetime,
    progress: Callable[[int], None] | None = None,
) -> list[Frame]:
    """The scan at every RCA_SCAN_INTERVAL_SECONDS of [start, end]: the slow half of a backtest
    (Prometheus), kept apart so that a policy can be replayed over the same scans (`replay`).
    Its first scan reads the whole windows at once (no instance warms): a replay has no scan
    interval to keep to."""
    scanner = Scanner(settings, source, whole_reads=True)
    step = timedelta(seconds=settings.scan_interval_seconds)
    frames: list[Frame] = []
    at = start
    while at <= end:
        report = scanner.scan(at)
        frames.append(Frame(at.timestamp(), report.assessments, {t.instance: t for t in report.targets}))
        if progress:
            progress(len(frames))
        at += step
    return frames


def replay(frames: list[Frame], policy: Policy, only: str | None = None) -> BacktestResult:
    """The states, warnings and breaches of these scans under `policy`; pure and fast (no
    Prometheus), for tuning. `only` keeps one instance."""
    memories: dict[str, TargetMemory] = {}
    open_warning: dict[str, Episode] = {}
    episode_of: dict[str, Episode] = {}  # while warning or cleared: the episode its transitions go to
    lead_in: dict[str, list[Transition]] = {}  # ok -> watch, for the warning that may follow
    last_breached: dict[str, float] = {}
    start = frames[0].at if frames else 0.0
    result = BacktestResult(start=start, end=frames[-1].at if frames else start, scans=len(frames), targets=0)
    seen: set[str] = set()
    for frame in frames:
        for instance, assessment in frame.assessments.items():
            if only and instance != only:
                continue
            seen.add(instance)
            now = assessment.at
            memory, transition = advance(memories.get(instance, TargetMemory()), assessment, policy)
            memories[instance] = memory
            if transition and transition.after == ScanState.WARNING:
                moves = [*lead_in.pop(instance, []), transition]
                episode = Episode(
                    instance, now, None, transition.reason, frame.targets.get(instance), assessment, moves
                )
                open_warning[instance] = episode_of[instance] = episode
                result.warnings.append(episode)
            elif transition and instance in episode_of:
                episode_of[instance].transitions.append(transition)
                if transition.after == ScanState.CLEARED and instance in open_warning:
                    open_warning.pop(instance).end = now
                elif transition.after == ScanState.OK:
                    del episode_of[instance]
            elif transition:
                lead_in[instance] = [transition] if transition.after == ScanState.WATCH else []
            if _ttft_breached(assessment):
                previous = last_breached.get(instance)
                if previous is None or now - previous > policy.calm_seconds:
                    warning = open_warning.get(instance)
                    warned = warning.start if warning else None
                    lead = now - warned if warned is not None else None
                    result.breaches.append(Verdict(instance, now, warned, lead))
                last_breached[instance] = now
    result.targets = len(seen)
    breached_during = {(b.instance, b.warned_at) for b in result.breaches if b.warned_at is not None}
    result.false_warnings = [w for w in result.warnings if (w.instance, w.start) not in breached_during]
    return result


def backtest(
    settings: Settings,
    source: FleetSource,
    start: datetime,
    end: datetime,
    only: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> BacktestResult:
    """Scan every RCA_SCAN_INTERVAL_SECONDS of [start, end]; `only` keeps one instance."""
    result = replay(scan_frames(settings, source, start, end, progress), policy_of(settings), only)
    result.start, result.end = start.timestamp(), end.timestamp()
    return result
