"""Deterministic ranking of root causes from findings (the rules analyst).

Scoring, per category of `taxonomy.yaml` (docs/diagnosis.md has the worked rules):
  - it is a candidate only if one of its anchors holds (a finding, or a set that breaches together)
    and moved in the window (not breached all along);
  - score = sum of weights of breached supporting findings - sum of breached contradicting ones
    (half weight for a finding breached for the whole window: it did not just change), plus a
    lead bonus when its own anchor clearly moved before every other candidate's (causes come
    before their consequences, which then do not count against it);
  - raw strength = 0.9 * strength * (0.6 + 0.4 * coverage), where strength = min(1, support /
    full) - contradiction / full (at least 0), full is the sum of its support weights unless the
    category sets `full_at` (never more than the supports the stack can show), and coverage is
    the weight share of its supporting and contradicting findings that could be measured: a cause
    whose look-alikes could not be ruled out is less certain;
  - a cause whose `decided_by` findings were measured and did not move is ruled out (a surge needs
    the request rate to rise); where they were not measured, every cause that counts them against
    itself keeps UNDECIDED_FACTOR of its raw strength per such look-alike it cannot rule out;
  - confidence = the raw strength calibrated (rca.diagnosis.calibration): how often a top answer
    that strong was right on the tuning worlds; the rest share what the top one leaves.
`no_clear_cause` ranks first with no candidate; otherwise it takes the doubt left by the best
cause, and ranks above a cause that is weaker than that doubt.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from rca.config import ConfigError
from rca.config.loader import read_yaml
from rca.diagnosis.calibration import Calibration
from rca.domain.evidence import Finding, Hypothesis, is_chronic
from rca.domain.fleet import NO_CLEAR_CAUSE
from rca.domain.status import MEASURED, FindingStatus

TAXONOMY_FILE = Path(__file__).with_name("taxonomy.yaml")
MAX_CONFIDENCE = 0.9
UNCOVERED_FLOOR = 0.6  # the confidence factor of a cause none of whose evidence could be measured
LEAD_BONUS = 0.75  # score added to the cause whose anchor moved first, by at least LEAD_MINUTES
LEAD_MINUTES = 3.0
PRECEDE_MINUTES = 0.5  # two scrapes: what moved this much earlier came first (a category's `precedes`)
ORDER_WEIGHT = 2.0  # against a cause whose signals moved out of its order
UNDECIDED_FACTOR = 0.8  # of a cause's raw strength, per look-alike whose deciding findings were not measured
RANGE = re.compile(r"\[(\d+)([smh])(?::\w+)?\]")  # a PromQL range or subquery window: [5m], [10m:15s]
RANGE_UNITS = {"s": 1, "m": 60, "h": 3600}
CHRONIC_FACTOR = 0.5  # weight of a finding breached for the whole window (no baseline)
CALM_FULL, CALM_FLOOR = 0.8, 0.2  # no_clear_cause's raw value with every early signal read, and with none
UNEXPLAINED_FACTOR = 0.25  # scales no_clear_cause's raw value when findings moved but none anchors a cause
# What no_clear_cause may say at most when something moved that no cause explains: never a confident
# all-clear (the calibration puts these near an even bet; an even bet must not read as reassurance).
UNEXPLAINED_MAX = 0.45


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
    # Pairs [earlier, later] in the order this cause moves them (the cache overflows and preempts,
    # and only then evicts cached prefixes). Observed in order, the later one is no look-alike's
    # sign; out of order, it is no evidence for this cause and counts against it.
    precedes: list[tuple[str, str]] = []
    # The findings that decide this cause wherever they are measured (a surge: the request rate).
    # Measured and unmoved, the cause is ruled out, whatever else moved; not measured, the causes
    # that count them against themselves cannot rule it out, and are less sure.
    decided_by: list[str] = []

    def full_score(self, observable: Callable[[str], bool] = lambda key: True) -> float:
        """The support at which the evidence is complete: `full_at`, or every supporting weight,
        but never more than the weight of the supports this stack and deployment can show at all
        (SGLang exports no preemptions: KV pressure presents there without them). A support that
        could be shown but whose data is missing still counts: the case is thinner for it."""
        observable_weight = sum(w for k, w in self.supports.items() if observable(k))
        return min(self.full_at or sum(self.supports.values()), observable_weight) or sum(self.supports.values())

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


@lru_cache(maxsize=1)
def calibration() -> Calibration:
    """The fitted maps from raw strength to right-answer frequency (tools/fit_calibration.py)."""
    try:
        return Calibration.model_validate(_taxonomy_file()["calibration"])
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"taxonomy: calibration: {exc} (rewrite it with tools/fit_calibration.py)") from exc


def symptoms() -> frozenset[str]:
    """Latency findings every cause moves: evidence for many causes, lead for none."""
    return frozenset(_taxonomy_file().get("symptoms", []))


def consequences() -> frozenset[str]:
    """What many causes fill (the queue, the KV cache): evidence in a set, never a cause's date."""
    return frozenset(_taxonomy_file().get("consequences", []))


def _explain(findings: dict[str, Finding], keys: list[str]) -> str:
    return "; ".join(findings[k].detail for k in keys)


def _weight(finding: Finding) -> float:
    """A breach that was there all along says less about what just went wrong."""
    return CHRONIC_FACTOR if is_chronic(finding) else 1.0


def _measured(key: str, findings: dict[str, Finding]) -> bool:
    return key in findings and findings[key].status in MEASURED


def _observable(key: str, findings: dict[str, Finding]) -> bool:
    """The deployment collects this finding and its stack can show it (it may still lack data)."""
    return key in findings and findings[key].status != FindingStatus.NOT_MEASURABLE


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


def _unmoved(cat: Category, findings: dict[str, Finding]) -> list[str]:
    """The cause's deciding findings that were measured and did not move: they rule it out."""
    return [k for k in cat.decided_by if _measured(k, findings) and not findings[k].breached]


def _undecided(cat: Category, findings: dict[str, Finding]) -> dict[str, list[str]]:
    """The look-alikes this cause tells itself apart from by their deciding findings (it counts
    them against itself) where those were not measured: it cannot rule them out."""
    return {
        name: keys
        for name, other in taxonomy().items()
        if other is not cat
        and (keys := [k for k in other.decided_by if k in cat.contradicts and not _measured(k, findings)])
    }


def _lag(finding: Finding) -> timedelta:
    """How late the finding's query sees a change: half its longest range (a rate over [5m] moves
    about 2.5 minutes after what it measures, a 10-minute median about 5), so that a gauge and a
    rate are compared on when their change happened, not on when each query showed it."""
    ranges = [int(n) * RANGE_UNITS[unit] for n, unit in RANGE.findall(finding.query or "")]
    return timedelta(seconds=max(ranges, default=0) / 2)


def _moved_at(finding: Finding) -> datetime | None:
    """When the finding's change happened (its onset less its query's lag); None when it has no
    onset in the window or was breached all along."""
    if not finding.breached or finding.onset is None or is_chronic(finding):
        return None
    return finding.onset - _lag(finding)


def _clearly_after(finding: Finding, moment: datetime | None, minutes: float = LEAD_MINUTES) -> bool:
    """The finding moved `minutes` or more after `moment`."""
    at = _moved_at(finding)
    return at is not None and moment is not None and at - moment >= timedelta(minutes=minutes)


def _own_dates(
    candidates: dict[str, Category], findings: dict[str, Finding], breached: set[str]
) -> dict[str, datetime]:
    """When each candidate's own evidence moved: its earliest dated breached anchor finding. A
    finding that is another candidate's anchor on its own is that cause's evidence and says
    nothing of when this one began (a full cache evicts prefixes: the hit rate's fall dates the
    misses, not the pressure); symptoms and shared consequences are left out (TTFT rises and the
    queue grows after any cause), and so are chronic breaches (their onset is only the start of
    the window)."""
    alone = {name: {a for a in cat.anchors if isinstance(a, str)} for name, cat in candidates.items()}
    undated = symptoms() | consequences()
    leads: dict[str, datetime] = {}
    for name, cat in candidates.items():
        keys = {k for anchor in cat.held_anchors(breached) for k in anchor if k not in undated}
        theirs = set().union(*(own for other, own in alone.items() if other != name))
        dated = [at for k in keys - theirs if (at := _moved_at(findings[k])) is not None]
        if dated:
            leads[name] = min(dated)
    return leads


def _order(cat: Category, findings: dict[str, Finding]) -> tuple[set[str], dict[str, str]]:
    """The cause's `precedes` pairs as observed: the later findings that moved PRECEDE_MINUTES or
    more after their earlier one (in order: a contradiction among them is this cause's own
    consequence), and those that moved that much before it (out of order: no evidence for this
    cause, and against it), each with the finding it should have followed."""
    in_order: set[str] = set()
    out_of_order: dict[str, str] = {}
    for earlier, later in cat.precedes:
        if earlier not in findings or later not in findings:
            continue
        if _clearly_after(findings[later], _moved_at(findings[earlier]), PRECEDE_MINUTES):
            in_order.add(later)
        elif _clearly_after(findings[earlier], _moved_at(findings[later]), PRECEDE_MINUTES):
            out_of_order[later] = earlier
    return in_order, out_of_order


def _first_mover(dates: dict[str, datetime]) -> tuple[str, datetime] | None:
    """The candidate whose own evidence moved LEAD_MINUTES or more before every other's, and when."""
    if len(dates) < 2:
        return None
    (first, first_onset), (_, second_onset) = sorted(dates.items(), key=lambda item: item[1])[:2]
    return (first, first_onset) if second_onset - first_onset >= timedelta(minutes=LEAD_MINUTES) else None


def rank(findings: Sequence[Finding], limit: int = 5, *, calibrated: bool = True) -> list[Hypothesis]:
    """Ranked hypotheses over the whole taxonomy, best first, `no_clear_cause` included.
    Confidences are calibrated (how often an answer that strong is right) unless `calibrated` is
    False, which gives the raw strengths the calibration is fitted on."""
    maps = calibration() if calibrated else None
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
    dates = _own_dates(anchored, by_key, breached)
    first_mover = _first_mover(dates)
    candidates: list[Hypothesis] = []
    for name, cat in anchored.items():
        evidence = [k for k in cat.supports if k in breached]
        against = [k for k in cat.contradicts if k in breached]
        if first_mover and name == first_mover[0]:
            # What moved clearly after the cause that led is its consequence, not a look-alike's
            # sign: prefix misses that fill the cache until it preempts.
            against = [k for k in against if not _clearly_after(by_key[k], first_mover[1])]
        in_order, out_of_order = _order(cat, by_key)
        evidence = [k for k in evidence if k not in out_of_order]
        against = [k for k in against if k not in in_order]
        support = sum(cat.supports[k] * _weight(by_key[k]) for k in evidence)
        contradiction = sum(cat.contradicts[k] * _weight(by_key[k]) for k in against)
        contradiction += ORDER_WEIGHT * len(out_of_order)
        explanation = _explain(by_key, evidence)
        if out_of_order:
            explanation += ". Out of this cause's order: " + "; ".join(
                f"{later} moved before {earlier}" for later, earlier in out_of_order.items()
            )
        if first_mover and name == first_mover[0] and support > contradiction:
            support += LEAD_BONUS
            explanation += ". It moved first, before the other candidates' signals"
        elif first_mover and name in dates and dates[name] - first_mover[1] >= timedelta(minutes=LEAD_MINUTES):
            # Its own signals moved well after another cause's, as that cause's consequences do
            # (prefix misses fill the cache until it preempts): the lead counts against it.
            contradiction += LEAD_BONUS
            lag_minutes = (dates[name] - first_mover[1]).total_seconds() / 60
            explanation += (
                f". Its own signals moved {lag_minutes:.0f} min after {first_mover[0]}'s, as a consequence's do"
            )
        # Support beyond `full_at` saturates; a contradiction always costs its weight.
        full = cat.full_score(lambda key: _observable(key, by_key))
        unmoved = _unmoved(cat, by_key)
        if unmoved:
            contradiction += full  # ruled out, however much else speaks for it
            explanation += f". Ruled out: {', '.join(unmoved)} measured and did not move"
        score = support - contradiction
        strength = max(0.0, min(1.0, support / full) - contradiction / full)
        coverage = _coverage(cat, by_key)
        undecided = _undecided(cat, by_key)
        confidence = (
            MAX_CONFIDENCE
            * strength
            * (UNCOVERED_FLOOR + (1 - UNCOVERED_FLOOR) * coverage)
            * UNDECIDED_FACTOR ** len(undecided)
        )
        if against:
            explanation += ". Against it: " + _explain(by_key, against)
        if undecided:
            explanation += ". Cannot rule out " + "; ".join(
                f"{name} ({', '.join(keys)} not measured here)" for name, keys in undecided.items()
            )
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
    if maps and any(f.status in MEASURED for f in findings):
        # Calibrated on worlds that all had data: with nothing measured the raw doubt stands.
        unexplained = any(f.breached and not is_chronic(f) for f in findings)
        _calibrate(candidates, doubt, maps, unexplained)
    stronger = [c for c in candidates if c.confidence > doubt.confidence]
    weaker = [c for c in candidates if c.confidence <= doubt.confidence]
    ranked = (stronger + [doubt] + weaker)[:limit]
    if doubt not in ranked:
        ranked[-1] = doubt
    for position, hypothesis in enumerate(ranked, start=1):
        hypothesis.rank = position
    return ranked


def _calibrate(candidates: list[Hypothesis], doubt: Hypothesis, maps: Calibration, unexplained: bool) -> None:
    """The top answer's confidence becomes how often a top answer that strong is right; what it
    leaves is shared by the others (`no_clear_cause` included) in proportion to their raw strength,
    never above the top's, so that the list reads as one distribution over the causes."""
    if not candidates:
        calibrated = maps.no_cause(doubt.confidence)
        doubt.confidence = round(min(calibrated, UNEXPLAINED_MAX) if unexplained else calibrated, 3)
        return
    first, rest = candidates[0], [*candidates[1:], doubt]
    first.confidence = round(maps.cause(first.confidence), 3)
    total = sum(h.confidence for h in rest)
    for h in rest:
        h.confidence = round(min(first.confidence, (1 - first.confidence) * h.confidence / total), 3)


def _no_clear_cause(findings: Sequence[Finding], top: float | None) -> Hypothesis:
    cat = taxonomy()[NO_CLEAR_CAUSE]
    signals = [f for f in findings if f.kind == "signal"]
    measured = [f for f in signals if f.status in MEASURED]
    healthy = [f.key for f in measured if not f.breached]
    if top is None:
        moved = sorted(f.key for f in findings if f.breached and not is_chronic(f))
        chronic = sorted(f.key for f in findings if f.breached and is_chronic(f))
        # A calm verdict is as good as the share of the early signals it could read: a host whose
        # serving exporter is gone may well be the one at fault.
        confidence = CALM_FLOOR + (CALM_FULL - CALM_FLOOR) * (len(measured) / len(signals) if signals else 0.0)
        explanation = "No finding points at a cause."
        if moved:
            # Something changed, only not in a way any cause is anchored on: say so, unsure (its
            # own raw value, so that the calibration can tell it from a calm or always-busy host).
            confidence *= UNEXPLAINED_FACTOR
            explanation = f"Abnormal, but no cause's anchor signal is breached: {', '.join(moved)}."
        if chronic:
            explanation += f" Beyond their limits all window, so no sign of what changed: {', '.join(chronic)}."
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
