"""One investigation's life, the same under Celery and in the process of `rca serve`: claim the
row under a lease, keep the lease renewed, analyse (rca.pipeline), save the result, and on an
error either release the claim for a retry (the errors of `JOB_RETRIES`, with its backoff) or close
the investigation as failed; then hand the finished investigation to Slack.

The runners only schedule the retries: the Celery task raises `Task.retry` with the delay an
attempt returns (rca/jobs/celery_app.py), the in-process runner waits that long on its thread
(`InvestigationRunner.run`, rca/jobs/inline.py).

The lease: a claim carries one (`investigations.claim`), renewed here while the run lasts. When
the worker dies, kill -9 or a lost machine, the renewals stop, the lease lapses within
RCA_INVESTIGATION_LEASE_SECONDS, and the next sweep hands the investigation to another worker: a
crash costs a lease and a sweep interval, not minutes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy.exc import OperationalError, StatementError

from rca import metrics, pipeline
from rca.config import Settings
from rca.domain.clock import utcnow
from rca.domain.evidence import Hypothesis
from rca.domain.status import Analyst, InvestigationStatus
from rca.incidents import investigations
from rca.jobs.policy import JOB_RETRIES, RetryPolicy
from rca.jobs.slack import queue_notice_of
from rca.signals.findings import Finding
from rca.store import similar
from rca.store.answers import DatabaseAnswerCache
from rca.store.db import session_scope

log = logging.getLogger(__name__)

QueueNotice = Callable[[int, str], bool]  # (incident id, event) -> whether the Slack notice was queued
SKIPPED = "skipped"  # what a run returns when the investigation was finished or is running elsewhere
STORE_REFUSED = "the database refused the LLM's answer"  # how the fallback reason starts then


@dataclass(frozen=True)
class RetryAfter:
    """An attempt stopped on a transient error with retries left: run it again after `delay` seconds."""

    error: Exception
    delay: float


class InvestigationRunner:
    """Runs stored investigations to their end; `queue_notice` hands a finished one to Slack."""

    def __init__(self, settings: Settings, queue_notice: QueueNotice, policy: RetryPolicy = JOB_RETRIES) -> None:
        self.settings = settings
        self.queue_notice = queue_notice
        self.policy = policy

    def attempt(self, investigation_id: int, retries: int = 0) -> str | RetryAfter:
        """One try after `retries` earlier ones: the final status ("skipped" when it was already
        done or runs elsewhere), or `RetryAfter` on a transient error with retries left.

        On a transient error the claim is released and the investigation stays `running` (the
        sweep takes it up should the retries never finish it); with no retry left the error
        propagates. Any other error closes it as `failed`, and Slack is told. Also after a
        redelivery ("skipped"), the notice is queued again: the first run may have died before
        queueing it, and delivery sends nothing when Slack already shows this evidence."""
        started, claimed_since = time.perf_counter(), utcnow()
        try:
            with lease_renewed(self.settings, investigation_id):
                status = run_investigation(self.settings, investigation_id)
        except self.policy.transient as exc:
            release_claim(self.settings, investigation_id, exc, claimed_since)
            if retries >= self.policy.max_retries:
                raise
            return RetryAfter(exc, self.policy.delay(retries))
        except Exception as exc:
            record_failure(self.settings, investigation_id, exc, time.perf_counter() - started)
            status = InvestigationStatus.FAILED
        queue_notice_of(self.settings, investigation_id, self.queue_notice)
        return status

    def run(self, investigation_id: int, wait: Callable[[float], bool]) -> str:
        """Attempt until the investigation ends or the retries are used up, waiting the policy's
        backoff between tries; `wait(seconds)` returns True to stop waiting (the process is
        stopping). Either way the investigation is left `running`, its lease released, for the
        sweep to take up."""
        for retries in range(self.policy.max_retries + 1):
            try:
                outcome = self.attempt(investigation_id, retries)
            except self.policy.transient:
                log.exception("investigation %s: retries used up; the sweep takes it up", investigation_id)
                break
            if not isinstance(outcome, RetryAfter):
                return outcome
            log.warning(
                "investigation %s: %s; retry %d of %d in %.1f s",
                investigation_id,
                type(outcome.error).__name__,
                retries + 1,
                self.policy.max_retries,
                outcome.delay,
            )
            if wait(outcome.delay):
                break
        return InvestigationStatus.RUNNING


def run_investigation(settings: Settings, investigation_id: int) -> str:
    """Claim, analyse and save one stored investigation; safe to call again for the same id.

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
        return SKIPPED
    scope = settings.file_config().target
    cache = DatabaseAnswerCache(url, settings.llm_cache_seconds, exclude_investigation_id=investigation_id)
    analysis = pipeline.analyse(
        settings,
        pipeline.target_of(claim, scope),
        alerts=pipeline.alerts_of(claim, scope),
        cache=cache,
        history=partial(_precedents, url, claim),
    )
    analysis = replace(analysis, common_factor=pipeline.common_factor(settings, claim, scope))
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


def _llm_wrote(analysis: pipeline.Analysis) -> bool:
    """Whether anything of the LLM (its answer or its audit trail) is in what is being stored."""
    record = analysis.analyst
    return record is not None and (record.analyst == Analyst.LLM or bool(record.exchange))


def _precedents(
    url: str, claim: investigations.Claim, findings: list[Finding], rules: list[Hypothesis], stack: str | None
) -> list[dict[str, Any]]:
    """Past incidents alike enough to cite, as the LLM prompt lists them."""
    signature = similar.signature_of(
        claim.incident_id, claim.incident_created_at, findings, [h.category for h in rules], stack
    )
    with session_scope(url) as session:
        found = similar.precedents(session, signature)
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


def _save(url: str, investigation_id: int, analysis: pipeline.Analysis, total_seconds: float, owe_slack: bool) -> None:
    """The result and the findings' series in one transaction, with what the incident owes after it."""
    with session_scope(url) as session:
        investigations.finish(
            session, investigation_id, analysis.result(total_seconds), analysis.evidence, owe_slack=owe_slack
        )


@contextmanager
def lease_renewed(settings: Settings, investigation_id: int) -> Iterator[None]:
    """Renew the investigation's lease every third of its length while the block runs. A renewal
    that fails (the database blinked) is tried again at the next beat; one lease covers two misses."""
    lease = timedelta(seconds=settings.investigation_lease_seconds)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(lease.total_seconds() / 3):
            try:
                with session_scope(settings.effective_database_url) as session:
                    investigations.renew_lease(session, investigation_id, lease)
            except Exception as exc:
                log.warning("investigation %s: lease not renewed: %s", investigation_id, type(exc).__name__)

    thread = threading.Thread(target=beat, name=f"lease-{investigation_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def release_claim(settings: Settings, investigation_id: int, exc: Exception, claimed_since: datetime) -> None:
    """Before a retry: end this run's lease (claimed since `claimed_since`, not an earlier run's)
    so that the retry may claim it at once, a live lease turning every other claim away, and keep
    the error as its reason. Best effort: with the database down this fails too, and the lease
    lapses by itself."""
    try:
        with session_scope(settings.effective_database_url) as session:
            investigations.release(session, investigation_id, f"{type(exc).__name__}: {exc}", claimed_since)
    except Exception as release_error:
        log.info("investigation %s: lease not released: %s", investigation_id, type(release_error).__name__)


def record_failure(settings: Settings, investigation_id: int, exc: Exception, seconds: float) -> None:
    """Close the investigation as failed after an error no retry can fix (a bug, bad data, the
    time limit), owing Slack the notice that says so; called from the `except` block, so that the
    log has the traceback."""
    log.exception("investigation %s failed", investigation_id)
    with session_scope(settings.effective_database_url) as session:
        investigations.fail(session, investigation_id, f"{type(exc).__name__}: {exc}", owe_slack=settings.slack_enabled)
    metrics.investigation_finished(InvestigationStatus.FAILED, seconds)
