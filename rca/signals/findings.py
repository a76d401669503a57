"""Judge each signal's data: current value, pre-onset baseline, breach and onset.

The `Finding` (rca.domain.evidence) is the unit of evidence everywhere (API, database, ranking,
prompts). Its `key` is the signal id, so hypotheses can cite it and a redelivered investigation
cannot store it twice.
"""

from __future__ import annotations

import operator
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypedDict

from rca.collect.profile import SignalSpec
from rca.collect.prometheus import Collection, Samples, SeriesResult
from rca.domain.evidence import Finding
from rca.domain.status import FindingStatus
from rca.domain.values import format_value

CURRENT_MINUTES = 10  # "current" = median of the last ten minutes (or since the alert started)
MIN_CURRENT_MINUTES = 2
BASELINE_GUARD_MINUTES = 30  # the baseline ends this long before the alert started
ONSET_GAP_SAMPLES = 2  # a breach run survives this many healthy samples in a row
DEPARTURE_SIGMAS = 3.0  # a series has left its normal range beyond this many robust deviations
MAD_TO_SIGMA = 1.4826  # median absolute deviation to a normal distribution's standard deviation
MIN_SPREAD = 0.01  # the normal range is at least 1 % of its centre either side (a flat series)
MIN_NORMAL_SAMPLES = 10
DEPARTURE_LOOKBACK_MINUTES = 15

COMPARE: dict[str, Callable[[float, float], bool]] = {">": operator.gt, "<": operator.lt}


class FindingBase(TypedDict):
    """The fields of a `Finding` that name the check (not its verdict), shared by its outcomes."""

    key: str
    kind: str
    title: str
    comparison: str
    unit: str
    query: str | None
    source: str | None
    threshold: float | None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _typical(spec: SignalSpec, values: list[float]) -> float | None:
    """The series' usual value: the median of a measure or level, the most frequent of codes (the
    latest of those tied), never a value between two codes."""
    if spec.reading != "code" or not values:
        return _median(values)
    common = statistics.multimode(values)
    return max(common, key=lambda code: max(i for i, v in enumerate(values) if v == code))


def _current(spec: SignalSpec, recent: list[float]) -> float | None:
    """Where the series stands now: a measure's median over the current minutes; a level's or a
    code's latest sample (a clock that stepped to 990 MHz reads 990, not the minutes' median)."""
    if not recent:
        return None
    return _median(recent) if spec.reading == "measure" else recent[-1]


def _limit(spec: SignalSpec, baseline: float | None) -> float | None:
    """The value beyond which a sample counts as breached."""
    if spec.threshold is not None:
        return spec.threshold
    if baseline is None or spec.change is None:
        return None
    if spec.comparison == ">":
        return max(baseline * (1 + spec.change), baseline + spec.min_delta)
    return min(baseline * (1 - spec.change), baseline - spec.min_delta)


def breach_onset(samples: Samples, beyond: Callable[[float], bool]) -> float | None:
    """Start of the breach run that reaches the end of the window, tolerating short gaps."""
    onset, gap = None, 0
    for ts, value in reversed(samples):
        if beyond(value):
            onset, gap = ts, 0
        else:
            gap += 1
            if gap > ONSET_GAP_SAMPLES:
                break
    return onset


@dataclass
class _SeriesVerdict:
    labels: dict[str, str]
    current: float
    baseline: float | None
    limit: float | None
    breached: bool
    onset: float | None
    recent: list[float]  # the samples of the current minutes, oldest first


def current_since(end: float, alert_start: float) -> float:
    """Where "now" begins: the last CURRENT_MINUTES, or only the time since the alert started
    when that is shorter (but at least MIN_CURRENT_MINUTES), so that a fault caught a few minutes
    in is not outvoted by the healthy minutes before it."""
    floor = end - MIN_CURRENT_MINUTES * 60
    return max(end - CURRENT_MINUTES * 60, min(alert_start, floor))


def _judge_series(
    spec: SignalSpec, labels: dict[str, str], samples: Samples, end: float, alert_start: float
) -> _SeriesVerdict | None:
    since = current_since(end, alert_start)
    recent = [v for ts, v in samples if ts >= since]
    current = _current(spec, recent)
    if current is None:
        return None
    guard = alert_start - BASELINE_GUARD_MINUTES * 60
    baseline = _typical(spec, [v for ts, v in samples if ts < guard])
    limit = _limit(spec, baseline)
    compare = COMPARE[spec.comparison]
    breached = limit is not None and compare(current, limit)
    onset = breach_onset(samples, lambda v: compare(v, limit)) if breached and limit is not None else None
    if breached and onset is not None and limit is not None and spec.threshold is not None:
        # For absolute thresholds the baseline is what the series looked like before it broke;
        # a series that starts broken has none (the pre-guard samples are part of the breach).
        baseline = _typical(spec, [v for ts, v in samples if ts < onset])
        if baseline is not None and compare(baseline, limit):
            # Mostly beyond the limit before the onset too: a noisy series that dipped under its
            # limit for a moment has no healthy baseline; it is broken all along, not newly.
            baseline = None
    if onset is not None and baseline is not None:
        normal = [v for ts, v in samples if ts < min(guard, onset)]
        onset = departure(samples, onset, normal, spec.comparison)
    return _SeriesVerdict(labels, current, baseline, limit, breached, onset, recent)


def departure(samples: Samples, onset: float, normal: list[float], comparison: str) -> float:
    """When the series left its normal range on the way to the breach that began at `onset`:
    the start of the run, back from the onset, beyond DEPARTURE_SIGMAS robust deviations of the
    `normal` samples (a scaled median absolute deviation). A threshold crossing dates a change by
    how far the threshold sits from normal; where the series started to move dates it by the
    change itself, so that what moved first can be told even between signals whose thresholds
    differ in strictness. A move is looked for at most DEPARTURE_LOOKBACK_MINUTES before the
    crossing: a series that drifted for longer is dated from there, so that a slow drift does not
    pass for the first mover of a fault that broke in minutes."""
    if len(normal) < MIN_NORMAL_SAMPLES:
        return onset
    center = statistics.median(normal)
    spread = max(MAD_TO_SIGMA * statistics.median(abs(v - center) for v in normal), MIN_SPREAD * abs(center), 1e-12)
    edge = center + DEPARTURE_SIGMAS * spread if comparison == ">" else center - DEPARTURE_SIGMAS * spread
    earliest = onset - DEPARTURE_LOOKBACK_MINUTES * 60
    run = [(ts, v) for ts, v in samples if earliest <= ts <= onset]
    started = breach_onset(run, lambda v: COMPARE[comparison](v, edge))
    return min(onset, started) if started is not None else onset


def _severity(spec: SignalSpec, verdict: _SeriesVerdict) -> float:
    """How far beyond (positive) or within (negative) its limit a series is, for picking the worst."""
    if verdict.limit is None:
        return float("-inf")
    delta = verdict.current - verdict.limit
    return delta if spec.comparison == ">" else -delta


def decoded(spec: SignalSpec, code: float) -> str:
    """A code as the exporter meant it: `0x48 (HwSlowdown, HwThermalSlowdown)` for a bitmask with
    named flags (bits without a name in hex), else the code in its unit."""
    text = format_value(code, spec.unit)
    if not spec.flags:
        return text
    bits = int(code)
    names = [name for bit, name in sorted(spec.flags.items()) if bits & bit]
    unnamed = bits & ~sum(spec.flags)
    if unnamed:
        names.append(f"0x{unnamed:x}")
    return f"{text} ({', '.join(names) or 'none'})"


def _reading_text(spec: SignalSpec, verdict: _SeriesVerdict, since: str) -> str:
    """The value as its reading has it: a measure's median; a level's latest beside the mean of the
    current minutes; a code's latest, decoded, and every other code seen in those minutes."""
    if spec.reading == "level":
        mean = statistics.fmean(verdict.recent)
        return (
            f"{format_value(verdict.current, spec.unit)} now ({format_value(mean, spec.unit)} on average since {since})"
        )
    if spec.reading == "code":
        others = sorted(set(verdict.recent) - {verdict.current})
        seen = f"; also seen since {since}: {', '.join(decoded(spec, c) for c in others)}" if others else ""
        return f"{decoded(spec, verdict.current)} now{seen}"
    return format_value(verdict.current, spec.unit)


def judge(result: SeriesResult, end: datetime, alert_start: datetime) -> Finding:
    """One finding per signal: the worst of its series decides, by the limit of the query that
    answered."""
    spec = result.spec.measured_by(result.source)
    base = FindingBase(
        key=spec.id,
        kind=spec.kind,
        title=spec.title,
        comparison=spec.comparison,
        unit=spec.unit,
        query=result.promql,
        source=result.source,
        threshold=spec.threshold,
    )
    verdicts = [
        v
        for labels, samples in result.series
        if (v := _judge_series(spec, labels, samples, end.timestamp(), alert_start.timestamp()))
    ]
    if result.not_measurable:
        return Finding(
            **base,
            status=FindingStatus.NOT_MEASURABLE,
            breached=False,
            value=None,
            baseline=None,
            onset=None,
            series_labels=None,
            detail=result.error or "not measurable on this stack",
        )
    if not verdicts:
        why = result.error or f"no samples in the last {CURRENT_MINUTES} minutes"
        return Finding(
            **base,
            status=FindingStatus.UNAVAILABLE,
            breached=False,
            value=None,
            baseline=None,
            onset=None,
            series_labels=None,
            detail=f"data unavailable: {why}",
        )
    worst = max(verdicts, key=lambda v: _severity(spec, v))
    onset = datetime.fromtimestamp(worst.onset, UTC) if worst.onset else None
    limit_text = format_value(worst.limit, spec.unit) if worst.limit is not None else "n/a (no baseline)"
    since = f"{datetime.fromtimestamp(current_since(end.timestamp(), alert_start.timestamp()), UTC):%H:%M} UTC"
    baseline_text = decoded(spec, worst.baseline) if worst.baseline is not None else format_value(None, spec.unit)
    detail = (
        f"{spec.title} is {_reading_text(spec, worst, since)} "
        f"(baseline {baseline_text}, limit {spec.comparison} {limit_text})"
    )
    if worst.breached and worst.baseline is None:
        detail += ", beyond its limit for the whole window (no healthy baseline)"
    elif onset:
        detail += f" since {onset:%H:%M} UTC"
    if spec.proxy_note:
        detail += f". {spec.proxy_note}"
    if len(verdicts) > 1:
        detail += f" [worst of {len(verdicts)} series]"
    return Finding(
        **base | {"threshold": worst.limit if spec.threshold is None else spec.threshold},
        status=FindingStatus.BREACHED if worst.breached else FindingStatus.OK,
        breached=worst.breached,
        value=worst.current,
        baseline=worst.baseline,
        onset=onset,
        series_labels=worst.labels or None,
        detail=detail,
    )


def judge_all(collection: Collection, alert_start: datetime) -> list[Finding]:
    return [judge(result, collection.window.end, alert_start) for result in collection.results]
