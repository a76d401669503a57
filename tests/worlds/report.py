"""What users need to trust a ranking, computed over diagnosed worlds: accuracy at k (as RCAEval
defines AC@k and Avg@5), a per-cause confusion matrix, confident wrong answers, calibration
(expected calibration error and a reliability table) and accuracy by severity, time since onset
and missing data."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rca.domain.evidence import Finding, Hypothesis
from tests.worlds.generate import HEALTHY, World

CONFIDENT = 0.5
BINS = 10


@dataclass
class Outcome:
    world: World
    ranked: list[Hypothesis]
    findings: list[Finding] = field(default_factory=list)

    @property
    def top(self) -> Hypothesis:
        return self.ranked[0]

    def hit_at(self, k: int) -> bool:
        return self.world.cause in [h.category for h in self.ranked[:k]]

    @property
    def confident_wrong(self) -> bool:
        return self.top.category != self.world.cause and self.top.confidence >= CONFIDENT

    @property
    def no_candidate(self) -> bool:
        return all(h.category == HEALTHY for h in self.ranked)

    @property
    def missing_data(self) -> bool:
        return any(note.startswith(("no ", "keep-list")) for note in self.world.notes)


def accuracy(outcomes: list[Outcome]) -> dict[str, float]:
    n = max(1, len(outcomes))
    ac = {k: sum(o.hit_at(k) for o in outcomes) / n for k in range(1, 6)}
    return {"n": len(outcomes), "AC@1": ac[1], "AC@3": ac[3], "Avg@5": sum(ac.values()) / 5}


def calibration(outcomes: list[Outcome]) -> tuple[float, list[dict[str, float]]]:
    """Expected calibration error of the top answer's confidence, and the reliability table."""
    bins: dict[int, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        bins[min(BINS - 1, int(o.top.confidence * BINS))].append(o)
    table, ece = [], 0.0
    for index in sorted(bins):
        members = bins[index]
        said = sum(o.top.confidence for o in members) / len(members)
        right = sum(o.hit_at(1) for o in members) / len(members)
        ece += len(members) / max(1, len(outcomes)) * abs(said - right)
        table.append({"from": index / BINS, "to": (index + 1) / BINS, "n": len(members), "said": said, "right": right})
    return ece, table


def _by(outcomes: list[Outcome], key: Callable[[Outcome], str]) -> dict[str, dict[str, float]]:
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups[key(o)].append(o)
    return {name: accuracy(members) for name, members in sorted(groups.items())}


def _by_band(outcomes: list[Outcome], value: Callable[[Outcome], float], edges: list[float]) -> dict[str, Any]:
    """Accuracy per band of `value` between consecutive `edges` (the last open-ended), in the
    edges' order (not the labels' string order, where "12-20" would come before "6-12")."""
    labels = [f"{low:g}-{high:g}" for low, high in zip(edges, edges[1:], strict=False)] + [f">={edges[-1]:g}"]

    def band(o: Outcome) -> str:
        return next((label for label, high in zip(labels, edges[1:], strict=False) if value(o) < high), labels[-1])

    groups = _by(outcomes, band)
    return {label: groups[label] for label in labels if label in groups}


def summarise(outcomes: list[Outcome]) -> dict[str, Any]:
    faults = [o for o in outcomes if o.world.cause != HEALTHY]
    healthy = [o for o in outcomes if o.world.cause == HEALTHY]
    ece, reliability = calibration(outcomes)
    confusion: dict[str, Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        confusion[o.world.cause][o.top.category] += 1
    per_stack = _by(faults, lambda o: o.world.host.stack)
    for stack, row in per_stack.items():  # confident wrong over the stack's worlds, healthy ones included
        members = [o for o in outcomes if o.world.host.stack == stack]
        row["confident_wrong"] = sum(o.confident_wrong for o in members) / len(members)
    per_cause = _by(faults, lambda o: o.world.cause)
    return {
        "all": accuracy(outcomes),
        "faults": accuracy(faults),
        "confident_wrong": sum(o.confident_wrong for o in outcomes) / max(1, len(outcomes)),
        "ece": ece,
        "reliability": reliability,
        "healthy": {
            "n": len(healthy),
            "top_is_no_clear_cause": sum(o.top.category == HEALTHY for o in healthy) / max(1, len(healthy)),
            "no_cause_is_a_candidate": sum(o.no_candidate for o in healthy) / max(1, len(healthy)),
            "busy": accuracy([o for o in healthy if o.world.busy]),
        },
        "per_cause": per_cause,
        "per_stack": per_stack,
        "by_severity": _by_band(faults, lambda o: o.world.severity, [0, 0.33, 0.67, 1.0]),
        "by_minutes_since_onset": _by_band(faults, lambda o: o.world.minutes_since_onset, [0, 6, 12, 20, 45]),
        "by_missing_data": _by(faults, lambda o: "missing" if o.missing_data else "complete"),
        "confusion": {cause: dict(row) for cause, row in sorted(confusion.items())},
    }
