"""Where request time went: self time per operation, so nested spans are not counted twice.

Per trace, each span's self time is its duration minus the union of its children's intervals.
Children that run in parallel share the time they cover in proportion to their durations, so
the attributed times of a span tree add up to exactly its root's duration, and an operation's
share is its attributed time over the window's total. Cross-service clock skew is handled by
moving a child inside its parent (durations come from one clock and are kept; start offsets
across hosts are not trusted), a child longer than its parent is clipped to it, a span whose
parent is missing becomes a root of its own (an orphan), and a reference cycle is broken.
Operation groups (finding keys) collect the time of every span under a matching span, so
`lora_adapter.load` includes its `read_weights`/`compile`/`inject` children.
"""

from __future__ import annotations

import fnmatch
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from rca.traces.model import Span, Trace

OpKey = tuple[str, str]  # (service, operation)


@dataclass
class TraceTiming:
    """One trace reduced to what attribution needs."""

    trace_id: str
    start_us: int
    request_us: int  # the longest root: the request as the caller saw it
    total_self_us: float  # sum of attributed self time = sum of root durations
    self_us: dict[OpKey, float]
    durations: dict[OpKey, list[int]]
    errors: dict[OpKey, int]
    group_us: dict[str, float]  # finding key -> time inside spans matching its patterns
    orphans: int = 0
    skew_adjusted: int = 0
    dropped_spans: int = 0


def _union_length(intervals: list[tuple[int, int]]) -> int:
    ordered = sorted(intervals)
    if not ordered:
        return 0
    total = 0
    current_start, current_end = ordered[0]
    for start, end in ordered[1:]:
        if start > current_end:
            total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    return total + current_end - current_start


def _fit_inside(child: Span, parent: tuple[int, int]) -> tuple[int, int]:
    """The child's interval moved (not stretched) into its parent's; clipped if it is longer."""
    p_start, p_end = parent
    if child.duration_us >= p_end - p_start:
        return p_start, p_end
    start = min(max(child.start_us, p_start), p_end - child.duration_us)
    return start, start + child.duration_us


def compile_groups(groups: dict[str, list[str]]) -> dict[str, list[str]]:
    """Lower-cased glob patterns per finding key (operation names match case-insensitively)."""
    return {key: [p.lower() for p in patterns] for key, patterns in groups.items()}


def matching_groups(operation: str, groups: dict[str, list[str]]) -> set[str]:
    name = operation.lower()
    return {key for key, patterns in groups.items() if any(fnmatch.fnmatchcase(name, p) for p in patterns)}


def time_trace(trace: Trace, groups: dict[str, list[str]]) -> TraceTiming:
    """Self time per operation and group time per finding key for one trace."""
    by_id: dict[str, Span] = {}
    for span in trace.spans:
        by_id.setdefault(span.span_id, span)
    children: dict[str, list[Span]] = defaultdict(list)
    roots: list[Span] = []
    orphans = 0
    for span in by_id.values():
        parent = span.parent_id
        if parent and parent != span.span_id and parent in by_id:
            children[parent].append(span)
        else:
            orphans += bool(parent)
            roots.append(span)
    timing = TraceTiming(
        trace.trace_id,
        trace.start_us,
        0,
        0.0,
        defaultdict(float),
        defaultdict(list),
        defaultdict(int),
        defaultdict(float),
        orphans=orphans,
        dropped_spans=trace.dropped_spans,
    )
    visited: set[str] = set()
    pending = list(roots)
    while True:
        for root in pending:
            _walk(root, (root.start_us, root.end_us), frozenset(), children, groups, timing, visited)
        # Spans caught in a reference cycle were never reached from a root: start from one of them.
        left = [s for s in by_id.values() if s.span_id not in visited]
        if not left:
            break
        pending = [min(left, key=lambda s: s.start_us)]
        roots += pending
    timing.request_us = max((r.duration_us for r in roots), default=0)
    timing.self_us, timing.durations = dict(timing.self_us), dict(timing.durations)
    timing.errors, timing.group_us = dict(timing.errors), dict(timing.group_us)
    return timing


def _walk(
    root: Span,
    root_interval: tuple[int, int],
    inherited: frozenset[str],
    children: dict[str, list[Span]],
    groups: dict[str, list[str]],
    timing: TraceTiming,
    visited: set[str],
) -> None:
    """Depth-first over one tree without recursion (a huge trace must not hit the recursion limit).

    `weight` is the share of a span's wall time that is its own: 1 for a root, less under
    parallel siblings (their summed durations exceed the time they cover together)."""
    matched: dict[str, set[str]] = {}  # operation name -> groups; a trace repeats few names
    stack = [(root, root_interval, inherited, 1.0)]
    while stack:
        span, interval, above, weight = stack.pop()
        if span.span_id in visited:
            continue
        visited.add(span.span_id)
        if span.operation not in matched:
            matched[span.operation] = matching_groups(span.operation, groups)
        keys = above | matched[span.operation]
        kids = [c for c in children.get(span.span_id, ()) if c.span_id not in visited]
        placed = []
        for child in kids:
            child_interval = _fit_inside(child, interval)
            timing.skew_adjusted += child_interval[0] != child.start_us
            placed.append(child_interval)
        covered = _union_length(placed)
        summed = sum(end - start for start, end in placed)
        child_weight = weight * (covered / summed if summed > covered else 1.0)
        stack.extend((child, placed_at, keys, child_weight) for child, placed_at in zip(kids, placed, strict=True))
        own = weight * max(0, (interval[1] - interval[0]) - covered)
        op = (span.service, span.operation)
        timing.self_us[op] += own
        timing.durations[op].append(interval[1] - interval[0])
        timing.total_self_us += own
        if span.error:
            timing.errors[op] += 1
        for key in keys:
            timing.group_us[key] += own


@dataclass
class OperationStats:
    service: str
    operation: str
    self_us: float = 0.0
    total_us: int = 0  # sum of span durations, children included
    share: float = 0.0
    p50_us: float = 0.0  # of span durations
    p95_us: float = 0.0
    spans: int = 0
    error_spans: int = 0


@dataclass
class WindowStats:
    """Attribution over the traces that started in one part of the window."""

    traces: list[TraceTiming] = field(default_factory=list)
    operations: dict[OpKey, OperationStats] = field(default_factory=dict)
    total_self_us: float = 0.0
    request_p50_us: float | None = None
    request_p95_us: float | None = None

    def group_share(self, key: str) -> float | None:
        if not self.total_self_us:
            return None
        return sum(t.group_us.get(key, 0) for t in self.traces) / self.total_self_us

    def group_percentiles(self, key: str) -> tuple[float, float] | None:
        """p50/p95 of the per-trace time in the group, over traces where it occurs."""
        values = [t.group_us[key] for t in self.traces if t.group_us.get(key)]
        if not values:
            return None
        p50, p95 = np.percentile(values, [50, 95])
        return float(p50), float(p95)

    def error_traces(self) -> int:
        return sum(1 for t in self.traces if t.errors)

    def slowest(self, count: int = 3) -> list[TraceTiming]:
        return sorted(self.traces, key=lambda t: (-t.request_us, t.trace_id))[:count]

    def top_operations(self, count: int = 5) -> list[OperationStats]:
        return sorted(self.operations.values(), key=lambda o: (-o.self_us, o.service, o.operation))[:count]


def summarise(timings: list[TraceTiming]) -> WindowStats:
    stats = WindowStats(traces=timings)
    durations: dict[OpKey, list[int]] = defaultdict(list)
    for timing in timings:
        stats.total_self_us += timing.total_self_us
        for op, own in timing.self_us.items():
            entry = stats.operations.setdefault(op, OperationStats(*op))
            entry.self_us += own
            entry.error_spans += timing.errors.get(op, 0)
            durations[op] += timing.durations[op]
    for op, entry in stats.operations.items():
        entry.spans = len(durations[op])
        entry.total_us = sum(durations[op])
        entry.share = entry.self_us / stats.total_self_us if stats.total_self_us else 0.0
        entry.p50_us, entry.p95_us = (float(v) for v in np.percentile(durations[op], [50, 95]))
    if timings:
        p50, p95 = np.percentile([t.request_us for t in timings], [50, 95])
        stats.request_p50_us, stats.request_p95_us = float(p50), float(p95)
    return stats
