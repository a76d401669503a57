"""The span model both backends are read into, so attribution never sees a wire format."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rca import metrics


class TraceSourceError(Exception):
    """The trace backend could not answer; the message says why, without credentials, and
    `reason` (timeout, connection, http_status, too_large, bad_response) labels the error metric."""

    def __init__(self, message: str, reason: str = "bad_response") -> None:
        super().__init__(message)
        self.reason = reason


@contextmanager
def reading(backend: str, what: str) -> Iterator[None]:
    """Read a backend's decoded answer: JSON of another shape than its API's (a proxy's, another
    version's) fails like a request that failed, as a TraceSourceError (`bad_response`), so the
    investigation goes on without traces instead of failing."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        metrics.TRACE_QUERY_ERRORS.labels(backend=backend, reason="bad_response").inc()
        raise TraceSourceError(f"{what}: not a {backend} answer ({type(exc).__name__}: {exc})") from None


def names(values: Any) -> list[str]:
    """A list of names (services), checked: TypeError unless every element is a string."""
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"expected a list of names, got {str(values)[:80]}")
    return values


@dataclass(slots=True)
class Span:
    """One span; times in microseconds since the epoch (Jaeger's unit, exact for OTLP's ns / 1000)."""

    span_id: str
    parent_id: str | None
    service: str
    operation: str
    start_us: int
    duration_us: int
    error: bool = False

    @property
    def end_us(self) -> int:
        return self.start_us + self.duration_us


def phase_spans(span: Span, attributes: dict[str, object], phases: dict[str, str]) -> list[Span]:
    """Child spans for the latency phases an engine reports as attributes instead of spans.

    vLLM's `llm_request` span carries `gen_ai.latency.time_in_queue`, `..._model_prefill` and
    `..._model_decode` (seconds); laid out back to back from the span's start (its arrival) in
    the configured order, they become `llm_request:queue`, `llm_request:prefill`, ... so that
    attribution and the operation groups see them like real spans.
    """
    out, cursor = [], span.start_us
    for attribute, phase in phases.items():
        value = attributes.get(attribute)
        if not isinstance(value, str | int | float):
            continue  # absent, or not a number (a JSON object, list or null)
        try:
            seconds = float(value)
        except ValueError:
            continue
        if seconds <= 0:
            continue
        duration = int(seconds * 1_000_000)
        out.append(
            Span(f"{span.span_id}:{phase}", span.span_id, span.service, f"{span.operation}:{phase}", cursor, duration)
        )
        cursor += duration
    return out


@dataclass
class Trace:
    trace_id: str
    spans: list[Span]
    dropped_spans: int = 0  # spans beyond the per-trace cap, not read

    @property
    def start_us(self) -> int:
        return min(s.start_us for s in self.spans)


@dataclass
class TraceSummary:
    """A search hit before its spans are fetched (Tempo's search returns only these)."""

    trace_id: str
    start_us: int
    duration_us: int = 0
    root_service: str | None = None
    root_operation: str | None = None


@dataclass
class SpanCap:
    """Bound on the spans kept per trace, so one runaway trace cannot exhaust memory.

    Past the cap the longest spans are kept: they carry the latency, and a dropped short child
    only overstates its parent's self time by its own small duration.
    """

    max_spans: int
    _heap: list[tuple[int, int, Span]] = field(default_factory=list)
    dropped: int = 0

    def add(self, span: Span) -> None:
        item = (span.duration_us, len(self._heap) + self.dropped, span)
        if len(self._heap) < self.max_spans:
            heapq.heappush(self._heap, item)
        else:
            heapq.heappushpop(self._heap, item)
            self.dropped += 1

    def trace(self, trace_id: str) -> Trace:
        return Trace(trace_id, [span for _, _, span in self._heap], self.dropped)
