"""The compact evidence summary a prompt carries, its token estimate, its fingerprint, and the
trimming that keeps it within the prompt-token budget.

Token counting before the call is an estimate: `ceil(characters / 2.5)` plus 4 tokens of chat
framing per message. BPE tokenizers average about 4 characters a token on English prose but fewer on
these prompts' digits, ids and JSON: SmolLM2's tokenizer (which splits digits one by one) measured
about 2.9 characters a token on the scenario suite's prompts (`bench/prompt_tokens.py
--tokenize-url`), so 2.5 over-counts, the safe side for a budget. The server's own count (`usage`)
is what gets stored and priced.

Trimming order (cheapest loss first), applied one step at a time until the prompt fits:
  1. similar past incidents
  2. span attributes of the trace breakdown
  3. the trace breakdown itself
  4. the rules ranking's explanations (categories, scores and cited ids stay)
  5. the rules ranking beyond its top 3
  6. healthy findings' values (their ids stay, listed as healthy)
  7. the reasons data is missing (the ids stay, listed as without data)
  8. alert annotations, cut to 200 characters each
  9. alert labels that are not the target's own
Breached findings, the target and the taxonomy are never trimmed. If the prompt still does not fit,
the LLM is not called (`OverBudget`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rca.collect.target import Target
from rca.diagnosis.ranking import taxonomy
from rca.domain.evidence import Finding, Hypothesis
from rca.domain.values import format_value

if TYPE_CHECKING:
    from rca.analyst.client import ChatMessage

CHARS_PER_TOKEN = 2.5
TOKENS_PER_MESSAGE = 4
ANNOTATION_LIMIT = 200
RANKING_KEPT = 3


def estimate_tokens(messages: list[ChatMessage]) -> int:
    """Conservative prompt-token estimate of chat messages."""
    chars = sum(len(m["content"]) for m in messages)
    return math.ceil(chars / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * len(messages)


@dataclass
class AlertText:
    """An alert as it arrived: its labels and annotations are untrusted text."""

    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)
    starts_at: datetime | None = None


@dataclass
class Summary:
    """Everything the investigation prompt shows, as plain data for the template."""

    alerts: list[dict[str, Any]]
    target: dict[str, Any]
    findings: list[dict[str, Any]]  # measured findings with values
    healthy_ids: list[str]  # healthy findings whose values were trimmed
    no_data: list[dict[str, Any]]  # {"ids": [...], "reason": str | None}
    ranking: list[dict[str, Any]]
    categories: dict[str, str]  # taxonomy id -> title
    traces: list[dict[str, Any]] | None = None  # {"operation", "share", "p95_ms", "attributes"}
    # {"incident_id", "category", "confirmed", "title", "when", "similarity"}: rca.jobs.runner._precedents
    similar: list[dict[str, Any]] | None = None
    trimmed: list[str] = field(default_factory=list)

    def template_vars(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _finding_line(f: Finding) -> dict[str, Any]:
    threshold = f"{f.comparison} {format_value(f.threshold, f.unit)}" if f.threshold is not None else "n/a"
    return {
        "id": f.key,
        "status": f.status,
        "title": f.title,
        "baseline": format_value(f.baseline, f.unit),
        "current": format_value(f.value, f.unit),
        "threshold": threshold,
        "onset": f"{f.onset:%Y-%m-%d %H:%M} UTC" if f.onset else None,
    }


def build_summary(
    target: Target,
    findings: list[Finding],
    ranking: list[Hypothesis],
    alerts: list[AlertText] | None = None,
    traces: list[dict[str, Any]] | None = None,
    similar: list[dict[str, Any]] | None = None,
) -> Summary:
    """The full summary, before any trimming."""
    measured = [f for f in findings if f.status in ("breached", "ok")]
    measured.sort(key=lambda f: (not f.breached, f.key))
    no_data: dict[str, list[str]] = {}
    for f in findings:
        if f.status not in ("breached", "ok"):
            no_data.setdefault(f.detail, []).append(f.key)
    alert_rows = [
        {
            "labels": dict(a.labels),
            "annotations": dict(a.annotations),
            "starts_at": f"{a.starts_at:%Y-%m-%d %H:%M} UTC" if a.starts_at else None,
        }
        for a in (alerts or [])
    ]
    return Summary(
        alerts=alert_rows,
        target={
            "host": target.host,
            "labels": dict(target.labels),
            "alertnames": list(target.alertnames),
            "alert_start": f"{target.alert_start:%Y-%m-%d %H:%M} UTC",
        },
        findings=[_finding_line(f) for f in measured],
        healthy_ids=[],
        no_data=[{"ids": ids, "reason": reason} for reason, ids in no_data.items()],
        ranking=[
            {
                "rank": h.rank,
                "category": h.category,
                "confidence": h.confidence,
                "score": round(h.score, 2),
                "evidence": h.evidence,
                "contradicting": h.contradicting,
                "explanation": h.explanation,
            }
            for h in ranking
        ],
        categories={name: cat.title for name, cat in taxonomy().items()},
        traces=copy.deepcopy(traces) if traces else None,
        similar=copy.deepcopy(similar) if similar else None,
    )


# --------------------------------------------------------------------------- trimming steps


def _drop_similar(s: Summary) -> bool:
    if not s.similar:
        return False
    s.similar = None
    return True


def _drop_span_attributes(s: Summary) -> bool:
    if not s.traces or not any(t.get("attributes") for t in s.traces):
        return False
    for t in s.traces:
        t["attributes"] = None
    return True


def _drop_traces(s: Summary) -> bool:
    if not s.traces:
        return False
    s.traces = None
    return True


def _drop_ranking_explanations(s: Summary) -> bool:
    if not any(r["explanation"] for r in s.ranking):
        return False
    for r in s.ranking:
        r["explanation"] = ""
    return True


def _cut_ranking(s: Summary) -> bool:
    if len(s.ranking) <= RANKING_KEPT:
        return False
    s.ranking = s.ranking[:RANKING_KEPT]
    return True


def _drop_healthy_values(s: Summary) -> bool:
    healthy = [f for f in s.findings if f["status"] == "ok"]
    if not healthy:
        return False
    s.healthy_ids += [f["id"] for f in healthy]
    s.findings = [f for f in s.findings if f["status"] != "ok"]
    return True


def _drop_no_data_reasons(s: Summary) -> bool:
    if not any(row["reason"] for row in s.no_data):
        return False
    s.no_data = [{"ids": [i for row in s.no_data for i in row["ids"]], "reason": None}]
    return True


def _cut_annotations(s: Summary) -> bool:
    cut = False
    for alert in s.alerts:
        for name, text in alert["annotations"].items():
            if len(text) > ANNOTATION_LIMIT:
                alert["annotations"][name] = text[:ANNOTATION_LIMIT] + " [cut]"
                cut = True
    return cut


def _drop_extra_labels(s: Summary) -> bool:
    keep = set(s.target["labels"]) | {"alertname", "instance"}
    cut = False
    for alert in s.alerts:
        extra = [name for name in alert["labels"] if name not in keep]
        for name in extra:
            del alert["labels"][name]
        cut = cut or bool(extra)
    return cut


TRIM_ORDER: list[tuple[str, Callable[[Summary], bool]]] = [
    ("similar past incidents", _drop_similar),
    ("span attributes", _drop_span_attributes),
    ("trace breakdown", _drop_traces),
    ("rules ranking explanations", _drop_ranking_explanations),
    (f"rules ranking beyond the top {RANKING_KEPT}", _cut_ranking),
    ("healthy findings' values", _drop_healthy_values),
    ("reasons for missing data", _drop_no_data_reasons),
    (f"alert annotations beyond {ANNOTATION_LIMIT} characters", _cut_annotations),
    ("alert labels outside the target", _drop_extra_labels),
]


class OverBudget(Exception):
    """Even the fully trimmed prompt is over the budget; the LLM is not called."""

    def __init__(self, estimate: int, budget: int) -> None:
        super().__init__(f"the prompt needs ~{estimate} tokens after every trim, over the budget of {budget}")
        self.estimate = estimate


def fit_to_budget(summary: Summary, budget: int, measure: Callable[[Summary], int]) -> tuple[Summary, int]:
    """Trim a copy of the summary in `TRIM_ORDER` until `measure` (its prompt's token estimate)
    is within the budget; returns the trimmed summary and its estimate."""
    summary = copy.deepcopy(summary)
    estimate = measure(summary)
    for what, step in TRIM_ORDER:
        if estimate <= budget:
            break
        if step(summary):
            summary.trimmed.append(what)
            estimate = measure(summary)
    if estimate > budget:
        raise OverBudget(estimate, budget)
    return summary, estimate


def _sig(value: float | None) -> str | None:
    return None if value is None else f"{value:.2g}"


def fingerprint(model: str, base_url: str, target: Target, findings: list[Finding]) -> str:
    """What makes two investigations "the same evidence" for the answer cache: the model, the
    target, and each finding's status and values to 2 significant digits (onset times and exact
    values move every minute while the evidence means the same)."""
    body = {
        "model": [base_url, model],
        "target": [target.host, sorted(target.labels.items()), sorted(target.alertnames)],
        "findings": sorted((f.key, f.status, _sig(f.value), _sig(f.baseline)) for f in findings),
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
