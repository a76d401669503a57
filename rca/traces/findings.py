"""Trace attribution as findings, the unit of evidence the ranking, the store and the summary read.

`trace_latency_attribution` always exists (it says why when traces could not be read); each
configured operation group adds `trace_<name>` (share of request time, baseline vs incident) and
`trace_error_spans` counts error spans by operation.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rca.config import TracesConfig
from rca.domain.evidence import Finding
from rca.domain.status import FindingStatus
from rca.signals.findings import BASELINE_GUARD_MINUTES
from rca.traces.attribution import (
    OperationStats,
    TraceTiming,
    WindowStats,
    compile_groups,
    matching_groups,
    summarise,
)

SUMMARY_KEY = "trace_latency_attribution"
ERRORS_KEY = "trace_error_spans"
INCIDENT_MINUTES = 15  # the incident window reaches at least this far back from now
ERROR_RATE_FLOOR = 0.05
ERROR_RATE_INCREASE = 0.05
TITLES = {
    SUMMARY_KEY: "Request time by operation (traces)",
    ERRORS_KEY: "Traces with error spans",
    "trace_lora_adapter_load_share": "Share of request time loading LoRA adapters (traces)",
    "trace_prefill_share": "Share of request time in prefill (traces)",
}


def title_for(key: str) -> str:
    return TITLES.get(key) or f"Share of request time in {key.removeprefix('trace_').replace('_', ' ')} (traces)"


def _finding(
    key: str,
    status: FindingStatus,
    detail: str,
    *,
    value: float | None = None,
    baseline: float | None = None,
    threshold: float | None = None,
    unit: str = "ratio",
    onset: datetime | None = None,
    query: str | None = None,
    source: str | None = None,
    series_labels: dict[str, str] | None = None,
) -> Finding:
    return Finding(
        key=key,
        kind="trace",
        title=title_for(key),
        status=status,
        breached=status == FindingStatus.BREACHED,
        value=value,
        baseline=baseline,
        threshold=threshold,
        comparison=">",
        unit=unit,
        onset=onset,
        query=query,
        source=source,
        series_labels=series_labels,
        detail=detail,
    )


def unavailable(
    reason: str, status: FindingStatus = FindingStatus.UNAVAILABLE, source: str | None = None, query: str | None = None
) -> list[Finding]:
    """The single finding that says why there is no trace evidence; the investigation goes on."""
    prefix = "data unavailable" if status == FindingStatus.UNAVAILABLE else "not measurable"
    return [_finding(SUMMARY_KEY, status, f"{prefix}: {reason}", source=source, query=query, unit="s")]


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _sec(micros: float | None) -> str:
    return "n/a" if micros is None else f"{micros / 1e6:.3g} s"


def _at(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1e6, UTC)


class WindowSplit:
    """The sampled traces split by start time: baseline (before alert start - guard), incident
    (from the alert start, or the last INCIDENT_MINUTES when the alert is younger), and the
    build-up in between, which only serves to date the onset."""

    def __init__(self, timings: list[TraceTiming], alert_start: datetime, end: datetime) -> None:
        self.baseline_end_us = int((alert_start.timestamp() - BASELINE_GUARD_MINUTES * 60) * 1e6)
        self.incident_start_us = int(min(alert_start.timestamp(), end.timestamp() - INCIDENT_MINUTES * 60) * 1e6)
        self.all = sorted(timings, key=lambda t: t.start_us)
        self.baseline = summarise([t for t in self.all if t.start_us < self.baseline_end_us])
        self.incident = summarise([t for t in self.all if t.start_us >= self.incident_start_us])


def onset_of(key: str, split: WindowSplit, slices: list[tuple[int, int]], limit: float) -> datetime | None:
    """Start of the run of slices, reaching the newest, whose group share is beyond `limit`
    (one healthy slice in the run is tolerated; slices without traces carry no evidence)."""
    onset, gap = None, 0
    for start, end in reversed(slices):
        inside = [t for t in split.all if start <= t.start_us < end]
        total = sum(t.total_self_us for t in inside)
        if not total:
            continue
        if sum(t.group_us.get(key, 0) for t in inside) / total > limit:
            hits = [t.start_us for t in inside if t.group_us.get(key)]
            onset, gap = _at(min(hits)), 0
        else:
            gap += 1
            if gap > 1:
                break
    return onset


def _matching_ops(key: str, stats: WindowStats, groups: dict[str, list[str]]) -> list[OperationStats]:
    ops = [op for op in stats.operations.values() if key in matching_groups(op.operation, groups)]
    return sorted(ops, key=lambda o: (-o.total_us, o.operation))


def group_finding(
    key: str,
    split: WindowSplit,
    slices: list[tuple[int, int]],
    config: TracesConfig,
    groups: dict[str, list[str]],
    source: str,
    query: str,
) -> Finding:
    incident, baseline = split.incident, split.baseline
    group_query = query + f"  [spans matching {', '.join(groups[key])}]"
    if not incident.traces:
        return _finding(
            key,
            FindingStatus.UNAVAILABLE,
            "data unavailable: no sampled traces in the incident window",
            source=source,
            query=group_query,
        )
    share, base = incident.group_share(key) or 0.0, baseline.group_share(key)
    limit = None if base is None else max(config.share_threshold, base + config.min_share_increase)
    breached = limit is not None and share > limit
    ops = _matching_ops(key, incident, groups) or _matching_ops(key, baseline, groups)
    name = f"`{ops[0].operation}`" if ops else f"`{key.removeprefix('trace_')}`"
    if len(ops) > 1:
        name += f" (with {', '.join(o.operation for o in ops[1:4])})"
    onset = onset_of(key, split, slices, limit) if breached and limit is not None else None
    detail = f"{name} is {_pct(share)} of request time"
    if onset:
        detail += f" since {onset:%H:%M} UTC"
    detail += f" (baseline {_pct(base)}, limit > {_pct(limit) if limit is not None else 'n/a (no baseline)'})"
    now_pct, base_pct = incident.group_percentiles(key), baseline.group_percentiles(key)
    if now_pct:
        detail += f"; per request p50 {_sec(now_pct[0])}, p95 {_sec(now_pct[1])}"
        detail += f" (baseline p95 {_sec(base_pct[1])})" if base_pct else ""
    examples = sorted((t for t in incident.traces if t.group_us.get(key)), key=lambda t: -t.group_us[key])[:3]
    if examples:
        detail += "; e.g. traces " + ", ".join(f"{t.trace_id} ({_sec(t.group_us[key])})" for t in examples)
    labels = {
        "service": ops[0].service if ops else "",
        "operations": ",".join(o.operation for o in ops),
        "incident_traces": str(len(incident.traces)),
        "baseline_traces": str(len(baseline.traces)),
        "example_traces": ",".join(t.trace_id for t in examples),
    }
    if now_pct:
        labels |= {"p50_seconds": f"{now_pct[0] / 1e6:.6g}", "p95_seconds": f"{now_pct[1] / 1e6:.6g}"}
    if base_pct:
        labels |= {
            "baseline_p50_seconds": f"{base_pct[0] / 1e6:.6g}",
            "baseline_p95_seconds": f"{base_pct[1] / 1e6:.6g}",
        }
    return _finding(
        key,
        FindingStatus.BREACHED if breached else FindingStatus.OK,
        detail,
        value=share,
        baseline=base,
        threshold=limit,
        onset=onset,
        series_labels=labels,
        source=source,
        query=group_query,
    )


def summary_finding(split: WindowSplit, sample_note: str, source: str, query: str) -> Finding:
    incident, baseline = split.incident, split.baseline
    if not incident.traces:
        return _finding(
            SUMMARY_KEY,
            FindingStatus.UNAVAILABLE,
            f"data unavailable: no sampled traces in the incident window ({sample_note})",
            source=source,
            query=query,
            unit="s",
        )
    since = _at(split.incident_start_us)
    top = incident.top_operations(5)
    parts = []
    for op in top:
        before = baseline.operations.get((op.service, op.operation))
        parts.append(
            f"{op.operation} {_pct(op.share)} (baseline {_pct(before.share if before else 0.0)}, p95 {_sec(op.p95_us)})"
        )
    slowest = incident.slowest(3)
    detail = (
        f"Request time by operation since {since:%H:%M} UTC over {len(incident.traces)} traces "
        f"(baseline {len(baseline.traces)}): "
        + "; ".join(parts)
        + f". Request p95 {_sec(incident.request_p95_us)} (baseline {_sec(baseline.request_p95_us)})."
        + " Slowest: "
        + ", ".join(f"{t.trace_id} ({_sec(t.request_us)})" for t in slowest)
        + f". {sample_note}"
    )
    labels = {
        "slowest_traces": ",".join(t.trace_id for t in slowest),
        "incident_traces": str(len(incident.traces)),
        "baseline_traces": str(len(baseline.traces)),
        "top_operations": ",".join(op.operation for op in top),
    }
    return _finding(
        SUMMARY_KEY,
        FindingStatus.OK,
        detail,
        unit="s",
        source=source,
        query=query,
        value=None if incident.request_p95_us is None else incident.request_p95_us / 1e6,
        baseline=None if baseline.request_p95_us is None else baseline.request_p95_us / 1e6,
        series_labels=labels,
    )


def errors_finding(split: WindowSplit, source: str, query: str) -> Finding:
    incident, baseline = split.incident, split.baseline
    if not incident.traces:
        return _finding(
            ERRORS_KEY,
            FindingStatus.UNAVAILABLE,
            "data unavailable: no sampled traces in the incident window",
            source=source,
            query=query,
        )
    rate = incident.error_traces() / len(incident.traces)
    base = baseline.error_traces() / len(baseline.traces) if baseline.traces else None
    limit = max(ERROR_RATE_FLOOR, (base or 0.0) + ERROR_RATE_INCREASE)
    failing = sorted((op for op in incident.operations.values() if op.error_spans), key=lambda o: -o.error_spans)
    detail = f"{_pct(rate)} of traces have an error span (baseline {_pct(base)}, limit > {_pct(limit)})"
    if failing:
        detail += "; by operation: " + ", ".join(f"{op.operation} {op.error_spans}" for op in failing[:5])
    examples = [t.trace_id for t in incident.traces if t.errors][:3]
    if examples:
        detail += "; e.g. traces " + ", ".join(examples)
    labels = {
        "operations": ",".join(f"{op.operation}={op.error_spans}" for op in failing),
        "example_traces": ",".join(examples),
    }
    return _finding(
        ERRORS_KEY,
        FindingStatus.BREACHED if rate > limit else FindingStatus.OK,
        detail,
        value=rate,
        baseline=base,
        threshold=limit,
        source=source,
        query=query,
        series_labels=labels,
    )


def attribution_findings(
    timings: list[TraceTiming],
    slices: list[tuple[int, int]],
    alert_start: datetime,
    end: datetime,
    config: TracesConfig,
    sample_note: str,
    source: str,
    query: str,
) -> list[Finding]:
    groups = compile_groups(config.operations)
    split = WindowSplit(timings, alert_start, end)
    findings = [summary_finding(split, sample_note, source, query)]
    findings += [group_finding(key, split, slices, config, groups, source, query) for key in groups]
    findings.append(errors_finding(split, source, query))
    return findings
