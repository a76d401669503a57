"""The investigation pipeline: target -> collect -> signals -> diagnosis -> store.

`analyse` is pure (no database, no queue) so that `rca investigate` and tests can run it on
their own; `run_investigation` wires it to the store and is what the worker calls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy.exc import OperationalError, StatementError

from rca import metrics
from rca.analyst.cache import AnswerCache
from rca.analyst.explain import explain
from rca.analyst.summary import AlertText
from rca.collect.profile import profile_for
from rca.collect.prometheus import Collection, PrometheusSource, SeriesResult, choose_window
from rca.collect.promql import query_params
from rca.collect.target import Target, scope_candidates, target_from_alerts
from rca.config import Settings, TargetConfig
from rca.diagnosis.ranking import rank
from rca.domain.analyst import AnalystRecord
from rca.domain.coverage import NO_PROMETHEUS, DataGap, data_gap
from rca.domain.evidence import Hypothesis
from rca.domain.result import InvestigationResult, change_key
from rca.domain.series import EvidenceSeries
from rca.domain.status import Analyst, InvestigationStatus
from rca.signals.findings import Finding, judge_all
from rca.signals.series import evidence_series
from rca.signals.slo import slo_finding
from rca.store import evidence, investigations, similar
from rca.store.answers import DatabaseAnswerCache
from rca.store.db import session_scope
from rca.traces.evidence import trace_findings

log = logging.getLogger(__name__)


@dataclass
class Analysis:
    target: Target
    collection: Collection
    findings: list[Finding]
    hypotheses: list[Hypothesis]
    collect_seconds: float
    analyst: AnalystRecord | None = None  # who wrote the hypotheses (rca/analyst), with its accounting
    rules: list[Hypothesis] = field(default_factory=list)  # the rules' ranking, whoever wrote `hypotheses`
    evidence: list[EvidenceSeries] = field(default_factory=list)  # the findings' series, kept for their page

    def rules_only(self, reason: str) -> Analysis:
        """This analysis with the rules' ranking as the answer and the LLM's audit trail dropped
        (its accounting stays), `reason` saying why the LLM's answer was not used."""
        record = self.analyst or AnalystRecord(analyst=Analyst.RULES)
        record = replace(
            record,
            analyst=Analyst.RULES,
            fallback_reason=reason[:2000],
            disagreement=None,
            cached_from=None,
            dropped=[],
            exchange=[],
        )
        return replace(self, hypotheses=self.rules, analyst=record)

    @property
    def gap(self) -> DataGap | None:
        """What this analysis could not see; blind: it judged nothing (rca.domain.coverage)."""
        return data_gap(self.findings, self.collection.prometheus_error)

    def result(self, total_seconds: float) -> InvestigationResult:
        """What the store keeps, with Slack's change key taken from the rules' ranking: an LLM
        that rewords or reorders its answer does not make Slack post again. A blind analysis is
        kept as inconclusive, with its reason and without hypotheses."""
        window = self.collection.window
        gap = self.gap
        inconclusive = gap.reason if gap is not None else None
        return InvestigationResult(
            findings=self.findings,
            hypotheses=[] if inconclusive else self.hypotheses,
            analyst=self.analyst,
            window_start=window.start,
            window_end=window.end,
            step_seconds=window.step_seconds,
            target=self.target.to_dict() | {"selectors": self.collection.selectors, "stack": self.collection.stack},
            error=self.collection.prometheus_error,
            collect_seconds=self.collect_seconds,
            total_seconds=total_seconds,
            change_key=change_key(self.findings, [h.category for h in self.rules]),
            inconclusive=inconclusive,
        )


def target_of(claim: investigations.Claim, config: TargetConfig) -> Target:
    """The target a claimed investigation looks at, from its firing alerts."""
    return target_from_alerts(claim.alert_labels, claim.alert_starts, config)


History = Callable[[list[Finding], list[Hypothesis], str | None], list[dict[str, Any]]]


def analyse(
    settings: Settings,
    target: Target,
    now: datetime | None = None,
    *,
    alerts: list[AlertText] | None = None,
    cache: AnswerCache | None = None,
    history: History | None = None,
    source: PrometheusSource | None = None,
) -> Analysis:
    """Collect the window around the alert, judge every signal, rank the causes and have the
    analyst (the LLM when configured, else the rules) write the hypotheses.

    `alerts` (as they arrived) name the traced service and give the LLM their text; without them
    the target's scope labels are used. `history` finds past incidents with the same evidence
    (findings, rules ranking, stack) for the LLM to weigh. `source` replaces the Prometheus that
    the settings name (the diagnosis benches answer its queries from generated worlds)."""
    now = now or datetime.now(UTC)
    file_config = settings.file_config()
    profile = profile_for(file_config)
    window = choose_window(
        target.alert_start,
        now,
        timedelta(minutes=settings.lookback_minutes),
        settings.max_points_per_series,
        settings.min_step_seconds,
    )
    started = time.perf_counter()
    if source is None and settings.prometheus_url:
        source = PrometheusSource(
            settings.prometheus_url, settings.prometheus_timeout_seconds, settings.query_concurrency
        )
    if source is not None:
        pod = {name: target.labels[name] for name in ("namespace", "pod") if target.labels.get(name)}
        aliases = source.aliases(profile.identities, target.host_candidates(), window, pod or None)
        target = replace(target, aliases=aliases)
        collection = source.collect(
            profile,
            scope_candidates(target, file_config.target),
            window,
            stack=file_config.stack,
            params=query_params(file_config),
        )
    else:
        error = NO_PROMETHEUS
        collection = Collection(
            window=window,
            selectors={},
            prometheus_error=error,
            results=[SeriesResult(spec=s, error=error) for s in profile.signals],
        )
    collect_seconds = time.perf_counter() - started
    findings = judge_all(collection, target.alert_start)
    findings.append(
        slo_finding(collection, target.alert_start, file_config.slo_ttft_seconds, file_config.slo_probability_threshold)
    )
    alert_labels = [alert.labels for alert in alerts] if alerts else [target.labels]
    findings += trace_findings(settings, file_config.traces, alert_labels, target.alert_start, window.start, window.end)
    gap = data_gap(findings, collection.prometheus_error)
    if gap is not None and gap.blind:  # nothing to judge: no ranking, and no LLM tokens spent on it
        return Analysis(
            target=target, collection=collection, findings=findings, hypotheses=[], collect_seconds=collect_seconds
        )
    rules = rank(findings)
    past = history(findings, rules, collection.stack) if history and settings.llm_configured else None
    analyst = explain(settings, target, findings, rules, alerts=alerts, similar=past, cache=cache)
    return Analysis(
        target=target,
        collection=collection,
        findings=findings,
        hypotheses=analyst.hypotheses,
        collect_seconds=collect_seconds,
        analyst=analyst.record,
        rules=rules,
        evidence=evidence_series(collection, findings, target.alert_start),
    )


STORE_REFUSED = "the database refused the LLM's answer"  # how the fallback reason starts then


def _llm_wrote(analysis: Analysis) -> bool:
    """Whether anything of the LLM (its answer or its audit trail) is in what is being stored."""
    record = analysis.analyst
    return record is not None and (record.analyst == Analyst.LLM or bool(record.exchange))


def _precedents(
    url: str, claim: investigations.Claim, findings: list[Finding], rules: list[Hypothesis], stack: str | None
) -> list[dict[str, Any]]:
    """Past incidents alike enough to cite, as the LLM prompt lists them."""
    target = similar.signature_of(
        claim.incident_id, claim.incident_created_at, findings, [h.category for h in rules], stack
    )
    with session_scope(url) as session:
        found = similar.precedents(session, target)
    return [
        {
            "incident_id": p.incident_id,
            "category": p.category,
            "confirmed": p.confirmed,
            "title": p.title,
            "when": f"{p.created_at:%Y-%m-%d %H:%M} UTC",
            "similarity": p.score,
        }
        for p in found
    ]


def _save(url: str, investigation_id: int, analysis: Analysis, total_seconds: float, owe_slack: bool) -> None:
    """The result and the findings' series in one transaction."""
    with session_scope(url) as session:
        investigations.save_result(session, investigation_id, analysis.result(total_seconds), owe_slack=owe_slack)
        evidence.save(session, investigation_id, analysis.evidence)


def run_investigation(settings: Settings, investigation_id: int) -> str:
    """Run one stored investigation to completion; safe to call again for the same id.

    Returns the final status. A redelivered task finds the investigation done and returns
    without touching it; a retried one replaces its own findings, so nothing is stored twice.
    """
    url, slack = settings.effective_database_url, settings.slack_enabled
    started = time.perf_counter()
    with session_scope(url) as session:
        claim = investigations.claim(
            session, investigation_id, lease=timedelta(seconds=settings.investigation_lease_seconds)
        )
    if claim is None:
        return "skipped"
    alerts = [
        AlertText(labels, annotations, start)
        for labels, annotations, start in zip(
            claim.alert_labels, claim.alert_annotations, claim.alert_starts, strict=True
        )
    ]
    cache = DatabaseAnswerCache(url, settings.llm_cache_seconds, exclude_investigation_id=investigation_id)
    analysis = analyse(
        settings,
        target_of(claim, settings.file_config().target),
        alerts=alerts,
        cache=cache,
        history=partial(_precedents, url, claim),
    )
    total_seconds = time.perf_counter() - started
    try:
        _save(url, investigation_id, analysis, total_seconds, slack)
    except StatementError as exc:
        if isinstance(exc, OperationalError) or not _llm_wrote(analysis):
            raise  # the database blinked (the runner retries), or the rules' own answer failed: a bug
        # The optional LLM never takes the investigation down: what the database refused of its
        # answer or its audit trail is dropped, and the rules answer is stored in its place.
        log.exception(
            "investigation %s: the LLM's answer could not be stored; storing the rules answer", investigation_id
        )
        analysis = analysis.rules_only(f"{STORE_REFUSED}: {type(exc.orig or exc).__name__}: {exc.orig or exc}")
        _save(url, investigation_id, analysis, total_seconds, slack)
    gap = analysis.gap
    if gap is not None and gap.reason is not None:
        metrics.investigation_finished(InvestigationStatus.INCONCLUSIVE, total_seconds, gap.reason)
        log.warning("investigation %s inconclusive: %s", investigation_id, gap.text)
        return InvestigationStatus.INCONCLUSIVE
    metrics.investigation_finished(InvestigationStatus.DONE, total_seconds)
    top = analysis.hypotheses[0]
    log.info(
        "investigation %s done: top=%s (%.2f) by %s",
        investigation_id,
        top.category,
        top.confidence,
        analysis.analyst.analyst if analysis.analyst else "rules",
    )
    return InvestigationStatus.DONE
