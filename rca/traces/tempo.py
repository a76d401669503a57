"""Grafana Tempo HTTP API: `/api/search` (TraceQL in `q`, times in Unix seconds) returns trace
summaries, `/api/traces/{id}` returns the trace as OTLP JSON.

Tempo's trace JSON is `{"batches": [...]}` (`{"trace": {"resourceSpans": ...}}` on `/api/v2`),
each batch `{resource, scopeSpans | instrumentationLibrarySpans: [{spans}]}`, and its ids are
base64 (gogo jsonpb of the protobuf bytes, grafana/tempo#5437) where the OTLP/JSON spec says hex;
both are read."""

from __future__ import annotations

import base64
import binascii
import string
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rca import metrics
from rca.traces.client import TraceHTTP
from rca.traces.model import Span, SpanCap, Trace, TraceSourceError, TraceSummary, names, phase_spans, reading

HEX = frozenset(string.hexdigits)
STATUS_ERROR = (2, "2", "STATUS_CODE_ERROR")


def hex_id(raw: str | None) -> str | None:
    """A trace or span id as lowercase hex, from hex (OTLP/JSON) or base64 (Tempo, protobuf JSON)."""
    if not raw:
        return None
    if len(raw) in (16, 32) and set(raw) <= HEX:
        return raw.lower()
    try:
        decoded = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise TraceSourceError(f"Tempo: id {raw!r} is neither hex nor base64") from None
    if not decoded.strip(b"\0"):
        return None  # an all-zero parent id means "no parent"
    return decoded.hex()


def _attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        key = item.get("key")
        if key is None:
            continue  # nothing could look it up
        value = item.get("value") or {}
        out[key] = next(iter(value.values()), None) if value else None
    return out


def parse_otlp(raw: dict[str, Any], trace_id: str, max_spans: int, phases: dict[str, str] | None = None) -> Trace:
    """OTLP JSON (Tempo's `batches`, the spec's `resourceSpans`) into one Trace; `phases`
    (attribute -> phase name) adds the phases an engine reports as attributes."""
    if "trace" in raw and isinstance(raw["trace"], dict):
        raw = raw["trace"]
    batches = raw.get("batches") or raw.get("resourceSpans") or []
    cap = SpanCap(max_spans)
    for batch in batches:
        service = _attributes((batch.get("resource") or {}).get("attributes")).get("service.name") or "unknown"
        scopes = batch.get("scopeSpans") or batch.get("instrumentationLibrarySpans") or []
        for scope in scopes:
            for span in scope.get("spans") or []:
                start_ns, end_ns = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
                parsed = Span(
                    span_id=hex_id(span["spanId"]) or "",
                    parent_id=hex_id(span.get("parentSpanId")),
                    service=str(service),
                    operation=span.get("name") or "(unnamed)",
                    start_us=start_ns // 1000,
                    duration_us=max(0, (end_ns - start_ns) // 1000),
                    error=(span.get("status") or {}).get("code") in STATUS_ERROR,
                )
                cap.add(parsed)
                if phases:
                    for phase in phase_spans(parsed, _attributes(span.get("attributes")), phases):
                        cap.add(phase)
    return cap.trace(trace_id)


def traceql_for(service: str) -> str:
    quoted = service.replace("\\", "\\\\").replace('"', '\\"')
    return '{ resource.service.name = "' + quoted + '" }'


class TempoSource:
    """Reads traces from Tempo: one search per slice, then each hit fetched by id, concurrently."""

    name = "tempo"

    def __init__(
        self, http: TraceHTTP, max_spans_per_trace: int, concurrency: int, phases: dict[str, str] | None = None
    ) -> None:
        self.http = http
        self.max_spans = max_spans_per_trace
        self.concurrency = concurrency
        self.phases = phases or {}

    def services(self) -> list[str]:
        answer = self.http.get_json("/api/search/tag/service.name/values")
        with reading("tempo", "services"):
            values = (answer or {}).get("tagValues") or []
            return names([v["value"] if isinstance(v, dict) else v for v in values])

    def find(self, service: str, start_us: int, end_us: int, limit: int) -> list[TraceSummary]:
        params = {
            "q": traceql_for(service),
            "start": start_us // 1_000_000,
            "end": -(-end_us // 1_000_000),
            "limit": limit,
            "spss": 1,
        }
        answer = self.http.get_json("/api/search", params)
        if not isinstance(answer, dict):
            metrics.TRACE_QUERY_ERRORS.labels(backend="tempo", reason="bad_response").inc()
            raise TraceSourceError("Tempo search: answer is not an object")
        hits = []
        with reading("tempo", "search"):
            for item in answer.get("traces") or []:
                start = int(item.get("startTimeUnixNano") or 0) // 1000
                if start_us <= start <= end_us:  # Tempo's seconds are coarser than the slice edges
                    hits.append(
                        TraceSummary(
                            trace_id=hex_id(item["traceID"].rjust(32, "0")) or item["traceID"],
                            start_us=start,
                            duration_us=int(item.get("durationMs") or 0) * 1000,
                            root_service=item.get("rootServiceName"),
                            root_operation=item.get("rootTraceName"),
                        )
                    )
        return hits[:limit]

    def trace(self, trace_id: str) -> Trace | None:
        raw = self.http.get_json(f"/api/traces/{trace_id}", missing_ok=True)
        if raw is None:
            return None
        with reading("tempo", "trace"):
            return parse_otlp(raw, trace_id, self.max_spans, self.phases)

    def _trace_or_error(self, trace_id: str) -> Trace | TraceSourceError | None:
        try:
            return self.trace(trace_id)
        except TraceSourceError as exc:
            return exc

    def search(self, service: str, start_us: int, end_us: int, limit: int) -> list[Trace]:
        """The slice's hits, fetched by id; a trace that fails to load is skipped unless all do."""
        hits = self.find(service, start_us, end_us, limit)
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            results = list(pool.map(self._trace_or_error, (hit.trace_id for hit in hits)))
        traces = [r for r in results if isinstance(r, Trace) and r.spans]
        errors = [r for r in results if isinstance(r, TraceSourceError)]
        if errors and not traces:
            raise errors[0]
        return traces

    def close(self) -> None:
        self.http.close()

    def describe_query(self, service: str) -> str:
        return f"{self.http.shown_url}/api/search?q={traceql_for(service)}"
