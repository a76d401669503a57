"""The operator's SLO, read from their Prometheus alerting rules.

Operators have already written their latency SLO down, as the alerting rule that pages them
(`rca:ttft_seconds:p95_rate5m > 1`, or the quantile itself with a `job` or `model_name`
selector). Judging every instance against one number in the config file warns too late where their
SLO is stricter and falsely where it is looser, and has to be kept in step with the rules by hand.
So the scan reads the rules (`GET /api/v1/rules`, one query every RCA_SCAN_RULES_REFRESH_SECONDS,
`RuleBook`) and judges each instance against, in this order: the config file's `slo_ttft_seconds`
when the operator wrote it there; the most specific rule covering the instance (most matchers that
pick series), the strictest among equally specific ones; the default, 2 s.

A rule is read as an SLO (`slo_rules`, on a real PromQL parser: `promql_parser`) when it compares
a constant with a `histogram_quantile` over a histogram of the profile's signal queries
(`SLO_SIGNALS`: the metric names, stacks and units come from the profile), possibly scaled or
through recording rules; what it reads and does not is in docs/early_warning.md ("The SLO: read
from the operator's rules").
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any

import promql_parser as pql
import requests
from prometheus_api_client import PrometheusApiClientException

from rca.collect.profile import Profile
from rca.collect.prometheus import short_error
from rca.scan.fleet import FleetSource, ServingInstance
from rca.scan.queries import FLEET_SELECTORS
from rca.signals.slo import TTFT_SIGNAL

log = logging.getLogger(__name__)

ITL_SIGNAL = "itl_p95"
SLO_SIGNALS = (TTFT_SIGNAL, ITL_SIGNAL)  # the profile's latency signals an operator writes an SLO for
DEFAULT_SOURCE = "default"
CONFIG_SOURCE = "config file"
RECORDING_DEPTH = 5  # recording rules followed through at most this many names (a cycle ends there)
SCAN_QUANTILE = 0.95  # what the profile's TTFT query measures, when its own quantile cannot be read
_COMPARISONS = {">": ">", ">=": ">=", "<": ">", "<=": ">="}  # `X < expr` is `expr > X`
_MATCH_ALL = {".*", "(.*)", ".*?"}
_READ_ERRORS = (requests.RequestException, PrometheusApiClientException, ValueError, TypeError, KeyError)


@dataclass(frozen=True)
class Matcher:
    """One label matcher of a rule's selectors, as Prometheus applies it (a missing label is "")."""

    name: str
    op: str  # "=", "!=", "=~" or "!~"
    value: str
    pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.name, "")
        if self.op in ("=", "!="):
            hit = value == self.value
        else:
            hit = self.pattern is not None and self.pattern.fullmatch(value) is not None
        return hit if self.op in ("=", "=~") else not hit

    @property
    def narrows(self) -> bool:
        """Whether it picks some series out (an `=`, or an `=~` other than `.*`): what makes one
        rule more specific than another. Negative matchers leave out, they do not pick."""
        return self.op == "=" or (self.op == "=~" and self.value not in _MATCH_ALL)


@dataclass(frozen=True)
class SloRule:
    """One way an alerting rule states an SLO: on which signal, the threshold in seconds, and
    which series (matchers, stacks) it covers."""

    alert: str
    group: str
    file: str  # the rules file's name, without its folder
    signal: str  # a profile signal id: ttft_p95 or itl_p95
    seconds: float
    comparison: str  # ">" or ">="
    matchers: tuple[Matcher, ...] = ()
    stacks: frozenset[str] | None = None  # the profile stacks whose histogram it reads; None: any
    quantile: float | None = None
    window_seconds: float | None = None  # its rate's range (5 m, llm-d's 1 h)

    @property
    def specificity(self) -> int:
        return sum(m.narrows for m in self.matchers)

    @property
    def source(self) -> str:
        where = ", ".join(part for part in (f"group {self.group}", self.file) if part)
        return f"rule {self.alert} ({where})"

    def covers(self, labels: Mapping[str, str], stack: str | None) -> bool:
        """Whether the rule judges this instance's series: every matcher matches its labels, and its
        histogram is one the instance's stack exports (any, when the stack is unknown)."""
        if self.stacks is not None and stack is not None and stack not in self.stacks:
            return False
        return all(m.matches(labels) for m in self.matchers)

    def judges_quantile(self, quantile: float) -> bool:
        """Whether the scan's quantile can be judged against it: the rule's quantile is the same or
        higher (p95 beyond a p99 SLO means the p99 is beyond it too)."""
        return self.quantile is not None and self.quantile >= quantile - 1e-9


@dataclass(frozen=True)
class Slo:
    """The SLO an instance is judged against and where it came from ("rule X (group g, rules.yml)",
    "config file" or "default")."""

    seconds: float
    source: str


def serving_labels(serving: ServingInstance) -> dict[str, str]:
    """The labels a rule's matchers see on the instance: its serving series' own, instance and job."""
    return {**serving.labels, "instance": serving.instance, **({"job": serving.job} if serving.job else {})}


# ---- reading PromQL --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Reading:
    """What one expression computes, when it is a latency quantile: the histograms (without
    `_bucket`), the factor from their unit to the expression's, and the series it selects."""

    metrics: frozenset[str]
    scale: float
    matchers: tuple[Matcher, ...]
    quantile: float | None
    window_seconds: float | None


@dataclass(frozen=True)
class _Shape:
    """How the profile computes a latency signal in seconds from a set of histograms."""

    signal: str
    metrics: frozenset[str]
    scale: float
    quantile: float
    stacks: frozenset[str] | None
    # Matchers the profile's query has itself (TGI's prefill `method="prefill"`): part of what the
    # signal is, not of which targets a rule covers.
    own: frozenset[Matcher] = frozenset()


Records = Mapping[str, list[tuple[str, dict[str, str]]]]  # recording rule name -> (expression, static labels)


def _op(node: Any) -> str:
    return str(node.op).strip().lower()


def _unparen(node: Any) -> Any:
    while isinstance(node, pql.ParenExpr):
        node = node.expr
    return node


def _constant(node: Any) -> float | None:
    """The value of a constant expression (`1000`, `(2)`, `2 * 1000`, `-1`); None otherwise."""
    node = _unparen(node)
    if isinstance(node, pql.NumberLiteral):
        return float(node.val)
    if isinstance(node, pql.UnaryExpr):
        inner = _constant(node.expr)
        return -inner if inner is not None else None
    if isinstance(node, pql.BinaryExpr):
        left, right = _constant(node.lhs), _constant(node.rhs)
        if left is None or right is None:
            return None
        op = _op(node)
        if op == "+":
            return left + right
        if op == "-":
            return left - right
        if op == "*":
            return left * right
        if op == "/" and right != 0:
            return left / right
    return None


def _name(base: str) -> str:
    return base.removesuffix("_bucket")


def _matcher(raw: Any) -> Matcher | None:
    """A parsed matcher as ours; None for a regex Python cannot compile (the rule is then not read)."""
    op = {"equal": "=", "notequal": "!=", "re": "=~", "notre": "!~"}.get(str(raw.op).rsplit(".", 1)[-1].lower())
    if op is None:
        return None
    pattern = None
    if op in ("=~", "!~"):
        try:
            pattern = re.compile(raw.value)
        except re.error:
            return None
    return Matcher(raw.name, op, raw.value, pattern)


def _children(node: Any) -> list[Any]:
    if isinstance(node, pql.Call):
        return list(node.args)
    if isinstance(node, pql.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, pql.AggregateExpr):
        return [node.expr] + ([node.param] if isinstance(node.param, pql.Expr) else [])
    if isinstance(node, pql.ParenExpr | pql.UnaryExpr | pql.SubqueryExpr):
        return [node.expr]
    return []


def _selectors(node: Any, window: float | None = None) -> list[tuple[Any, float | None]]:
    """Every vector selector under `node`, with the range of the matrix it sits in."""
    if isinstance(node, pql.MatrixSelector):
        return [(node.vector_selector, node.range.total_seconds())]
    if isinstance(node, pql.VectorSelector):
        return [(node, window)]
    return [found for child in _children(node) for found in _selectors(child, window)]


def _selector_parts(selector: Any) -> tuple[str | None, tuple[Matcher, ...]] | None:
    """A selector's metric name (also from `{__name__="..."}`) and its other matchers; None when a
    matcher cannot be read."""
    name = selector.name
    matchers: list[Matcher] = []
    for raw in [*selector.matchers.matchers, *(m for group in selector.matchers.or_matchers for m in group)]:
        matcher = _matcher(raw)
        if matcher is None:
            return None
        if matcher.name == "__name__" and matcher.op == "=":
            name = name or matcher.value
        else:
            matchers.append(matcher)
    return name, tuple(matchers)


def _quantile_reading(call: Any) -> _Reading | None:
    args = list(call.args)
    if len(args) != 2:
        return None
    names: set[str] = set()
    matchers: list[Matcher] = []
    windows: list[float] = []
    for selector, window in _selectors(args[1]):
        parts = _selector_parts(selector)
        if parts is None or parts[0] is None:
            return None
        names.add(_name(parts[0]))
        matchers.extend(parts[1])
        if window is not None:
            windows.append(window)
    if not names:
        return None
    return _Reading(frozenset(names), 1.0, tuple(matchers), _constant(args[0]), max(windows) if windows else None)


def _readings(node: Any, records: Records, depth: int = 0) -> list[_Reading]:
    """What `node` computes, when it is a latency quantile (possibly scaled, summed, or recorded);
    one reading per way it may be computed (a recording rule defined for several stacks)."""
    node = _unparen(node)
    if isinstance(node, pql.Call) and node.func.name == "histogram_quantile":
        reading = _quantile_reading(node)
        return [reading] if reading else []
    if isinstance(node, pql.BinaryExpr):
        op = _op(node)
        if op in ("*", "/"):
            right = _constant(node.rhs)
            if right:
                factor = right if op == "*" else 1 / right
                return [replace(r, scale=r.scale * factor) for r in _readings(node.lhs, records, depth)]
            left = _constant(node.lhs)
            if left and op == "*":
                return [replace(r, scale=r.scale * left) for r in _readings(node.rhs, records, depth)]
            return []
        if op == "+":
            return [
                _Reading(
                    a.metrics | b.metrics,
                    a.scale,
                    a.matchers + b.matchers,
                    a.quantile if a.quantile == b.quantile else None,
                    max((w for w in (a.window_seconds, b.window_seconds) if w is not None), default=None),
                )
                for a in _readings(node.lhs, records, depth)
                for b in _readings(node.rhs, records, depth)
                if math.isclose(a.scale, b.scale)
            ]
        return []
    if isinstance(node, pql.VectorSelector) and depth < RECORDING_DEPTH:
        parts = _selector_parts(node)
        name = parts[0] if parts else None
        if parts is None or name is None or name not in records:
            return []
        matchers = parts[1]
        found: list[_Reading] = []
        for expression, static in records[name]:
            # A matcher on a label the recording rule sets itself picks its definitions; the others
            # go on to the series the definition reads.
            if not all(m.matches(static) for m in matchers if m.name in static):
                continue
            carried = tuple(m for m in matchers if m.name not in static)
            parsed = _parse(expression)
            if parsed is None:
                continue
            for reading in _readings(parsed, records, depth + 1):
                found.append(replace(reading, matchers=reading.matchers + carried))
        return found
    return []


def _comparisons(node: Any) -> list[tuple[Any, str, float]]:
    """Every `expr > X` (or `>=`, or `X < expr`) the alert fires on: (expr, ">" or ">=", X)."""
    node = _unparen(node)
    if not isinstance(node, pql.BinaryExpr):
        return []
    op = _op(node)
    if op in ("and", "or"):
        return _comparisons(node.lhs) + _comparisons(node.rhs)
    if op == "unless":
        return _comparisons(node.lhs)
    if op not in _COMPARISONS or (node.modifier is not None and node.modifier.return_bool):
        return []
    right, left = _constant(node.rhs), _constant(node.lhs)
    if op in (">", ">=") and right is not None and left is None:
        return [(node.lhs, _COMPARISONS[op], right)]
    if op in ("<", "<=") and left is not None and right is None:
        return [(node.rhs, _COMPARISONS[op], left)]
    return []


def _parse(expression: str) -> Any:
    """The expression's syntax tree; None when it does not parse (logged: the rule is skipped)."""
    try:
        return pql.parse(expression)
    except Exception as exc:  # the Rust parser raises ValueError; nothing else it raises matters here
        log.debug("rules: cannot parse %r: %s", expression[:200], exc)
        return None


def shapes(profile: Profile) -> list[_Shape]:
    """How the profile computes each latency signal of SLO_SIGNALS, per set of histograms: what a
    rule's quantile is compared with (the TTFT metric names come from the profile, not a list)."""
    found: list[_Shape] = []
    for spec in profile.signals:
        if spec.id not in SLO_SIGNALS:
            continue
        for alternative in spec.queries:
            if not alternative.placeholders() <= FLEET_SELECTORS.keys():
                continue
            parsed = _parse(alternative.render(dict(FLEET_SELECTORS)))
            for reading in _readings(parsed, {}) if parsed is not None else []:
                stacks = frozenset(alternative.stacks) if alternative.stacks is not None else None
                quantile = reading.quantile or SCAN_QUANTILE
                own = frozenset(reading.matchers)
                found.append(_Shape(spec.id, reading.metrics, reading.scale, quantile, stacks, own))
    merged: dict[tuple[str, frozenset[str]], _Shape] = {}
    for shape in found:  # one histogram read for several stacks (Triton's vLLM backend): their union
        key = (shape.signal, shape.metrics)
        kept = merged.get(key)
        if kept is None:
            merged[key] = shape
        elif kept.stacks is not None:
            stacks = None if shape.stacks is None else kept.stacks | shape.stacks
            merged[key] = replace(kept, stacks=stacks, own=kept.own & shape.own)
    return list(merged.values())


def slo_rules(groups: Iterable[Mapping[str, Any]], profile_shapes: list[_Shape]) -> list[SloRule]:
    """The SLO rules among the groups of a `GET /api/v1/rules` answer (its `data.groups`)."""
    records: dict[str, list[tuple[str, dict[str, str]]]] = {}
    alerts: list[tuple[str, str, str, str]] = []  # (alert, group, file, expression)
    for group in groups:
        rules = group.get("rules")
        for rule in rules if isinstance(rules, list) else []:
            if (
                not isinstance(rule, dict)
                or not isinstance(rule.get("query"), str)
                or not isinstance(rule.get("name"), str)
            ):
                continue
            query, name = rule["query"], rule["name"]
            if rule.get("type") == "recording":
                labels = rule.get("labels")
                static = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
                records.setdefault(name, []).append((query, static))
            elif rule.get("type") == "alerting":
                file = PurePosixPath(str(group.get("file") or "")).name
                alerts.append((name, str(group.get("name") or ""), file, query))
    found: list[SloRule] = []
    for alert, group_name, file, query in alerts:
        try:
            found += _rules_of(alert, group_name, file, query, records, profile_shapes)
        except (AttributeError, TypeError, ValueError) as exc:  # a syntax tree of a shape not foreseen
            log.debug("rules: %s not read: %s", alert, exc)
    return found


def _rules_of(
    alert: str, group: str, file: str, query: str, records: Records, profile_shapes: list[_Shape]
) -> list[SloRule]:
    """The SLO readings of one alerting rule: one per comparison, way of computing it, and profile
    shape its histograms match (the threshold in seconds, the shape's own matchers left out)."""
    parsed = _parse(query)
    if parsed is None:
        return []
    return [
        SloRule(
            alert=alert,
            group=group,
            file=file,
            signal=shape.signal,
            seconds=threshold / reading.scale * shape.scale,
            comparison=comparison,
            matchers=tuple(dict.fromkeys(m for m in reading.matchers if m not in shape.own)),
            stacks=shape.stacks,
            quantile=reading.quantile,
            window_seconds=reading.window_seconds,
        )
        for expression, comparison, threshold in _comparisons(parsed)
        for reading in _readings(expression, records)
        for shape in profile_shapes
        if shape.metrics == reading.metrics and _positive(threshold / reading.scale * shape.scale)
    ]


def _positive(seconds: float) -> bool:
    return math.isfinite(seconds) and seconds > 0


def choose(rules: Iterable[SloRule], labels: Mapping[str, str], stack: str | None) -> SloRule | None:
    """The rule that sets this instance's SLO: among those covering it, the most specific, and of
    those the strictest (several rules at one level: the instance must keep them all)."""
    covering = [rule for rule in rules if rule.covers(labels, stack)]
    if not covering:
        return None
    return min(covering, key=lambda rule: (-rule.specificity, rule.seconds, rule.alert, rule.group))


# ---- the rules the scan keeps ------------------------------------------------------------------


@dataclass
class RuleBook:
    """The SLO rules last read from Prometheus, read again every `refresh_seconds` (never on
    every scan: the rules change with a deploy of the rules, not between two scans). When the rules
    API cannot be read (down, an answer that is not Prometheus', a proxy without it), the last rules
    read are kept and the outage is logged once; it is tried again at the next refresh."""

    profile: Profile
    refresh_seconds: float
    explicit_ttft: float | None = None  # the config file's slo_ttft_seconds, when the operator set it
    default_ttft: float = 2.0
    clock: Callable[[], float] = time.monotonic
    rules: list[SloRule] = field(default_factory=list)
    read_at: float | None = None  # the clock when it last asked, answered or not
    failing: bool = False
    _shapes: list[_Shape] = field(init=False)
    _quantiles: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        self._shapes = shapes(self.profile)
        self._quantiles = {
            s.signal: min(t.quantile for t in self._shapes if t.signal == s.signal) for s in self._shapes
        }

    @property
    def needed(self) -> bool:
        """Whether the rules decide anything: not when the config file sets the TTFT SLO."""
        return self.explicit_ttft is None

    def refresh(self, source: FleetSource) -> bool:
        """Read the rules when the last read is `refresh_seconds` old (one query of the scan's
        cost); True when they were read now."""
        now = self.clock()
        if not self.needed or (self.read_at is not None and now - self.read_at < self.refresh_seconds):
            return False
        self.read_at = now
        try:
            groups = source.rules()
        except _READ_ERRORS as exc:
            if not self.failing:
                log.warning(
                    "rules: cannot read Prometheus' rules (%s: %s); keeping the %d SLO rule(s) read before, "
                    "trying again in %.0f s",
                    type(exc).__name__,
                    short_error(exc),
                    len(self.rules),
                    self.refresh_seconds,
                )
            self.failing = True
            return False
        if self.failing:
            log.info("rules: Prometheus' rules read again")
        self.failing = False
        rules = slo_rules(groups, self._shapes)
        if rules != self.rules:
            names = ", ".join(sorted({rule.alert for rule in rules})) or "none"
            log.info("rules: %d SLO rule reading(s) from Prometheus' alerting rules: %s", len(rules), names)
        self.rules = rules
        return True

    def labels(self) -> set[str]:
        """The label names the rules' matchers look at (discovery reads them on every instance)."""
        return {m.name for rule in self.rules for m in rule.matchers} - {"le"}

    def rule_for(self, signal: str, serving: ServingInstance) -> SloRule | None:
        """The rule setting this signal's SLO for the instance, if any."""
        quantile = self._quantiles.get(signal, SCAN_QUANTILE)
        usable = (rule for rule in self.rules if rule.signal == signal and rule.judges_quantile(quantile))
        return choose(usable, serving_labels(serving), serving.stack)

    def ttft_slo(self, serving: ServingInstance) -> Slo:
        """The TTFT SLO the instance is judged against, and where it came from."""
        if self.explicit_ttft is not None:
            return Slo(self.explicit_ttft, CONFIG_SOURCE)
        rule = self.rule_for(TTFT_SIGNAL, serving)
        return Slo(rule.seconds, rule.source) if rule else Slo(self.default_ttft, DEFAULT_SOURCE)


def slo_words(seconds: float, source: str) -> str:
    """The SLO in a sentence: "TTFT SLO 1 s from rule LLMTTFTSLOBreach (group g, rules.yml)"."""
    value = f"TTFT SLO {seconds:g} s"
    if source == DEFAULT_SOURCE:
        return f"{value} (default)"
    if source == CONFIG_SOURCE:
        return f"{value} from the config file"
    return f"{value} from {source}"
