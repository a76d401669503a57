"""What the incident page shows, computed from the API's view of an incident and the series kept
with its investigation: the timeline, one chart per breached finding, the links out. Pure
functions: the templates only lay these out."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from rca.api.schemas import AlertOut, FeedbackOut, FindingOut, IncidentOut, InvestigationOut
from rca.config import Settings
from rca.domain import early_warning
from rca.domain.coverage import could_not_investigate
from rca.domain.series import EvidenceSeries
from rca.domain.status import InconclusiveReason
from rca.scan.slo_rules import slo_words
from rca.signals.slo import TTFT_SIGNAL
from rca.store.models import ScanTransitionRow


@dataclass(frozen=True)
class Event:
    at: datetime
    what: str
    detail: str = ""


def _warned_at(incident: IncidentOut) -> datetime:
    """When the scan warned: its incident opened then."""
    return incident.created_at


def _moving_since(transitions: list[ScanTransitionRow]) -> datetime | None:
    """When the signals of the first warning started to leave their normal range, as the scan
    stored it in that transition's figures."""
    for move in transitions:
        if move.after == "warning":
            signals = move.figures.get("signals") or []
            moving = [s["moving_since"] for s in signals if s.get("departed") and s.get("moving_since") is not None]
            return datetime.fromtimestamp(min(moving), UTC) if moving else None
    return None


def timeline(incident: IncidentOut, feedback: list[FeedbackOut], transitions: list[ScanTransitionRow]) -> list[Event]:
    """Everything that happened to the incident, oldest first."""
    warning = incident.origin in early_warning.SCANNED
    opened = {early_warning.ORIGIN: "early warning raised", early_warning.BACKTEST: "backtest: the scan would warn"}
    events = [
        Event(
            incident.created_at,
            opened.get(incident.origin, "incident opened"),
            f"{incident.notification_count} notification(s) since",
        )
    ]
    for alert in incident.alerts:
        name = alert.alertname or alert.fingerprint
        if warning and alert.alertname == early_warning.ALERTNAME:
            moving = _moving_since(transitions)
            if moving is not None:
                events.append(Event(moving, "signals started moving", name))
        elif warning:
            lead = early_warning.lead(alert.starts_at, _warned_at(incident))
            events.append(Event(alert.starts_at, "SLA alert fired", f"{name}, {lead} the early warning"))
            events.append(Event(alert.first_seen_at, "SLA alert joined", f"{name} joined the early warning's incident"))
        else:
            events.append(Event(alert.starts_at, "alert fired", name))
            events.append(Event(alert.first_seen_at, "alert received", name))
        if alert.ends_at is not None and alert.status == "resolved":
            events.append(Event(alert.ends_at, "alert resolved", name))
    for move in transitions:
        events.append(Event(move.at, f"scan: {move.before} → {move.after}", move.reason))
    for inv in incident.investigations:
        asked = f"{inv.reason} by {inv.requested_by}" if inv.requested_by else inv.reason
        events.append(Event(inv.queued_at, f"investigation {inv.id} queued", asked))
        if inv.started_at:
            events.append(Event(inv.started_at, f"investigation {inv.id} started", f"attempt {inv.attempts}"))
        if inv.finished_at:
            if inv.inconclusive_reason:
                outcome = could_not_investigate(inv.inconclusive_reason)
            elif inv.hypotheses:
                outcome = f"{inv.hypotheses[0].category} by {inv.analyst}"
            else:
                outcome = inv.error or "no cause"
            events.append(Event(inv.finished_at, f"investigation {inv.id} {inv.status}", outcome))
    for attempt in incident.slack.attempts if incident.slack else []:
        code = f" (HTTP {attempt.http_status})" if attempt.http_status else ""
        events.append(Event(attempt.at, f"Slack {attempt.action} ({attempt.event})", f"{attempt.outcome}{code}"))
    for row in feedback:
        events.append(Event(row.created_at, "feedback", f"{row.category} confirmed by {row.author}"))
    if incident.resolved_at:
        events.append(Event(incident.resolved_at, "incident resolved"))
    return sorted(events, key=lambda e: e.at)


@dataclass(frozen=True)
class MovedSignal:
    """One signal as the scan saw it when it warned (ScanTransition.figures)."""

    signal: str
    title: str
    unit: str
    current: float | None
    baseline: float | None
    comparison: str
    threshold: float | None
    slope_per_minute: float | None
    moving_since: datetime | None
    cross_in_minutes: float | None
    breached: bool


@dataclass(frozen=True)
class WarningView:
    """What the header says of an early warning: the scan's words, why it warned, the signals
    that moved (and their forecast), and the SLA alerts that joined since."""

    summary: str | None
    warned_at: datetime
    reason: str | None
    slo_probability: float | None
    signals: list[MovedSignal]
    joined: list[tuple[AlertOut, str]]  # (SLA alert, "N min after")
    led: bool = True  # warned before TTFT broke its SLO (False: it warned at the breach)
    slo: str | None = None  # "TTFT SLO 1 s from rule LLMTTFTSLOBreach (group g, rules.yml)", as judged then


def _ttft(figures: dict[str, Any]) -> dict[str, Any]:
    """The TTFT SLO signal's figures as stored when it warned (empty without them)."""
    return next((i for i in figures.get("signals") or [] if isinstance(i, dict) and i.get("signal") == TTFT_SIGNAL), {})


def _slo(ttft: dict[str, Any]) -> str | None:
    """The TTFT SLO the target was judged against when it warned, and its source; None for a
    warning stored before the scan recorded the source."""
    threshold, source = _number(ttft.get("threshold")), ttft.get("slo_source")
    return slo_words(threshold, source) if threshold is not None and isinstance(source, str) else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _moved(figures: dict[str, Any], findings: dict[str, FindingOut]) -> list[MovedSignal]:
    """The signals that had left their baseline or were forecast to cross, as stored when it warned."""
    moved = []
    for item in figures.get("signals") or []:
        if not isinstance(item, dict) or not (item.get("departed") or item.get("cross_in_seconds") is not None):
            continue
        signal = str(item.get("signal", "?"))
        finding = findings.get(signal)
        since, cross = _number(item.get("moving_since")), _number(item.get("cross_in_seconds"))
        moved.append(
            MovedSignal(
                signal=signal,
                title=finding.title if finding else signal,
                unit=finding.unit if finding else "",
                current=_number(item.get("current")),
                baseline=_number(item.get("baseline")),
                comparison=str(item.get("comparison", "")),
                threshold=_number(item.get("threshold")),
                slope_per_minute=_number(item.get("slope_per_minute")),
                moving_since=datetime.fromtimestamp(since, UTC) if since is not None else None,
                cross_in_minutes=cross / 60 if cross is not None else None,
                breached=bool(item.get("breached")),
            )
        )
    return moved


def warning_view(
    incident: IncidentOut, transitions: list[ScanTransitionRow], findings: dict[str, FindingOut]
) -> WarningView | None:
    """The early warning's header, from its annotations and the scan's latest move to `warning`;
    None for an incident an Alertmanager alert opened."""
    if incident.origin not in early_warning.SCANNED:
        return None
    warned = [row for row in transitions if row.after == "warning"]
    latest = warned[-1] if warned else None
    figures = latest.figures if latest else {}
    ttft = _ttft(figures)
    joined = [
        (alert, early_warning.lead(alert.starts_at, _warned_at(incident)))
        for alert in incident.alerts
        if alert.alertname != early_warning.ALERTNAME
    ]
    return WarningView(
        summary=incident.common_annotations.get("summary"),
        warned_at=_warned_at(incident),
        reason=latest.reason if latest else None,
        slo_probability=_number(figures.get("slo_probability")),
        signals=_moved(figures, findings),
        joined=joined,
        led=not ttft.get("breached"),
        slo=_slo(ttft),
    )


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


# The charts open on the incident: from this long before the first onset (or a quarter of the time
# since, if longer) to the end of the kept series; the whole kept window is a click away.
FOCUS_MARGIN_SECONDS = 15 * 60


def focus(charts: list[dict[str, Any]]) -> tuple[float, float] | None:
    """The x range the charts open on (unix seconds): the first onset less a margin, to the end of
    the series; None where that is the whole window anyway (or no chart has an onset)."""
    onsets = [c["onset"] for c in charts if c["onset"] is not None]
    if not onsets:
        return None
    start = min(c["start"] for c in charts)
    end = max(c["start"] + c["step"] * (len(c["values"]) - 1) for c in charts)
    onset = min(onsets)
    begin = onset - max(FOCUS_MARGIN_SECONDS, (end - onset) / 4)
    return (begin, end) if start < begin < end else None


def span(charts: list[dict[str, Any]]) -> str:
    """How much the charts keep, in words ("3 h", "90 min")."""
    if not charts:
        return ""
    seconds = max(c["step"] * (len(c["values"]) - 1) for c in charts)
    return f"{seconds / 3600:.0f} h" if seconds >= 2 * 3600 else f"{seconds / 60:.0f} min"


@dataclass
class Evidence:
    """The latest investigation's findings as the page groups them, and the range the charts open on."""

    charts: list[dict[str, Any]]
    breached_without_series: list[FindingOut]
    healthy: list[FindingOut]
    traces: list[TraceRow]
    graphs: dict[str, str | None]
    focus: tuple[float, float] | None = None
    span: str = ""

    @property
    def breached(self) -> bool:
        return bool(self.charts or self.breached_without_series)


def evidence(settings: Settings, inv: InvestigationOut, series: dict[str, EvidenceSeries]) -> Evidence:
    signals = [f for f in inv.findings if f.kind != "trace"]
    breached = [f for f in signals if f.breached]
    charts = [chart(f, series[f.id]) for f in breached if f.id in series]
    return Evidence(
        charts=charts,
        focus=focus(charts),
        span=span(charts),
        breached_without_series=[f for f in breached if f.id not in series],
        healthy=[f for f in signals if not f.breached],
        traces=trace_rows(settings, inv.findings),
        graphs={f.id: prometheus_graph(settings, f.query, inv) for f in inv.findings},
    )


# What to do about an inconclusive investigation, by its reason.
INCONCLUSIVE_HINTS: dict[str, str] = {
    InconclusiveReason.NO_PROMETHEUS: "Set RCA_PROMETHEUS_URL to the Prometheus that scrapes the fleet; the "
    "service warns at start, and /readyz reports the check, while it is unset.",
    InconclusiveReason.PROMETHEUS_UNREACHABLE: "Check that Prometheus is up and reachable from the service at "
    "RCA_PROMETHEUS_URL; /readyz reports the check.",
    InconclusiveReason.NO_DATA: "Check that this Prometheus scrapes the target, and that the alert's labels "
    "(instance, pod, host) name it as the series do.",
}


def inconclusive_hint(reason: str | None) -> str | None:
    return INCONCLUSIVE_HINTS.get(reason) if reason else None
