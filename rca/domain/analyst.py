"""What the analyst stage hands on: who wrote the hypotheses, at what cost and why not the LLM
(`AnalystRecord`, stored on the investigation and returned by the API), and an answer reused from
an earlier investigation with the same evidence (`CachedAnswer`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rca.domain.evidence import Hypothesis

INVALID_ANSWER = "invalid LLM answer"  # how the fallback reason starts when the model answered, but wrongly


@dataclass
class AnalystRecord:
    analyst: str  # llm | rules (rca.domain.status.Analyst)
    model: str | None = None
    output_mode: str | None = None  # json_schema | json_object | prompt
    prompt_tokens: int | None = None  # as the server counted them, all calls together
    completion_tokens: int | None = None
    prompt_tokens_estimate: int | None = None  # the budget check's estimate of the first prompt
    latency_seconds: float | None = None
    estimated_cost: float | None = None
    fallback_reason: str | None = None
    disagreement: dict[str, Any] | None = None
    answer_key: str | None = None  # the answer cache's key: model, endpoint, target and evidence
    cached_from: int | None = None
    trimmed: list[str] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)  # LLM hypotheses refused, with why
    exchange: list[dict[str, Any]] = field(default_factory=list)  # every request and raw response

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CachedAnswer:
    investigation_id: int
    hypotheses: list[Hypothesis]  # the LLM's, or empty when its answer was invalid
    model: str | None
    invalid_reason: str | None = None
