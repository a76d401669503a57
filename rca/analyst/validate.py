"""Check an LLM answer against the evidence before anything of it is stored.

The answer must parse to `Answer` (rank >= 1, a taxonomy category, a title, confidence in [0, 1],
evidence ids, explanation, next steps). Then, per hypothesis:
  - a cited evidence id that is no finding of this investigation drops the hypothesis;
  - a cause (other than no_clear_cause) none of whose anchor findings is breached drops it: the
    evidence does not show it at all, whatever the text says (this is what stops an instruction
    smuggled into an alert annotation from choosing the answer);
  - a repeated category keeps its first (best-ranked) occurrence.
An answer with no hypothesis left is invalid (the caller may ask once for a repair).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from rca.diagnosis.ranking import NO_CLEAR_CAUSE, taxonomy
from rca.domain.evidence import Finding, Hypothesis
from rca.domain.text import storable_data

MAX_HYPOTHESES = 5
_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


class AnswerHypothesis(BaseModel):
    rank: int = Field(ge=1)
    category: str
    title: str = Field(min_length=1, max_length=300)
    confidence: float = Field(ge=0, le=1)
    evidence: list[str]
    explanation: str = Field(max_length=4000)
    next_steps: list[str] = Field(default_factory=list, max_length=10)

    @field_validator("category")
    @classmethod
    def _in_taxonomy(cls, value: str) -> str:
        if value not in taxonomy():
            raise ValueError(f"{value!r} is not a taxonomy category")
        return value


class Answer(BaseModel):
    hypotheses: list[AnswerHypothesis] = Field(min_length=1, max_length=10)


def answer_schema(finding_ids: list[str]) -> dict[str, Any]:
    """JSON Schema of `Answer` with the allowed categories and finding ids as enums, so that
    endpoints which enforce schemas with a grammar cannot produce others at all. Its length limits
    keep answers short (and grammar-bound decoding fast); `Answer` itself is more lenient, since
    endpoints without schema enforcement only read them as advice."""
    return {
        "type": "object",
        "properties": {
            "hypotheses": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_HYPOTHESES,
                "items": {
                    "type": "object",
                    "properties": {
                        "rank": {"type": "integer", "minimum": 1},
                        "category": {"type": "string", "enum": list(taxonomy())},
                        "title": {"type": "string", "maxLength": 120},
                        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                        "evidence": {"type": "array", "maxItems": 8, "items": {"type": "string", "enum": finding_ids}},
                        "explanation": {"type": "string", "maxLength": 400},
                        "next_steps": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 160}},
                    },
                    "required": ["rank", "category", "title", "confidence", "evidence", "explanation", "next_steps"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["hypotheses"],
        "additionalProperties": False,
    }


def extract_json(text: str) -> Any:
    """The JSON object in a reply: the whole text, a ```json fenced block, or the first object
    in prose (for endpoints that only take the format from the prompt)."""
    text = text.strip()
    candidates = [text, *(m.strip() for m in _FENCED.findall(text))]
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    start = text.find("{")
    if start >= 0:
        try:
            return json.JSONDecoder().raw_decode(text[start:])[0]
        except ValueError:
            pass
    raise ValueError("no JSON object in the reply")


def contradicting(category: str, findings: list[Finding], rules: list[Hypothesis]) -> list[str]:
    """Breached findings that speak against `category`: its taxonomy `contradicts` (what the rules
    ranking records), and for no_clear_cause the evidence of the rules' top cause."""
    breached = {f.key for f in findings if f.breached}
    if category == NO_CLEAR_CAUSE:
        top = rules[0] if rules else None
        return list(top.evidence) if top and top.category != NO_CLEAR_CAUSE else []
    return [k for k in taxonomy()[category].contradicts if k in breached]


@dataclass
class Verdict:
    """The hypotheses that survived (empty when the answer is invalid), and why others did not."""

    hypotheses: list[Hypothesis]
    errors: list[str] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return bool(self.hypotheses)


def _pydantic_errors(exc: ValidationError) -> list[str]:
    return [f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}" for e in exc.errors()[:8]]


def check(text: str, findings: list[Finding], rules: list[Hypothesis]) -> Verdict:
    """Validate a reply; see the module docstring for the rules."""
    try:
        # JSON escapes (\u0000, a lone \ud800) decode to text no store keeps: cleaned before use.
        answer = Answer.model_validate(storable_data(extract_json(text)))
    except ValueError as exc:  # ValidationError is a ValueError
        errors = _pydantic_errors(exc) if isinstance(exc, ValidationError) else [str(exc)]
        return Verdict([], errors=errors)
    known = {f.key for f in findings}
    breached = {f.key for f in findings if f.breached}
    kept: list[AnswerHypothesis] = []
    dropped: list[dict[str, Any]] = []
    for h in sorted(answer.hypotheses, key=lambda h: h.rank):
        invented = [e for e in h.evidence if e not in known]
        category = taxonomy()[h.category]
        if invented:
            reason = f"cites evidence that does not exist: {', '.join(invented)}"
        elif h.category != NO_CLEAR_CAUSE and not category.held_anchors(breached):
            reason = f"none of its anchor findings ({category.describe_anchors()}) is breached"
        elif any(k.category == h.category for k in kept):
            reason = "repeats a category ranked higher"
        else:
            kept.append(h)
            continue
        dropped.append({"category": h.category, "rank": h.rank, "reason": reason})
    hypotheses = [
        Hypothesis(
            rank=position,
            category=h.category,
            title=h.title,
            confidence=round(h.confidence, 3),
            evidence=list(dict.fromkeys(h.evidence)),
            contradicting=contradicting(h.category, findings, rules),
            next_steps=h.next_steps,
            explanation=h.explanation,
            analyst="llm",
        )
        for position, h in enumerate(kept[:MAX_HYPOTHESES], start=1)
    ]
    errors = (
        []
        if hypotheses
        else [
            "no hypothesis is supported by the findings: "
            + "; ".join(f"{d['category']} {d['reason']}" for d in dropped)
        ]
    )
    return Verdict(hypotheses, errors=errors, dropped=dropped)


def disagreement(llm: list[Hypothesis], rules: list[Hypothesis]) -> dict[str, Any] | None:
    """When the LLM puts first a cause the evidence contradicts, say so (never hide it)."""
    top = llm[0]
    if not top.contradicting:
        return None
    return {
        "llm_top": top.category,
        "rules_top": rules[0].category if rules else None,
        "contradicting": top.contradicting,
        "note": f"the LLM ranks {top.category} first although {', '.join(top.contradicting)} speak against it",
    }
