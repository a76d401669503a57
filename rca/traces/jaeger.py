"""Jaeger query service HTTP API (the one jaeger-ui uses): `/api/services`, `/api/traces` search
and `/api/traces/{id}`. Times are microseconds; the answer wraps its payload as
`{"data": ..., "total", "limit", "offset", "errors"}` (jaeger `cmd/query/app/http_handler.go`,
spans as in `model/json/model.go`)."""

from __future__ import annotations

from typing import Any

from rca import metrics
from rca.traces.client import TraceHTTP
from rca.traces.model import Span, SpanCap, Trace, TraceSourceError, names, phase_spans, reading


def _is_error(tags: list[dict[str, Any]]) -> bool:
    """OpenTracing's `error=true` tag, or the OTLP status Jaeger turns into `otel.status_code`."""
    for tag in tags or []:
        key, value = tag.get("key"), tag.get("value")
        if key == "error" and value in (True, "true"):
            return True
        if key == "otel.status_code" and value == "ERROR":
            return True
    return False


def parse_trace(raw: dict[str, Any], max_spans: int, phases: dict[str, str] | None = None) -> Trace:
    """One element of `data`: spans whose service comes from the trace's `processes` table;
    `phases` (attribute -> phase name) adds the phases an engine reports as tags."""
    processes = {pid: (proc or {}).get("serviceName", "unknown") for pid, proc in (raw.get("processes") or {}).items()}
    cap = SpanCap(max_spans)
    for span in raw.get("spans") or []:
        # The first reference is the parent, CHILD_OF or FOLLOWS_FROM alike, as jaeger-ui draws it.
        refs = [r for r in span.get("references") or [] if r.get("spanID")]
        parsed = Span(
            span_id=span["spanID"],
            parent_id=refs[0]["spanID"] if refs else None,
            service=processes.get(span.get("processID"), "unknown"),
            operation=span.get("operationName") or "(unnamed)",
            start_us=int(span["startTime"]),
            duration_us=max(0, int(span.get("duration") or 0)),
            error=_is_error(span.get("tags")),
        )
        cap.add(parsed)
        if phases:
            tags = {tag.get("key"): tag.get("value") for tag in span.get("tags") or []}
            for phase in phase_spans(parsed, tags, phases):
                cap.add(phase)
    return cap.trace(raw.get("traceID") or "")


def _payload(answer: Any, what: str) -> Any:
    problem = None
    if not isinstance(answer, dict) or "data" not in answer:
        problem = "answer has no 'data'"
    elif not answer.get("data") and answer.get("errors"):
        first = answer["errors"][0]
        problem = str(first.get("msg", first))
    if problem is not None:
        metrics.TRACE_QUERY_ERRORS.labels(backend="jaeger", reason="bad_response").inc()
        raise TraceSourceError(f"Jaeger {what}: {problem}")
    return answer["data"]


class JaegerSource:
    """Reads traces from a Jaeger query service."""

    name = "jaeger"

    def __init__(self, http: TraceHTTP, max_spans_per_trace: int, phases: dict[str, str] | None = None) -> None:
        self.http = http
        self.max_spans = max_spans_per_trace
        self.phases = phases or {}

    def services(self) -> list[str]:
        answer = self.http.get_json("/api/services")
        with reading("jaeger", "services"):
            return names(_payload(answer, "services") or [])

    def search(self, service: str, start_us: int, end_us: int, limit: int) -> list[Trace]:
        """Up to `limit` whole traces of `service` that started within [start, end]."""
        params = {"service": service, "start": start_us, "end": end_us, "limit": limit}
        answer = self.http.get_json("/api/traces", params)
        with reading("jaeger", "search"):
            data = _payload(answer, "search") or []
            return [parse_trace(raw, self.max_spans, self.phases) for raw in data if raw.get("spans")]

    def close(self) -> None:
        self.http.close()

    def describe_query(self, service: str) -> str:
        return f"{self.http.shown_url}/api/traces?service={service}"
