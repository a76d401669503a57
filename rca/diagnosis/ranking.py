"""Deterministic ranking of root causes from findings (the rules analyst).

Scoring, per category of `taxonomy.yaml` (docs/diagnosis.md has the worked rules):
  - it is a candidate only if one of its anchors holds (a finding, or a set that breaches together)
    and moved in the window (not breached all along);
  - score = sum of weights of breached supporting findings - sum of breached contradicting ones
    (half weight for a finding breached for the whole window: it did not just change), plus a
    lead bonus when its anchor clearly moved before every other candidate's (causes come before
    their symptoms);
  - confidence = 0.9 * strength * (0.6 + 0.4 * coverage), where strength = min(1, support / full)
    - contradiction / full (at least 0), full is the sum of its support weights unless the
    category sets `full_at`, and
    coverage is the weight share of its supporting and contradicting findings that could be
    measured: a cause whose look-alikes could not be ruled out is less certain.
`no_clear_cause` ranks first with no candidate; otherwise it takes the doubt left by the best
cause, and ranks above a cause that is weaker than that doubt.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from rca.config import ConfigError
from rca.config.loader import read_yaml
from rca.domain.evidence import Finding, Hypothesis, is_chronic
from rca.domain.status import MEASURED

TAXONOMY_FILE = Path(__file__).with_name("taxonomy.yaml")
NO_CLEAR_CAUSE = "no_clear_cause"
MAX_CONFIDENCE = 0.9
UNCOVERED_FLOOR = 0.6  # the confidence factor of a cause none of whose evidence could be measured
LEAD_BONUS = 0.75  # score added to the cause whose anchor moved first, by at least LEAD_MINUTES
LEAD_MINUTES = 3.0
CHRONIC_FACTOR = 0.5  # weight of a finding breached for the whole window (no baseline)
UNEXPLAINED_CONFIDENCE = 0.4  # no_clear_cause when findings are breached but none anchors a cause


Anchor = str | list[str]  # a finding id, or findings that must all be breached together


class Category(BaseModel):
    model_config = {"extra": "forbid"}

    title: str
    # A cause is a candidate only when one of its anchors holds: a finding that this cause (or few
    # others) moves, or a set that must breach together, e.g. requests held in the queue *while* the
    # GPU idles. A symptom that every cause moves (`symptoms:`) may be part of a set, never alone.
    anchors: list[Anchor]
    supports: dict[str, float]
    contradicts: dict[str, float]
    next_steps: list[str]
    # The score at which the evidence is complete. Default: every supporting weight. Lower for a
    # cause whose anchors are alternatives (a degraded GPU shows XID errors *or* thermal throttling).
    full_at: float | None = Field(default=None, gt=0)

    def full_score(self) -> float:
        return self.full_at or sum(self.supports.values())

    def anchor_sets(self) -> list[frozenset[str]]:
        """Each anchor as the set of findings that must all be breached."""
        return [frozenset([a]) if isinstance(a, str) else frozenset(a) for a in self.anchors]

    def anchor_keys(self) -> frozenset[str]:
        """Every finding named in an anchor."""
        return frozenset().union(*self.anchor_sets())

    def held_anchors(self, breached: set[str]) -> list[frozenset[str]]:
        """The anchors that the breached findings satisfy."""
        return [anchor for anchor in self.anchor_sets() if anchor <= breached]

    def describe_anchors(self) -> str:
        """`a, b, c + d` for messages: alternatives by commas, sets joined by `+`."""
        return ", ".join(anchor if isinstance(anchor, str) else " + ".join(anchor) for anchor in self.anchors)


@lru_cache(maxsize=1)
def _taxonomy_file() -> dict[str, Any]:
    raw = read_yaml(TAXONOMY_FILE, "taxonomy")
    if not isinstance(raw, dict):
        raise ConfigError(f"taxonomy: {TAXONOMY_FILE} is not a mapping")
    return raw


@lru_cache(maxsize=1)
def taxonomy() -> dict[str, Category]:
    categories = {name: Category.model_validate(spec) for name, spec in _taxonomy_file()["categories"].items()}
    for name, cat in categories.items():
        for anchor in cat.anchor_sets():
            if anchor <= symptoms():
                raise ConfigError(
                    f"taxonomy: {name}: the anchor {' + '.join(sorted(anchor))} is only symptoms, which every "
                    "cause moves; pair it with a finding of this cause's own"
                )
    return categories


def symptoms() -> frozenset[str]:
    """Latency findings every cause moves: evidence for many causes, lead for none."""
    return frozenset(_taxonomy_file().get("symptoms", []))


def _explain(findings: dict[str, Finding], keys: list[str]) -> str:
    return "; ".join(findings[k].detail for k in keys)


def _weight(finding: Finding) -> float:
    """A breach that was there all along says less about what just went wrong."""
    return CHRONIC_FACTOR if is_chronic(finding) else 1.0


def _measured(key: str, findings: dict[str, Finding]) -> bool:
    return key in findings and findings[key].status in MEASURED


def _expected(cat: Category, findings: dict[str, Finding]) -> dict[str, float]:
    """The category's evidence (for and against) that should have been measured: what this
    deployment collects (a key with no finding at all is not part of it), and trace evidence only
    when traces were read, since it corroborates and many fleets have no trace backend."""
    return {
        k: w
        for k, w in (cat.supports | cat.contradicts).items()
        if k in findings and (findings[k].kind != "trace" or _measured(k, findings))
    }


def _coverage(cat: Category, findings: dict[str, Finding]) -> float:
    """Weight share of the expected evidence that could be measured."""
    weights = _expected(cat, findings)
    measured = sum(w for k, w in weights.items() if _measured(k, findings))
    return measured / sum(weights.values()) if weights else 0.0


def _first_mover(candidates: dict[str, Category], findings: dict[str, Finding], breached: set[str]) -> str | None:
    """The candidate whose earliest breached anchor leads every other candidate's by LEAD_MINUTES.
    Symptom anchors are left out: TTFT rises after any cause, so it must not mask who led; so are
    chronic breaches, whose onset is only the start of the window."""
    leads: dict[str, datetime] = {}
    for name, cat in candidates.items():
        causal = [findings[k] for anchor in cat.held_anchors(breached) for k in anchor if k not in symptoms()]
        onsets = [f.onset for f in causal if f.breached and not is_chronic(f)]
        dated = [onset for onset in onsets if onset is not None]
        if dated:
            leads[name] = min(dated)
    if len(leads) < 2:
        return None
    (first, first_onset), (_, second_onset) = sorted(leads.items(), key=lambda item: item[1])[:2]
    return first if second_onset - first_onset >= timedelta(minutes=LEAD_MINUTES) else None


def rank(findings: Sequence[Finding], limit: int = 5) -> list[Hypothesis]:
    """Ranked hypotheses over the whole taxonomy, best first, `no_clear_cause` included."""
    by_key = {f.key: f for f in findings}
    breached = {f.key for f in findings if f.breached}
    # An anchor that held all window (chronic) is no sign of what just went wrong: at least one of
    # its findings must have moved in it.
    moved = {f.key for f in findings if f.breached and not is_chronic(f)}
    anchored = {
        name: cat
        for name, cat in taxonomy().items()
        if name != NO_CLEAR_CAUSE and any(anchor & moved for anchor in cat.held_anchors(breached))
    }
    first_mover = _first_mover(anchored, by_key, breached)
    candidates: list[Hypothesis] = []
    for name, cat in anchored.items():
        evidence = [k for k in cat.supports if k in breached]
        against = [k for k in cat.contradicts if k in breached]
        support = sum(cat.supports[k] * _weight(by_key[k]) for k in evidence)
        contradiction = sum(cat.contradicts[k] * _weight(by_key[k]) for k in against)
        explanation = _explain(by_key, evidence)
        if name == first_mover and support > contradiction:
            support += LEAD_BONUS
            explanation += ". It moved first, before the other candidates' signals"
        score = support - contradiction
        # Support beyond `full_at` saturates; a contradiction always costs its weight.
        strength = max(0.0, min(1.0, support / cat.full_score()) - contradiction / cat.full_score())
        coverage = _coverage(cat, by_key)
        confidence = MAX_CONFIDENCE * strength * (UNCOVERED_FLOOR + (1 - UNCOVERED_FLOOR) * coverage)
        if against:
            explanation += ". Against it: " + _explain(by_key, against)
        unmeasured = [k for k in _expected(cat, by_key) if not _measured(k, by_key)]
        if unmeasured:
            explanation += f". Not measured: {', '.join(unmeasured)}"
        candidates.append(
            Hypothesis(
                rank=0,
                category=name,
                title=cat.title,
                confidence=round(confidence, 3),
                evidence=evidence,
                contradicting=against,
                next_steps=cat.next_steps,
                explanation=explanation,
                score=score,
            )
        )
    order = list(taxonomy())
    candidates = [c for c in candidates if c.confidence > 0]
    candidates.sort(key=lambda h: (-h.confidence, -h.score, order.index(h.category)))
    top = candidates[0].confidence if candidates else None  # even when `limit` leaves no room for it
    doubt = _no_clear_cause(findings, top=top)
    stronger = [c for c in candidates if c.confidence > doubt.confidence]
    weaker = [c for c in candidates if c.confidence <= doubt.confidence]
    ranked = (stronger + [doubt] + weaker)[:limit]
    if doubt not in ranked:
        ranked[-1] = doubt
    for position, hypothesis in enumerate(ranked, start=1):
        hypothesis.rank = position
    return ranked


def _no_clear_cause(findings: Sequence[Finding], top: float | None) -> Hypothesis:
    cat = taxonomy()[NO_CLEAR_CAUSE]
    signals = [f for f in findings if f.kind == "signal"]
    measured = [f for f in signals if f.status in MEASURED]
    healthy = [f.key for f in measured if not f.breached]
    if top is None:
        moved = sorted(f.key for f in findings if f.breached)
        confidence = 0.8 if len(measured) * 2 >= len(signals) and signals else 0.4
        explanation = "No finding points at a cause."
        if moved:
            # Something is abnormal, only not in a way any cause is anchored on: say so, unsure.
            confidence = min(confidence, UNEXPLAINED_CONFIDENCE)
            explanation = f"Abnormal, but no cause's anchor signal is breached: {', '.join(moved)}."
        missing = [f.key for f in signals if f.status not in MEASURED]
        if missing:
            explanation += f" Unavailable data: {', '.join(missing)}."
    else:
        confidence = round(max(0.05, (1 - top) / 3), 3)
        explanation = "Alternative if the causes above are ruled out."
    return Hypothesis(
        rank=0,
        category=NO_CLEAR_CAUSE,
        title=cat.title,
        confidence=confidence,
        evidence=healthy,
        next_steps=cat.next_steps,
        explanation=explanation,
    )
