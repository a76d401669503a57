"""The series behind each finding, downsampled to be kept with the investigation
(rca.domain.series), so the incident page can draw what the finding judged."""

from __future__ import annotations

from datetime import datetime, timedelta

from rca.collect.prometheus import Collection, SeriesResult
from rca.domain.evidence import Finding
from rca.domain.series import MAX_SERIES, EvidenceSeries, bounded_labels, downsample
from rca.signals.findings import BASELINE_GUARD_MINUTES


def _judged_series(result: SeriesResult, finding: Finding) -> tuple[dict[str, str], list[tuple[float, float]]] | None:
    """The series the finding's verdict came from (the worst one, whose labels it names)."""
    for labels, samples in result.series:
        if (labels or None) == finding.series_labels:
            return labels, samples
    return result.series[0] if result.series else None


def baseline_end(finding: Finding, alert_start: datetime) -> datetime:
    """Where the finding's baseline period ends: before the breach for an absolute threshold
    that was crossed, else `BASELINE_GUARD_MINUTES` before the alert (rca.signals.findings)."""
    guard = alert_start - timedelta(minutes=BASELINE_GUARD_MINUTES)
    if finding.breached and finding.onset is not None and finding.baseline is not None:
        return min(guard, finding.onset)
    return guard


def evidence_series(collection: Collection, findings: list[Finding], alert_start: datetime) -> list[EvidenceSeries]:
    """One downsampled series per finding that had data, breached findings first, at most `MAX_SERIES`."""
    window = collection.window
    by_key = {result.spec.id: result for result in collection.results}
    ordered = sorted(findings, key=lambda f: not f.breached)
    kept: list[EvidenceSeries] = []
    for finding in ordered:
        result = by_key.get(finding.key)
        judged = _judged_series(result, finding) if result else None
        if judged is None:
            continue
        labels, samples = judged
        width, values = downsample(
            samples, window.start.timestamp(), window.end.timestamp(), window.step_seconds, finding.comparison
        )
        kept.append(
            EvidenceSeries(
                key=finding.key,
                labels=bounded_labels(labels),
                start=window.start,
                step_seconds=width,
                values=values,
                baseline_end=baseline_end(finding, alert_start),
            )
        )
        if len(kept) == MAX_SERIES:
            break
    return kept
