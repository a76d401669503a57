"""Deterministic ranking of root causes from findings (the rules analyst).

Scoring, per category of `taxonomy.yaml`:
  - it is a candidate only if one of its anchor findings is breached;
  - score = sum of weights of breached supporting findings - sum of breached contradicting ones;
  - confidence = 0.9 * max(score, 0) / (sum of all its support weights), so missing or healthy
    supporting evidence lowers confidence, and a contradiction can rule a cause out.
With no candidate, `no_clear_cause` ranks first; otherwise it ranks last.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from rca.signals.findings import Finding

TAXONOMY_FILE = Path(__file__).with_name("taxonomy.yaml")
NO_CLEAR_CAUSE = "no_clear_cause"
MAX_CONFIDENCE = 0.9


class Category(BaseModel):
    model_config = {"extra": "forbid"}

    title: str
    anchors: list[str]
    supports: dict[str, float]
    contradicts: dict[str, float]
    next_steps: list[str]


@lru_cache(maxsize=1)
def taxonomy() -> dict[str, Category]:
    raw = yaml.safe_load(TAXONOMY_FILE.read_text())["categories"]
    return {name: Category.model_validate(spec) for name, spec in raw.items()}


@dataclass
class Hypothesis:
    rank: int
    category: str
    title: str
    confidence: float
    evidence: list[str]
    contradicting: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    explanation: str = ""
    score: float = 0.0
    analyst: str = "rules"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _explain(findings: dict[str, Finding], keys: list[str]) -> str:
    return "; ".join(findings[k].detail for k in keys)


def rank(findings: list[Finding], limit: int = 5) -> list[Hypothesis]:
    """Ranked hypotheses over the whole taxonomy, best first, `no_clear_cause` included."""
    by_key = {f.key: f for f in findings}
    breached = {f.key for f in findings if f.breached}
    candidates: list[Hypothesis] = []
    for name, cat in taxonomy().items():
        if name == NO_CLEAR_CAUSE or not breached.intersection(cat.anchors):
            continue
        evidence = [k for k in cat.supports if k in breached]
        against = [k for k in cat.contradicts if k in breached]
        score = sum(cat.supports[k] for k in evidence) - sum(cat.contradicts[k] for k in against)
        confidence = MAX_CONFIDENCE * max(score, 0.0) / sum(cat.supports.values())
        explanation = _explain(by_key, evidence)
        if against:
            explanation += ". Against it: " + _explain(by_key, against)
        candidates.append(Hypothesis(rank=0, category=name, title=cat.title, confidence=round(confidence, 3),
                                     evidence=evidence, contradicting=against, next_steps=cat.next_steps,
                                     explanation=explanation, score=score))
    order = list(taxonomy())
    candidates = [c for c in candidates if c.confidence > 0]
    candidates.sort(key=lambda h: (-h.confidence, -h.score, order.index(h.category)))
    top = candidates[0].confidence if candidates else None  # even when `limit` leaves no room for it
    candidates = candidates[: limit - 1]
    candidates.append(_no_clear_cause(findings, top=top))
    for position, hypothesis in enumerate(candidates, start=1):
        hypothesis.rank = position
    return candidates


def _no_clear_cause(findings: list[Finding], top: float | None) -> Hypothesis:
    cat = taxonomy()[NO_CLEAR_CAUSE]
    signals = [f for f in findings if f.kind == "signal"]
    measured = [f for f in signals if f.status in ("breached", "ok")]
    healthy = [f.key for f in measured if not f.breached]
    if top is None:
        confidence = 0.8 if len(measured) * 2 >= len(signals) and signals else 0.4
        missing = [f.key for f in signals if f.status not in ("breached", "ok")]
        explanation = "No finding points at a cause."
        if missing:
            explanation += f" Unavailable data: {', '.join(missing)}."
    else:
        confidence = round(max(0.05, (1 - top) / 2), 3)
        explanation = "Alternative if the ranked causes are ruled out."
    return Hypothesis(rank=0, category=NO_CLEAR_CAUSE, title=cat.title, confidence=confidence,
                      evidence=healthy, next_steps=cat.next_steps, explanation=explanation)
