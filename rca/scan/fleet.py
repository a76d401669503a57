"""The fleet as Prometheus shows it: every serving instance, its machine, and its signals' recent
series, in a fixed number of queries whatever the fleet's size.

A serving instance is one engine (`instance` of its series: two engines on one host are two
instances; `ServingInstance`, `serving` in code). Its machine is joined to node-scope series
(node_exporter, process-exporter) through the host name in their `instance` and through the
profile's identity series, as an investigation joins an alert's host (`rca.collect.aliases`),
but for the whole fleet at once.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rca.collect.profile import Profile
from rca.collect.prometheus import Samples, counted_errors
from rca.collect.target import host_from_label
from rca.scan.queries import ALTERNATIVE_LABEL, GROUP_LABEL, FleetQuery, discovery_query, identity_query

IDENTITY_LOOKBACK_SECONDS = 600

InstantQuery = Callable[[str, datetime], list[dict]]
RangeQuery = Callable[[str, datetime, datetime, int], list[dict]]
RulesQuery = Callable[[], list[dict[str, Any]]]  # the `data.groups` of Prometheus' GET /api/v1/rules


@dataclass(frozen=True)
class ServingInstance:
    """One serving instance and the machine it runs on."""

    instance: str
    host: str  # the machine's name, as the instance spells it (port and domain dropped)
    machine: str  # the machine's identity across exporters: one spelling chosen for all of them
    job: str | None
    stack: str | None  # the first profile stack whose own metric names it exports
    # Labels its serving series carry, each with one value for the whole instance (a label whose
    # series disagree, one engine serving two models, is left out), among those discovery reads:
    # the ones the operator's SLO rules match on (`rca.scan.slo_rules`).
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass
class FleetSource:
    """Instant and range queries, counted (the scan reports its own cost)."""

    instant_query: InstantQuery
    range_query: RangeQuery
    concurrency: int = 8
    rules_query: RulesQuery | None = None  # None: this source has no rules to read
    queries: int = 0  # how many this source asked (the scan's cost)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _count(self) -> None:
        with self._lock:  # range queries run on a pool
            self.queries += 1

    def instant(self, promql: str, at: datetime) -> list[dict]:
        self._count()
        with counted_errors():
            return self.instant_query(promql, at)

    def range(self, promql: str, start: datetime, end: datetime, step: int) -> list[dict]:
        self._count()
        with counted_errors():
            return self.range_query(promql, start, end, step)

    def rules(self) -> list[dict[str, Any]]:
        """The rule groups Prometheus evaluates (one query of the scan's cost); none without a rules API."""
        if self.rules_query is None:
            return []
        self._count()
        with counted_errors():
            groups = self.rules_query()
            if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
                raise TypeError("the rules answer's data.groups is not a list of objects")
            return groups


class Machines:
    """Union of host spellings that identity series say are one machine."""

    def __init__(self) -> None:
        self._parent: dict[str, str] = {}

    def of(self, host: str) -> str:
        parent = self._parent.setdefault(host, host)
        if parent != host:
            parent = self._parent[host] = self.of(parent)
        return parent

    def join(self, spellings: list[str]) -> None:
        roots = sorted({self.of(s) for s in spellings})
        for root in roots[1:]:
            self._parent[root] = roots[0]


def machines(source: FleetSource, profile: Profile, at: datetime) -> Machines:
    """Every machine's spellings, one query per identity series of the profile."""
    joined = Machines()
    for spec in profile.identities:
        labels = spec.same + spec.leads_to_same
        for row in source.instant(identity_query(spec.metric, labels, IDENTITY_LOOKBACK_SECONDS), at):
            metric = row.get("metric", {})
            joined.join([host_from_label(metric[name]) for name in labels if metric.get(name)])
    return joined


def discover(
    source: FleetSource, profile: Profile, at: datetime, joined: Machines, labels: Iterable[str] = ()
) -> list[ServingInstance]:
    """Every instance exporting a serving metric, with its stack and machine, sorted by instance;
    with the values its serving series give these `labels` (read by the same query)."""
    serving = re.compile(profile.scopes["serving"].probe)
    wanted = sorted(set(labels) - {GROUP_LABEL, "job", "__name__"})
    names: dict[str, set[str]] = {}
    jobs: dict[str, str | None] = {}
    values: dict[str, dict[str, set[str]]] = {}
    for row in source.instant(discovery_query(profile, wanted), at):
        metric = row.get("metric", {})
        instance = metric.get(GROUP_LABEL)
        if instance:
            name = metric.get("__name__", "")
            names.setdefault(instance, set()).add(name)
            jobs.setdefault(instance, metric.get("job"))
            if serving.fullmatch(name):
                seen = values.setdefault(instance, {})
                for label in wanted:
                    if metric.get(label):
                        seen.setdefault(label, set()).add(metric[label])
    stacks = [(name, re.compile(stack.probe)) for name, stack in profile.stacks.items()]
    targets = []
    for instance in sorted(names):
        exported = names[instance]
        if not any(serving.fullmatch(name) for name in exported):
            continue
        stack = next((name for name, probe in stacks if any(probe.fullmatch(n) for n in exported)), None)
        host = host_from_label(instance)
        own = {label: next(iter(v)) for label, v in values.get(instance, {}).items() if len(v) == 1}
        targets.append(ServingInstance(instance, host, joined.of(host), jobs[instance], stack, own))
    return targets


@dataclass(frozen=True)
class SignalSeries:
    """An instance's samples of one signal and the alternative that gave them."""

    samples: Samples
    source: str


def sample_time(sample: tuple[float, float]) -> float:
    """The key that bisects a series (samples come oldest first) by time."""
    return sample[0]


def _samples(values: list[list]) -> Samples:
    """A range answer's [[time, "value"], ...] as floats, without NaN and infinities."""
    return [(float(ts), float(raw)) for ts, raw in values if math.isfinite(float(raw))]


def assign(
    query: FleetQuery, rows: list[dict], targets: list[ServingInstance], joined: Machines
) -> dict[str, SignalSeries]:
    """Each instance's series of the signal: the first alternative, in the profile's order, that
    applies to its stack and has samples for it (its instance, or its machine for node series)."""
    scopes = {alternative.tag: alternative.scope for alternative in query.alternatives}
    by_key: dict[tuple[str, str], Samples] = {}
    for row in rows:
        metric = row.get("metric", {})
        tag, instance = metric.get(ALTERNATIVE_LABEL, ""), metric.get(GROUP_LABEL)
        if tag not in scopes or not instance:
            continue
        key = instance if scopes[tag] == "serving" else joined.of(host_from_label(instance))
        samples = _samples(row.get("values", []))
        if samples:
            by_key.setdefault((tag, key), samples)
    found: dict[str, SignalSeries] = {}
    for serving in targets:
        for alternative in query.alternatives:
            if alternative.stacks is not None and serving.stack not in alternative.stacks:
                continue
            key = serving.instance if alternative.scope == "serving" else serving.machine
            kept = by_key.get((alternative.tag, key))
            if kept:
                found[serving.instance] = SignalSeries(kept, alternative.source)
                break
    return found


def fetch(
    source: FleetSource,
    targets: list[ServingInstance],
    joined: Machines,
    reads: list[tuple[list[FleetQuery], datetime, datetime, int]],
) -> list[dict[str, dict[str, SignalSeries]]]:
    """Each read's queries over its span (queries, start, end, step) for every instance: one range
    query per query and span, all run concurrently. Returns, per read, {series id: {instance: series}}."""
    with ThreadPoolExecutor(max_workers=source.concurrency) as pool:
        futures = [
            [(q, pool.submit(source.range, q.promql, start, end, step)) for q in queries]
            for queries, start, end, step in reads
        ]
        rows = [[(q, future.result()) for q, future in read] for read in futures]
    return [{q.spec.id: assign(q, found, targets, joined) for q, found in read} for read in rows]
