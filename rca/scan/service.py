"""The early-warning loop's body: scan the fleet, advance every instance's state, store the
transitions and say what to dispatch. The runners (`rca.jobs.scan`) call `tick` on their
schedule and enqueue what it returns after its commit."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from rca import metrics
from rca.config import Settings
from rca.scan.scanner import Scanner, ScanReport, prometheus_fleet_source
from rca.scan.slo_rules import Slo
from rca.scan.states import Policy, TargetMemory, advance
from rca.scan.warnings import Actions, keep_slos, load_memories, load_slos, record
from rca.store.db import session_scope

log = logging.getLogger(__name__)


def policy_of(settings: Settings) -> Policy:
    return Policy(
        horizon_seconds=settings.scan_horizon_minutes * 60,
        sustain=settings.scan_sustain_scans,
        calm_seconds=settings.scan_calm_seconds,
        slo_probability=settings.scan_slo_probability,
        slo_sustain=settings.scan_slo_sustain_scans,
        warmup_seconds=settings.scan_warmup_seconds,
        saturation_probability=settings.scan_saturation_probability,
    )


@dataclass
class EarlyWarnings:
    """The scanner and the targets' memory, kept across ticks."""

    settings: Settings
    scanner: Scanner
    memories: dict[str, TargetMemory] | None = field(default=None, init=False)
    slos: dict[str, Slo | None] | None = field(default=None, init=False)  # as stored on the targets' rows

    @classmethod
    def from_settings(cls, settings: Settings) -> EarlyWarnings:
        return cls(settings, Scanner(settings, prometheus_fleet_source(settings)))

    def tick(self, at: datetime) -> tuple[ScanReport, Actions]:
        """One scan at `at`; transitions stored in one transaction."""
        report = self.scanner.scan(at)
        policy = policy_of(self.settings)
        actions = Actions()
        url = self.settings.effective_database_url
        with session_scope(url) as session:
            memories = self.memories if self.memories is not None else load_memories(session)
            stored = self.slos if self.slos is not None else load_slos(session)
            updated, slos = dict(memories), dict(stored)
            # An instance's SLO is stored when it changes (a rule edited, the first scan that judges it).
            changed = [
                (serving, slo)
                for serving in report.targets
                if (slo := report.slos.get(serving.instance)) is not None and slo != slos.get(serving.instance)
            ]
            keep_slos(session, changed, memories, report.at.timestamp())
            for serving, slo in changed:
                slos[serving.instance] = slo
                log.info("scan: %s judged against a TTFT SLO of %g s (%s)", serving.instance, slo.seconds, slo.source)
            for serving in report.targets:
                assessment = report.assessments.get(serving.instance)
                if assessment is None:
                    continue
                memory, transition = advance(memories.get(serving.instance, TargetMemory()), assessment, policy)
                if transition is not None:
                    memory = record(
                        session,
                        serving,
                        transition,
                        memory,
                        assessment,
                        policy,
                        owe_slack=self.settings.slack_enabled,
                        actions=actions,
                    )
                    metrics.SCAN_TRANSITIONS.labels(state=transition.after).inc()
                    log.info(
                        "scan: %s %s -> %s: %s",
                        serving.instance,
                        transition.before,
                        transition.after,
                        transition.reason,
                    )
                updated[serving.instance] = memory
        self.memories, self.slos = updated, slos  # only once the transitions are committed
        metrics.scan_finished(len(report.targets), len(report.warming), report.queries, report.seconds)
        log.info(
            "scan: %d targets (%d warming), %d queries, %.2f s",
            len(report.targets),
            len(report.warming),
            report.queries,
            report.seconds,
        )
        return report, actions
