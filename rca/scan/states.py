"""An instance's early-warning state, moved by each scan's assessment with hysteresis.

    ok --(a signal forecast to cross within the horizon, degrading, or the engine's batch
          likely full within it)--> watch
    watch --(an early signal degrading or the batch filling for `sustain` scans in a row, TTFT
             beyond its SLO for `slo_sustain` scans, or P(SLO breach) >= `slo_probability` with
             a crossing forecast and the queue deeper than its own normal)--> warning
    watch --(calm for `calm_seconds`)--> ok
    warning --(calm for `calm_seconds`)--> cleared
    cleared --(degrading for `sustain` scans again)--> warning (the same incident, reopened)
    cleared --(calm for another `calm_seconds`)--> ok

"Degrading" is a signal beyond its threshold and away from the instance's own normal level
(`SignalForecast.degrading`); "filling" is the engine's batch forecast full within the horizon
with P >= `saturation_probability`, above its own normal level (`Headroom.filling`,
`rca.scan.saturation`): the lead before a queue forms. The streak counts the scans the short
trend window forecasts it full (`Headroom.filling_now`); the long window, which says the fill is
no burst, must agree at the scan that warns. So its lag and the streak overlap instead of adding
up: the long window comes round a scan or two after the short one, by when the short one has
held for its streak. "Calm" is none of them, no signal forecast
to cross and the batch not even likely (P >= WATCH_PROBABILITY) to fill.

TTFT against its SLO is not held as long as the early signals: its p95 is already a quantile
over five minutes of requests, so once it is beyond the SLO the users feel it, and a warning
that waited as long as the SLA alert's own `for:` would tell nothing new (`slo_sustain`, 1 scan
by default). The early signals and the headroom of an instance whose engine started less than
`warmup_seconds` ago are held (`Assessment.started_at`): a restart empties the prefix cache, the
queue and the batch, and its rates and trend window straddle two processes, so a cold cache or a
batch filling again after a deploy is not a degradation; its TTFT still counts. So are those of a
instance still warming (`Assessment.warming`: the scanner has not yet read its whole hour and its
baseline, `rca.scan.window`): without them every level would look new. The early signals warn on
their own, without waiting for TTFT to move; only a signal whose own normal level is already
beyond its threshold counts once TTFT feels it (`Assessment.ttft_felt`). Every
leaving of a state waits for a streak or a calm period, so an instance hovering at a threshold does
not flap, and an instance has at most one warning open (the scan stores it with its incident).
Pure: no clock, no database; `rca.scan.warnings` stores what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from rca.scan.forecast import SignalForecast, SloForecast
from rca.scan.saturation import Headroom
from rca.signals.findings import COMPARE
from rca.signals.slo import DEPTH_SIGNAL, TTFT_SIGNAL

# Of TTFT's headroom to its SLO, the share a signal living beyond its threshold needs TTFT to have
# taken: half. A busy host's p95 wanders by a third of it with its queue (the bench's busy host:
# 0.9 to 1.4 s against 2 s, its queue 4 to 7), a fault's moves on through half.
TTFT_FELT_SHARE = 0.5
WATCH_PROBABILITY = 0.5  # P(the batch full within the horizon) that is not calm: `watch`, not a warning


class ScanState(StrEnum):
    OK = "ok"
    WATCH = "watch"
    WARNING = "warning"
    CLEARED = "cleared"


@dataclass(frozen=True)
class Policy:
    horizon_seconds: float = 600.0
    sustain: int = 3
    calm_seconds: float = 300.0
    slo_probability: float = 0.8
    slo_sustain: int = 1  # scans TTFT must stay beyond its SLO (its p95 is already over 5 minutes)
    warmup_seconds: float = 900.0  # early signals of an instance started this recently are held
    saturation_probability: float = 0.7  # P(the batch full within the horizon) that counts as filling


@dataclass(frozen=True)
class Assessment:
    """Everything one scan found about one instance."""

    at: float
    signals: list[SignalForecast]
    slo: SloForecast | None = None
    started_at: float | None = None  # its engine process's start, when known (`rca.scan.restarts`)
    warming: bool = False  # the scanner's windows still lack some of its history
    headroom: Headroom | None = None  # its engine's batch and KV room (`rca.scan.saturation`)

    def restarted(self, policy: Policy) -> bool:
        """Its engine started less than the policy's warm-up ago."""
        return self.started_at is not None and self.at - self.started_at < policy.warmup_seconds

    def held(self, policy: Policy) -> Assessment:
        """What the policy judges: only TTFT while the instance warms up after a restart, or while
        the scanner has not read its history yet."""
        if not (self.warming or self.restarted(policy)):
            return self
        return replace(self, signals=[s for s in self.signals if s.limit.signal == TTFT_SIGNAL], headroom=None)

    @property
    def ttft_breached(self) -> bool:
        """TTFT beyond its SLO and away from its own normal level."""
        return any(s.limit.signal == TTFT_SIGNAL for s in self.degrading)

    @property
    def early_degrading(self) -> list[SignalForecast]:
        """The early signals degrading, each on its own, without waiting for TTFT to move: the
        article's point is that they move first. Except a signal whose own normal level is
        already beyond its threshold (a host that lives there: the threshold tells nothing about
        it, and a small departure of a busy host, its 10-minute queue median between 5 and 6, is
        noise) counts only once TTFT feels it (`ttft_felt`)."""
        felt = self.ttft_felt
        return [s for s in self.degrading if s.limit.signal != TTFT_SIGNAL and (felt or not _lives_beyond(s))]

    @property
    def ttft_felt(self) -> bool:
        """Whether TTFT has risen from its own normal by TTFT_FELT_SHARE of its headroom to the
        SLO, and beyond where its own normal life reaches (this hour, and the same hour
        yesterday): True without TTFT to tell. The SLO sets how much of a rise matters; a busy
        host whose TTFT wandered as high yesterday is busy as usual."""
        ttft = next((s for s in self.signals if s.limit.signal == TTFT_SIGNAL), None)
        if ttft is None:
            return True
        if not ttft.departed or (ttft.normal_edge is not None and ttft.current <= ttft.normal_edge):
            return False
        if ttft.baseline is None or ttft.baseline >= ttft.limit.threshold:
            return True
        return ttft.current - ttft.baseline >= TTFT_FELT_SHARE * (ttft.limit.threshold - ttft.baseline)

    @property
    def degrading(self) -> list[SignalForecast]:
        return [s for s in self.signals if s.degrading]

    def crossing(self, horizon_seconds: float) -> list[SignalForecast]:
        """Signals forecast to cross their threshold within the horizon, soonest first."""
        soon = [s for s in self.signals if s.cross_in_seconds is not None and s.cross_in_seconds <= horizon_seconds]
        return sorted(soon, key=lambda s: s.cross_in_seconds or 0.0)

    def filling(self, policy: Policy) -> Headroom | None:
        """Its engine's batch, when forecast full within the horizon with the policy's probability
        under both trend windows: what warns."""
        room = self.headroom
        return room if room is not None and room.filling(policy.saturation_probability) else None

    def filling_now(self, policy: Policy) -> bool:
        """Its engine's batch forecast full within the horizon under the short window: what the
        streak counts, so that the long window's lag and the streak's overlap."""
        room = self.headroom
        return room is not None and room.filling_now(policy.saturation_probability)

    def calm(self, horizon_seconds: float) -> bool:
        room = self.headroom
        return (
            not self.degrading
            and not self.crossing(horizon_seconds)
            and not (room is not None and room.filling(WATCH_PROBABILITY))
        )

    def slo_likely(self, policy: Policy) -> bool:
        """A TTFT SLO breach forecast soon with high probability, at a queue deeper than the
        instance's own normal: the model's probability at the depth a host always runs at says
        how the model reads that host (a busy one lives at a depth the fleet breaks at), not that
        anything is coming."""
        probability = self.slo.probability if self.slo else None
        depth = next((s for s in self.signals if s.limit.signal == DEPTH_SIGNAL), None)
        return (
            probability is not None
            and probability >= policy.slo_probability
            and depth is not None
            and depth.departed
            and bool(self.degrading or self.crossing(policy.horizon_seconds))
        )


def _lives_beyond(signal: SignalForecast) -> bool:
    """Its own normal life reaches beyond its threshold (a busy host's CPU, say, a queue that
    wanders between 2 and 7 around a threshold of 4.7, or a level it has held all this hour):
    crossing it then tells nothing on its own."""
    edge = signal.normal_edge if signal.normal_edge is not None else signal.baseline
    return edge is not None and COMPARE[signal.limit.comparison](edge, signal.limit.threshold)


@dataclass(frozen=True)
class TargetMemory:
    """What the scan remembers of an instance between scans."""

    state: ScanState = ScanState.OK
    since: float | None = None  # when it entered `state`
    streak: int = 0  # scans in a row with a degrading early signal or the batch filling now
    slo_streak: int = 0  # scans in a row with TTFT beyond its SLO
    calm_since: float | None = None  # first scan of the current calm run
    incident_id: int | None = None  # the warning's incident, kept while warning or cleared


@dataclass(frozen=True)
class Transition:
    """A change of state, with the reason in words and the figures behind it."""

    before: ScanState
    after: ScanState
    at: float
    reason: str
    figures: dict[str, object] = field(default_factory=dict)


def _figures(assessment: Assessment) -> dict[str, object]:
    slo = assessment.slo
    return {
        "signals": [s.figures() for s in assessment.signals],
        "slo_probability": slo.probability if slo else None,
        "slo_depth_at_horizon": slo.depth_at_horizon if slo else None,
        "slo_model": slo.model if slo else None,
        "started_at": assessment.started_at,
        "warming": assessment.warming,
        "headroom": assessment.headroom.figures() if assessment.headroom else None,
    }


def _names(signals: list[SignalForecast]) -> str:
    return ", ".join(s.limit.signal for s in signals)


def _reason_to_warn(assessment: Assessment, memory: TargetMemory, policy: Policy) -> str | None:
    if assessment.ttft_breached and memory.slo_streak >= policy.slo_sustain:
        ttft = next(s for s in assessment.degrading if s.limit.signal == TTFT_SIGNAL)
        also = assessment.early_degrading
        return (
            f"TTFT p95 {ttft.current:.2f} s beyond its SLO ({ttft.limit.threshold:g} s) for {memory.slo_streak} scans"
            + (f", with {_names(also)} beyond threshold" if also else "")
        )
    degrading = assessment.early_degrading
    room = assessment.filling(policy)
    if (degrading or room) and memory.streak >= policy.sustain:
        said = [f"{_names(degrading)} beyond threshold and own baseline"] if degrading else []
        said += [room.forecast()] if room else []
        return f"{'; '.join(said)} for {memory.streak} scans"
    if assessment.slo_likely(policy):
        probability = assessment.slo.probability if assessment.slo else None
        return f"TTFT SLO breach forecast with p = {probability:.2f}"
    return None


def advance(memory: TargetMemory, assessment: Assessment, policy: Policy) -> tuple[TargetMemory, Transition | None]:
    """The instance's memory after this scan, and the transition it made, if any."""
    assessment = assessment.held(policy)
    now = assessment.at
    calm = assessment.calm(policy.horizon_seconds)
    memory = replace(
        memory,
        streak=memory.streak + 1 if assessment.early_degrading or assessment.filling_now(policy) else 0,
        slo_streak=memory.slo_streak + 1 if assessment.ttft_breached else 0,
        calm_since=(memory.calm_since or now) if calm else None,
    )
    calm_for = now - memory.calm_since if memory.calm_since is not None else 0.0

    def move(after: ScanState, reason: str) -> tuple[TargetMemory, Transition]:
        keep = after in (ScanState.WARNING, ScanState.CLEARED)
        moved = replace(memory, state=after, since=now, incident_id=memory.incident_id if keep else None)
        return moved, Transition(memory.state, after, now, reason, _figures(assessment))

    state = memory.state
    if state in (ScanState.OK, ScanState.WATCH, ScanState.CLEARED):
        reason = _reason_to_warn(assessment, memory, policy)
        if reason:
            return move(ScanState.WARNING, reason)
    if state == ScanState.OK and not calm:
        crossing = assessment.crossing(policy.horizon_seconds)
        if crossing:
            first = crossing[0]
            return move(ScanState.WATCH, f"{first.limit.signal} forecast to cross in {first.cross_in_seconds:.0f} s")
        if assessment.degrading:
            return move(ScanState.WATCH, f"{_names(assessment.degrading)} beyond threshold and own baseline")
        room = assessment.headroom
        return move(ScanState.WATCH, room.forecast() if room else "approaching a threshold")
    if state == ScanState.WATCH and calm and calm_for >= policy.calm_seconds:
        return move(ScanState.OK, f"calm for {calm_for:.0f} s")
    if state == ScanState.WARNING and calm and calm_for >= policy.calm_seconds:
        return move(ScanState.CLEARED, f"calm for {calm_for:.0f} s")
    if state == ScanState.CLEARED and calm and memory.since is not None and now - memory.since >= policy.calm_seconds:
        return move(ScanState.OK, f"calm for {calm_for:.0f} s after the warning cleared")
    return memory, None
