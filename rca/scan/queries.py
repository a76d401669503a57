"""The profile's signal queries, made fleet-wide: one PromQL query per signal for every instance.

An investigation renders a signal's query for one instance (`$serving` = that instance's selector)
and aggregates it to one value. The scan renders the same query for every instance at once: each
aggregation is grouped `by (instance)` as well, and the selectors match every instance. The
signal's alternatives are joined with `or`, each tagged with its position in a label of its own
(`rca_alternative`), so one query returns every alternative that has data and the scan keeps, per
instance, the first one as an investigation would. Thresholds, comparisons and the queries
themselves stay where they are defined: the profile (`rca/profiles/`), with the operator's
overrides (`profile_for`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rca.collect.profile import Profile, QueryAlternative, SeriesSpec, SignalSpec

GROUP_LABEL = "instance"
ALTERNATIVE_LABEL = "rca_alternative"
# What every series of a scope carries: the scan reads all of them.
FLEET_SELECTORS = {"serving": f'{GROUP_LABEL}!=""', "node": f'{GROUP_LABEL}!=""'}

_AGGREGATION_BY = re.compile(r"\b(sum|avg|max|min|count)\s+by\s*\(([^)]*)\)")
_AGGREGATION = re.compile(r"\b(sum|avg|max|min|count)\s*\(")
_MATCHING_ON = re.compile(r"\bon\s*\(([^)]*)\)")
_SCALAR = re.compile(r"\bscalar\s*\(")
_WITHOUT = re.compile(r"\b(without|ignoring)\s*\(")


class NotFleetWide(ValueError):
    """A query that cannot be grouped by instance (it drops labels in a way the rewrite cannot follow)."""


def _with_group(labels: str) -> str:
    names = [name.strip() for name in labels.split(",") if name.strip()]
    return ", ".join([GROUP_LABEL, *[name for name in names if name != GROUP_LABEL]])


def per_instance(promql: str) -> str:
    """`promql` computed per instance: every aggregation and vector matching keeps `instance`,
    and a `scalar(...)` operand becomes a vector matched on it.

    `sum(rate(x[5m])) / (sum(rate(y[5m])) > 0)` -> `sum by (instance) (rate(x[5m])) /
    (sum by (instance) (rate(y[5m])) > 0)`. Queries that drop labels with `without` or `ignoring`
    are refused (`NotFleetWide`): which labels survive depends on the series, not on the text.
    """
    if _WITHOUT.search(promql):
        raise NotFleetWide("uses without/ignoring")
    text = _AGGREGATION_BY.sub(lambda m: f"{m.group(1)} by ({_with_group(m.group(2))})", promql)
    text = _AGGREGATION.sub(lambda m: f"{m.group(1)} by ({GROUP_LABEL}) (", text)
    text = _MATCHING_ON.sub(lambda m: f"on ({_with_group(m.group(1))})", text)
    return _SCALAR.sub(f"on ({GROUP_LABEL}) (", text)


@dataclass(frozen=True)
class FleetAlternative:
    """One alternative of a signal as the scan runs it: its place in the profile's order, the
    `rca_alternative` value of its series (alternatives with the same PromQL for different stacks
    share one), its source and scope."""

    index: int
    tag: str
    source: str
    scope: str
    stacks: tuple[str, ...] | None


@dataclass(frozen=True)
class FleetQuery:
    """One signal for the whole fleet: the PromQL and its alternatives, in the profile's order."""

    spec: SeriesSpec
    promql: str
    alternatives: list[FleetAlternative]


def _renderable(spec: SeriesSpec, alternative: QueryAlternative, values: dict[str, str]) -> bool:
    return spec.scope_of(alternative) in FLEET_SELECTORS and alternative.placeholders() <= values.keys()


def fleet_query(spec: SeriesSpec, params: dict[str, str]) -> FleetQuery | None:
    """The signal's alternatives that can run fleet-wide, in the profile's order, as one query;
    None when none can (a signal of the GPU or pod scope, or one whose parameters are unset)."""
    values = FLEET_SELECTORS | params
    tags: dict[str, str] = {}  # PromQL -> its tag: each distinct query is evaluated once
    alternatives: list[FleetAlternative] = []
    for index, alternative in enumerate(spec.queries):
        if not _renderable(spec, alternative, values):
            continue
        try:
            promql = per_instance(alternative.render(values))
        except NotFleetWide:
            continue
        tag = tags.setdefault(promql, str(index))
        stacks = tuple(alternative.stacks) if alternative.stacks is not None else None
        alternatives.append(FleetAlternative(index, tag, alternative.source, spec.scope_of(alternative), stacks))
    if not alternatives:
        return None
    parts = [f'label_replace({promql}, "{ALTERNATIVE_LABEL}", "{tag}", "", "")' for promql, tag in tags.items()]
    return FleetQuery(spec=spec, promql="\n or ".join(parts), alternatives=alternatives)


def early_signals(profile: Profile) -> list[SignalSpec]:
    """The early-degradation signals the scan forecasts: the profile's `kind: signal` signals with
    an absolute threshold, in a scope the scan reads (serving or node)."""
    return [
        spec
        for spec in profile.signals
        if spec.kind == "signal" and spec.threshold is not None and spec.scope in FLEET_SELECTORS
    ]


def discovery_query(profile: Profile, labels: list[str] | None = None) -> str:
    """Which metric names each instance exports, among those that prove a serving instance and
    those that tell its stack apart: one query finds every instance and its stack (and the values of
    these other `labels`, the ones the operator's SLO rules match on)."""
    names = [profile.scopes["serving"].probe, *(stack.probe for stack in profile.stacks.values())]
    grouped = ", ".join([GROUP_LABEL, "job", "__name__", *(labels or [])])
    return f'group by ({grouped}) ({{__name__=~"{"|".join(names)}",{GROUP_LABEL}!=""}})'


def identity_query(metric: str, labels: list[str], lookback_seconds: int) -> str:
    """Every spelling of every machine an identity series relates, fleet-wide."""
    return f"group by ({', '.join(labels)}) (last_over_time({metric}[{lookback_seconds}s]))"
