"""The analyst stage: ask the LLM for ranked hypotheses, validate them, or fall back to the rules.

    explain(settings, target, findings, rules_ranking, alerts=..., cache=...) -> AnalystResult

The rules ranking is the answer whenever the LLM cannot give a valid one: not configured, over
the prompt budget, unreachable, too slow, rate limited, or invalid after one repair. The record
says which analyst wrote the hypotheses and why, with tokens, latency, cost and the exact
exchange for audit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from rca import metrics
from rca.analyst.cache import AnswerCache
from rca.analyst.client import ChatClient, ChatMessage, LLMUnavailable, Reply
from rca.analyst.prompts import investigation_messages, repair_message
from rca.analyst.summary import (
    AlertText,
    OverBudget,
    Summary,
    build_summary,
    estimate_tokens,
    fingerprint,
    fit_to_budget,
)
from rca.analyst.validate import Verdict, answer_schema, check, disagreement
from rca.collect.target import Target
from rca.config import Settings
from rca.diagnosis.ranking import taxonomy
from rca.domain.analyst import INVALID_ANSWER, AnalystRecord
from rca.domain.evidence import Finding, Hypothesis
from rca.domain.status import Analyst

log = logging.getLogger(__name__)
ANALYST_ERROR = "analyst error"  # how the fallback reason starts when asking the LLM raised
NOT_CONFIGURED = "no LLM configured (RCA_LLM_BASE_URL unset): the deterministic rules analyst wrote these hypotheses"


@dataclass
class AnalystResult:
    hypotheses: list[Hypothesis]
    record: AnalystRecord


def _cost(settings: Settings, prompt_tokens: int, completion_tokens: int) -> float:
    return round(
        prompt_tokens / 1000 * settings.llm_price_per_1k_prompt_tokens
        + completion_tokens / 1000 * settings.llm_price_per_1k_completion_tokens,
        6,
    )


def prompt_for(settings: Settings, summary: Summary, finding_ids: list[str]) -> tuple[Summary, int]:
    """The summary trimmed to the budget, measured on the largest form the prompt may take (with
    the schema in the prompt text, for endpoints that take no response format)."""
    schema = answer_schema(finding_ids)

    def measure(s: Summary) -> int:
        return estimate_tokens(investigation_messages(s, schema))

    return fit_to_budget(summary, settings.llm_prompt_token_budget, measure)


def explain(
    settings: Settings,
    target: Target,
    findings: list[Finding],
    rules: list[Hypothesis],
    *,
    alerts: list[AlertText] | None = None,
    traces: list[dict[str, Any]] | None = None,
    similar: list[dict[str, Any]] | None = None,
    cache: AnswerCache | None = None,
) -> AnalystResult:
    """Ranked hypotheses for the findings, from the LLM when it gives a valid answer. Never
    raises: the LLM is optional, so an error anywhere in asking it (a bug, text the request cannot
    carry, the cache's database) leaves the rules answer, with the error as the reason."""
    if not settings.llm_configured:
        return AnalystResult(rules, AnalystRecord(analyst="rules", fallback_reason=NOT_CONFIGURED))
    record = AnalystRecord(analyst="rules", model=str(settings.llm_model))
    try:
        return _ask(settings, record, target, findings, rules, alerts, traces, similar, cache)
    except Exception as exc:
        log.exception("LLM analyst failed; the rules answer stands")
        record.analyst, record.disagreement = Analyst.RULES, None
        record.fallback_reason = f"{ANALYST_ERROR}: {type(exc).__name__}: {exc}"[:2000]
        return AnalystResult(rules, record)


def _ask(
    settings: Settings,
    record: AnalystRecord,
    target: Target,
    findings: list[Finding],
    rules: list[Hypothesis],
    alerts: list[AlertText] | None,
    traces: list[dict[str, Any]] | None,
    similar: list[dict[str, Any]] | None,
    cache: AnswerCache | None,
) -> AnalystResult:
    base_url, model = str(settings.llm_base_url), str(settings.llm_model)
    record.answer_key = fingerprint(model, base_url, target, findings)

    def fall_back(reason: str) -> AnalystResult:
        log.warning("LLM analyst fell back to the rules: %s", reason)
        record.fallback_reason = reason
        return AnalystResult(rules, record)

    finding_ids = [f.key for f in findings]
    try:
        summary, record.prompt_tokens_estimate = prompt_for(
            settings, build_summary(target, findings, rules, alerts, traces, similar), finding_ids
        )
    except OverBudget as exc:
        record.prompt_tokens_estimate = exc.estimate
        return fall_back(f"over budget: {exc} (RCA_LLM_PROMPT_TOKEN_BUDGET)")
    record.trimmed = summary.trimmed

    if cache is not None and (hit := cache.lookup(record.answer_key or "")) is not None:
        record.cached_from, record.model = hit.investigation_id, hit.model
        record.prompt_tokens = record.completion_tokens = 0
        record.latency_seconds, record.estimated_cost = 0.0, 0.0
        if hit.invalid_reason:
            return fall_back(f"{hit.invalid_reason} (reused from investigation {hit.investigation_id}, same evidence)")
        record.analyst = "llm"
        record.disagreement = disagreement(hit.hypotheses, rules)
        return AnalystResult(hit.hypotheses, record)

    client = ChatClient(
        base_url,
        model,
        settings.llm_api_key.get_secret_value() if settings.llm_api_key else None,
        settings.llm_timeout_seconds,
        settings.llm_max_retries,
        settings.llm_max_completion_tokens,
    )
    schema = answer_schema(finding_ids)
    messages = investigation_messages(summary, None)
    prompt_mode_messages = investigation_messages(summary, schema)
    try:
        try:
            reply = client.complete(messages, schema, prompt_mode_messages)
            verdict = _verdict(reply, settings, findings, rules)
            if not verdict.valid and not _over_budget(reply, settings):
                repair: list[ChatMessage] = [
                    {"role": "assistant", "content": reply.text},
                    repair_message(verdict.errors, finding_ids, list(taxonomy())),
                ]
                reply = client.complete(messages + repair, schema, prompt_mode_messages + repair)
                verdict = _verdict(reply, settings, findings, rules)
                verdict.errors = [f"after one repair: {e}" for e in verdict.errors]
        finally:
            _account(record, client, settings)
    except LLMUnavailable as exc:
        return fall_back(f"LLM unavailable: {exc}")
    record.dropped = verdict.dropped
    if not verdict.valid:
        return fall_back(f"{INVALID_ANSWER}: " + "; ".join(verdict.errors))
    record.analyst = "llm"
    record.disagreement = disagreement(verdict.hypotheses, rules)
    return AnalystResult(verdict.hypotheses, record)


def _over_budget(reply: Reply, settings: Settings) -> bool:
    return reply.finish_reason == "length" or reply.completion_tokens > settings.llm_max_completion_tokens


def _verdict(reply: Reply, settings: Settings, findings: list[Finding], rules: list[Hypothesis]) -> Verdict:
    if _over_budget(reply, settings):
        return Verdict(
            [],
            errors=[
                f"the reply is over the completion budget of {settings.llm_max_completion_tokens} "
                f"tokens ({reply.completion_tokens} tokens, finish_reason {reply.finish_reason})"
            ],
        )
    return check(reply.text, findings, rules)


def _account(record: AnalystRecord, client: ChatClient, settings: Settings) -> None:
    record.exchange = [c.to_dict() for c in client.calls]
    record.output_mode = client.mode
    record.prompt_tokens = sum(c.prompt_tokens for c in client.calls)
    record.completion_tokens = sum(c.completion_tokens for c in client.calls)
    record.latency_seconds = round(sum(c.latency_seconds for c in client.calls), 4)
    record.estimated_cost = _cost(settings, record.prompt_tokens, record.completion_tokens)
    metrics.llm_usage(record.prompt_tokens, record.completion_tokens, record.estimated_cost)
