"""The investigation pipeline: target -> collect -> signals -> diagnosis -> analyst -> result.

`analyse` is pure (no database, no queue) so that `rca investigate` and tests can run it on
their own; the investigation runner (rca/jobs/runner.py) claims a stored investigation, runs it
through here and saves the result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from rca.analyst.cache import AnswerCache
from rca.analyst.explain import explain
from rca.analyst.summary import AlertText
from rca.collect.profile import profile_for
from rca.collect.prometheus import Collection, PrometheusSource, SeriesResult, choose_window
from rca.collect.promql import query_params
from rca.collect.target import Target, scope_candidates, target_from_alerts
from rca.config import ScopeConfig, Settings
from rca.diagnosis.ranking import rank
from rca.domain.analyst import AnalystRecord
from rca.domain.coverage import NO_PROMETHEUS, DataGap, data_gap
from rca.domain.evidence import Hypothesis
from rca.domain.factor import CommonFactor, decide
from rca.domain.hosts import alert_host, hosts_of
from rca.domain.result import InvestigationResult, change_key
from rca.domain.series import EvidenceSeries
from rca.domain.status import Analyst
from rca.signals.findings import Finding, judge_all
from rca.signals.series import evidence_series
from rca.signals.slo import slo_finding
from rca.store import investigations
from rca.traces.evidence import trace_findings


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
    common_factor: CommonFactor | None = None  # a fleet round's first investigation's (`common_factor`)

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
            common_factor=self.common_factor.to_dict() if self.common_factor else None,
        )


def _mine(claim: investigations.Claim, config: ScopeConfig) -> list[int]:
    """Which of the claim's alerts the investigation looks at: all, or a fleet incident's one host's
    (the claim's `host`, named by the config's host labels as the target reads them)."""
    return [
        i
        for i, labels in enumerate(claim.alert_labels)
        if claim.host is None or alert_host(labels, config.host_labels) == claim.host
    ]


def alerts_of(claim: investigations.Claim, config: ScopeConfig) -> list[AlertText]:
    """A claimed investigation's firing alerts as they arrived (its host's), for the LLM to read."""
    return [
        AlertText(claim.alert_labels[i], claim.alert_annotations[i], claim.alert_starts[i])
        for i in _mine(claim, config)
    ]


def target_of(claim: investigations.Claim, config: ScopeConfig) -> Target:
    """The target a claimed investigation looks at, from its firing alerts; a fleet incident's
    host from its own alerts alone and the scope labels they agree on, so that each host gets the
    evidence and ranking a single-host incident gets."""
    mine = _mine(claim, config)
    if mine:
        return target_from_alerts([claim.alert_labels[i] for i in mine], [claim.alert_starts[i] for i in mine], config)
    # The host's alerts stopped firing since its round was queued: the host by name alone.
    host = claim.host
    return Target(host=host, labels={}, alert_start=min(claim.alert_starts), hosts=[host] if host else [])


def common_factor(
    settings: Settings,
    claim: investigations.Claim,
    config: ScopeConfig,
    now: datetime | None = None,
    source: PrometheusSource | None = None,
) -> CommonFactor | None:
    """What a fleet incident's affected hosts (every host its firing alerts name) share that
    their healthy peers lack (rca.domain.factor), judged once for the round by its first
    investigation; None for any other investigation, a single host, or a Prometheus that could
    not be read (a few fleet-wide queries: rca.collect.peers)."""
    if claim.round_id != claim.investigation_id:
        return None
    hosts = hosts_of(claim.alert_labels, config.host_labels)
    if len(hosts) < 2:
        return None
    source = source or PrometheusSource.configured(settings)
    serving = profile_for(settings.file_config()).scopes.get("serving")
    if source is None or serving is None:
        return None
    facts = source.fleet_facts(serving.probe, hosts, now or datetime.now(UTC))
    return decide(facts, min(claim.alert_starts)) if facts is not None else None


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
    source = source or PrometheusSource.configured(settings)
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
    findings += trace_findings(
        settings, file_config.traces, alert_labels, target.alert_start, window.start, window.end, collection.stack
    )
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
