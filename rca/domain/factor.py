"""A fleet incident's common factor: what the affected hosts share that their healthy peers (the
same model, namespace or job, not alerting) lack. Pure, so that the decision is tested without
Prometheus (rca.collect.peers reads the facts) and the API, Slack and the page show one verdict.

A factor is named only when it separates the two cleanly: every affected host has it, and at
most a fifth of the healthy ones measured for it do. With no healthy peer measured nothing can be
judged, and nothing is claimed. A rollout (every affected host started shortly before onset, few
healthy ones did) is a factor of its own, and turns an image's factor into "roll back".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

ROLLOUT_BEFORE_ONSET = timedelta(minutes=90)  # a start this long before onset (or less) counts as a rollout
HEALTHY_SHARE = 0.2  # at most this share of the healthy hosts measured may share a factor
# Attributes in order of how specific a cause they point to (an image before the node pool it runs
# on), by name or by prefix (`engine_config:<flag>`, `node_label:<name>`), then any other.
SPECIFIC = ("image", "engine_config:", "model", "node", "node_label:")
ROLLOUT = "rollout"


class Verdict(StrEnum):
    FOUND = "found"  # a factor separates the affected hosts from the healthy ones
    NONE = "none"  # none does
    UNJUDGED = "unjudged"  # no healthy peer was measured: nothing to compare with


@dataclass(frozen=True)
class HostFacts:
    """What the metrics know about one host: each attribute's values (a pod may run several
    images), and when its engine last started (None: unknown)."""

    host: str
    affected: bool
    attributes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    started: datetime | None = None


@dataclass(frozen=True)
class CommonFactor:
    """The verdict on a fleet's affected hosts against their healthy peers, with the counts."""

    verdict: Verdict
    affected_hosts: int
    healthy_hosts: int
    attribute: str | None = None
    value: str | None = None
    affected: int = 0  # affected hosts with the factor (all of those measured for it)
    affected_of: int = 0
    healthy: int = 0  # healthy hosts with the factor
    healthy_of: int = 0  # healthy hosts measured for the attribute
    rollout_minutes: int | None = None  # the affected hosts (re)started this long before onset
    next_step: str | None = None

    def line(self) -> str:
        """`image vllm/vllm-openai:v0.12.1: 3 of 3 affected, 0 of 3 healthy; rolled out 40 min
        before onset: roll back`, or the words for none and unjudged."""
        if self.verdict == Verdict.UNJUDGED:
            return (
                f"Common factor cannot be judged: no healthy peers of the {self.affected_hosts} "
                "affected hosts to compare with"
            )
        if self.verdict == Verdict.NONE:
            return (
                f"No common factor among the {self.affected_hosts} affected hosts "
                f"and their {self.healthy_hosts} healthy peers"
            )
        what = f"restarted {self.rollout_minutes} min before onset" if self.attribute == ROLLOUT else self.named()
        rollout = (
            f"; rolled out {self.rollout_minutes} min before onset"
            if self.rollout_minutes is not None and self.attribute != ROLLOUT
            else ""
        )
        counts = f"{self.affected} of {self.affected_of} affected, {self.healthy} of {self.healthy_of} healthy"
        return f"Common factor: {what}: {counts}{rollout}: {self.next_step}"

    def named(self) -> str:
        """The factor in words: `image vllm/vllm-openai:v0.12.1`, `engine flag
        enable_prefix_caching=False`, `node label pool=h100`."""
        for prefix, words in (("engine_config:", "engine flag"), ("node_label:", "node label")):
            if self.attribute and self.attribute.startswith(prefix):
                return f"{words} {self.attribute.removeprefix(prefix)}={self.value}"
        return f"{self.attribute} {self.value}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommonFactor:
        return cls(**(dict(data) | {"verdict": Verdict(data["verdict"])}))


def decide(facts: Sequence[HostFacts], onset: datetime) -> CommonFactor | None:
    """The common factor of the affected hosts among `facts`, None when fewer than two are
    affected (a host failing alone needs no factor). The most specific attribute value that
    every affected host has and at most HEALTHY_SHARE of the healthy ones measured do; else a
    rollout; else none. Unjudged when no healthy host was measured at all."""
    affected = [f for f in facts if f.affected]
    healthy = [f for f in facts if not f.affected]
    if len(affected) < 2:
        return None
    base = CommonFactor(Verdict.NONE, len(affected), len(healthy))
    if not healthy:
        return CommonFactor(Verdict.UNJUDGED, len(affected), 0)
    rollout = _rollout(affected, healthy, onset)
    for attribute in sorted({a for f in facts for a in f.attributes}, key=_specificity):
        found = _separating(attribute, affected, healthy)
        if found is None:
            continue
        value, sharing, measured = found
        minutes = rollout[0] if rollout else None
        return CommonFactor(
            Verdict.FOUND,
            len(affected),
            len(healthy),
            attribute,
            value,
            len(affected),
            len(affected),
            sharing,
            measured,
            minutes,
            next_step(attribute, value, minutes is not None),
        )
    if rollout is not None:
        minutes, sharing, measured = rollout
        return CommonFactor(
            Verdict.FOUND,
            len(affected),
            len(healthy),
            ROLLOUT,
            None,
            len(affected),
            len(affected),
            sharing,
            measured,
            minutes,
            next_step(ROLLOUT, None, True),
        )
    return base


def _specificity(attribute: str) -> tuple[int, str]:
    rank = next(
        (
            i
            for i, name in enumerate(SPECIFIC)
            if attribute == name or (name.endswith(":") and attribute.startswith(name))
        ),
        len(SPECIFIC),
    )
    return rank, attribute


def _clean(sharing: int, measured: int) -> bool:
    return measured > 0 and sharing <= HEALTHY_SHARE * measured


def _separating(
    attribute: str, affected: Sequence[HostFacts], healthy: Sequence[HostFacts]
) -> tuple[str, int, int] | None:
    """The value of `attribute` every affected host has and few healthy ones measured for it do,
    with how many healthy share it and how many were measured; the least shared one first."""
    values = [f.attributes.get(attribute) for f in affected]
    if any(not v for v in values):
        return None  # not measured on every affected host: nothing can be said of all of them
    shared = frozenset.intersection(*(v for v in values if v))
    measured = [f.attributes[attribute] for f in healthy if f.attributes.get(attribute)]
    options = sorted((sum(value in v for v in measured), value) for value in shared)
    return next(((value, sharing, len(measured)) for sharing, value in options if _clean(sharing, len(measured))), None)


def _rollout(
    affected: Sequence[HostFacts], healthy: Sequence[HostFacts], onset: datetime
) -> tuple[int, int, int] | None:
    """(minutes before onset of the earliest affected start, healthy hosts started as recently,
    healthy hosts measured) when every affected host (re)started within ROLLOUT_BEFORE_ONSET
    before onset and few healthy ones did."""
    starts = [f.started for f in affected]
    if any(s is None or not onset - ROLLOUT_BEFORE_ONSET <= s <= onset for s in starts):
        return None
    measured = [f.started for f in healthy if f.started is not None]
    recent = sum(onset - ROLLOUT_BEFORE_ONSET <= s <= onset for s in measured if s is not None)
    if not _clean(recent, len(measured)):
        return None
    earliest = min(s for s in starts if s is not None)
    return round((onset - earliest).total_seconds() / 60), recent, len(measured)


def next_step(attribute: str, value: str | None, rolled_out: bool) -> str:
    """What to do about a factor, in a few words."""
    if attribute == "image":
        return "roll back" if rolled_out else f"compare {value} with the healthy hosts' and roll back if it is new"
    if attribute.startswith("engine_config:"):
        flag = f"{attribute.removeprefix('engine_config:')}={value}"
        return f"roll back {flag}" if rolled_out else f"compare the engine's {flag} with the healthy hosts'"
    if attribute == ROLLOUT:
        return "check what the rollout changed; roll back"
    if attribute == "model":
        return f"every affected replica serves {value}: check its traffic and its configuration"
    if attribute == "node" or attribute.startswith("node_label:"):
        return "cordon those nodes and check their hardware, or move the pods off them"
    return f"check what {attribute}={value} changes on the affected hosts"
