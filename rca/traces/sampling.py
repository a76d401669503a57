"""A bounded sample of traces spread over the whole window, not just the newest.

The window is cut into slices (about ten minutes each, the last one ending now) and each slice
is asked for an equal share of the sample. The baseline before the onset is then sampled as
densely as the incident. Slices are visited newest, oldest, second newest, ... so that when the
time budget runs out both ends of the window are already covered.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Protocol

from rca.traces.model import Trace, TraceSourceError

SLICE_SECONDS = 600


class TraceSource(Protocol):
    name: str

    def services(self) -> list[str]: ...

    def search(self, service: str, start_us: int, end_us: int, limit: int) -> list[Trace]: ...

    def describe_query(self, service: str) -> str: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class SamplePlan:
    slices: list[tuple[int, int]]  # [start, end) in microseconds, oldest first
    per_slice: int


def plan_sample(start_us: int, end_us: int, sample_size: int) -> SamplePlan:
    """Equal slices of about SLICE_SECONDS ending at `end_us`, each asked for its share."""
    span = max(1, end_us - start_us)
    count = max(1, min(sample_size, math.ceil(span / (SLICE_SECONDS * 1_000_000))))
    width = span / count
    edges = [start_us + round(i * width) for i in range(count)] + [end_us]
    return SamplePlan(
        slices=list(zip(edges[:-1], edges[1:], strict=True)), per_slice=max(1, math.ceil(sample_size / count))
    )


def visiting_order(count: int) -> list[int]:
    """Slice indexes newest, oldest, second newest, second oldest, ..."""
    order, low, high = [], 0, count - 1
    while low <= high:
        order.append(high)
        if low != high:
            order.append(low)
        low, high = low + 1, high - 1
    return order


@dataclass
class Sample:
    traces: list[Trace] = field(default_factory=list)
    slices_read: int = 0
    slices_failed: list[str] = field(default_factory=list)
    cut_short: bool = False  # the time budget ended the sampling before every slice was read

    @property
    def dropped_spans(self) -> int:
        return sum(t.dropped_spans for t in self.traces)


def collect_sample(
    source: TraceSource, service: str, plan: SamplePlan, budget_seconds: float, max_traces: int
) -> Sample:
    """Read the planned slices within the time budget, keeping at most `max_traces` distinct traces.

    A failing slice is recorded and skipped; when every slice fails the first error is raised,
    since the backend is then unusable rather than patchy.
    """
    deadline = time.monotonic() + budget_seconds
    sample, seen = Sample(), set()
    first_error: TraceSourceError | None = None
    for index in visiting_order(len(plan.slices)):
        if time.monotonic() >= deadline:
            sample.cut_short = True
            break
        start, end = plan.slices[index]
        try:
            found = source.search(service, start, end - 1, plan.per_slice)
        except TraceSourceError as exc:
            first_error = first_error or exc
            sample.slices_failed.append(str(exc))
            continue
        sample.slices_read += 1
        for trace in found[: plan.per_slice]:
            if trace.trace_id not in seen and len(sample.traces) < max_traces:
                seen.add(trace.trace_id)
                sample.traces.append(trace)
    if sample.slices_read == 0 and first_error is not None:
        raise first_error
    return sample
