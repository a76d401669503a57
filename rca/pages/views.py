"""What the incident page shows, computed from the API's view of an incident and the series kept
with its investigation: the timeline, one chart per breached finding, the links out. Pure
functions: the templates only lay these out."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from rca.api.schemas import FeedbackOut, FindingOut, IncidentOut, InvestigationOut
from rca.config import Settings
from rca.domain.series import EvidenceSeries


@dataclass(frozen=True)
class Event:
    at: datetime
    what: str
    detail: str = ""


def timeline(incident: IncidentOut, feedback: list[FeedbackOut]) -> list[Event]:
    """Everything that happened to the incident, oldest first."""
    events = [Event(incident.created_at, "incident opened", f"{incident.notification_count} notification(s) since")]
    for alert in incident.alerts:
        events.append(Event(alert.starts_at, "alert fired", alert.alertname or alert.fingerprint))
        if alert.ends_at is not None and alert.status == "resolved":
            events.append(Event(alert.ends_at, "alert resolved", alert.alertname or alert.fingerprint))
    for inv in incident.investigations:
        events.append(Event(inv.queued_at, f"investigation {inv.id} queued", inv.reason))
        if inv.started_at:
            events.append(Event(inv.started_at, f"investigation {inv.id} started", f"attempt {inv.attempts}"))
        if inv.finished_at:
            top = inv.hypotheses[0].category if inv.hypotheses else "no cause"
            events.append(Event(inv.finished_at, f"investigation {inv.id} {inv.status}", f"{top} by {inv.analyst}"))
    for attempt in incident.slack.attempts if incident.slack else []:
        code = f" (HTTP {attempt.http_status})" if attempt.http_status else ""
        events.append(Event(attempt.at, f"Slack {attempt.action} ({attempt.event})", f"{attempt.outcome}{code}"))
    for row in feedback:
        events.append(Event(row.created_at, "feedback", f"{row.category} confirmed by {row.author}"))
    if incident.resolved_at:
        events.append(Event(incident.resolved_at, "incident resolved"))
    return sorted(events, key=lambda e: e.at)


def chart(finding: FindingOut, series: EvidenceSeries) -> dict[str, Any]:
    """What the page's script draws for one finding (times in unix seconds): the series, its
    threshold, the baseline period shaded and the onset marked."""
    return {
        "key": finding.id,
        "title": finding.title,
        "unit": finding.unit,
        "start": series.start.timestamp(),
        "step": series.step_seconds,
        "values": series.values,
        "threshold": finding.threshold,
        "comparison": finding.comparison,
        "baseline": finding.baseline,
        "baseline_end": series.baseline_end.timestamp() if series.baseline_end else None,
        "onset": finding.onset.timestamp() if finding.onset else None,
    }


def web_url(url: str | None) -> str | None:
    """An http(s) URL to link to, or None: a `javascript:` or other scheme from an alert never becomes a link."""
    if not url or urlsplit(url).scheme.lower() not in ("http", "https"):
        return None
    return url


def prometheus_graph(settings: Settings, query: str | None, inv: InvestigationOut) -> str | None:
    """The finding's query on Prometheus' graph page over the investigated window."""
    if not settings.prometheus_url or not query or inv.window_start is None or inv.window_end is None:
        return None
    hours = max(1, round((inv.window_end - inv.window_start).total_seconds() / 3600))
    params = {
        "g0.expr": query,
        "g0.tab": "0",
        "g0.range_input": f"{hours}h",
        "g0.end_input": inv.window_end.strftime("%Y-%m-%d %H:%M:%S"),
    }
    return f"{settings.prometheus_url.rstrip('/')}/graph?{urlencode(params)}"


def trace_link(settings: Settings, trace_id: str) -> str | None:
    """Jaeger's UI page of a trace (Tempo has no UI of its own to link to)."""
    if settings.traces_backend != "jaeger" or not settings.traces_url:
        return None
    return f"{settings.traces_url.rstrip('/')}/trace/{quote(trace_id, safe='')}"


@dataclass
class TraceRow:
    finding: FindingOut
    traces: list[tuple[str, str | None]] = field(default_factory=list)  # (trace id, link)


def trace_rows(settings: Settings, findings: list[FindingOut]) -> list[TraceRow]:
    """The trace findings with the trace ids they cite, linked where the backend has a UI."""
    rows = []
    for finding in findings:
        if finding.kind != "trace":
            continue
        labels = finding.series_labels or {}
        ids = [t for name in ("slowest_traces", "example_traces") for t in labels.get(name, "").split(",") if t]
        rows.append(TraceRow(finding, [(t, trace_link(settings, t)) for t in ids]))
    return rows


@dataclass
class Evidence:
    """The latest investigation's findings as the page groups them."""

    charts: list[dict[str, Any]]
    breached_without_series: list[FindingOut]
    healthy: list[FindingOut]
    traces: list[TraceRow]
    graphs: dict[str, str | None]


def evidence(settings: Settings, inv: InvestigationOut, series: dict[str, EvidenceSeries]) -> Evidence:
    signals = [f for f in inv.findings if f.kind != "trace"]
    breached = [f for f in signals if f.breached]
    return Evidence(
        charts=[chart(f, series[f.id]) for f in breached if f.id in series],
        breached_without_series=[f for f in breached if f.id not in series],
        healthy=[f for f in signals if not f.breached],
        traces=trace_rows(settings, inv.findings),
        graphs={f.id: prometheus_graph(settings, f.query, inv) for f in inv.findings},
    )
