"""One Slack delivery run for an incident: decide what (if anything) to send, send it, record it.

Idempotency. The incident's `slack_deliveries` row (unique on the incident) is locked with
SELECT ... FOR UPDATE for the whole run, Slack calls included, and the outcome is committed with
it. A redelivered or concurrent task therefore waits for the first one and then finds the
message already posted with the same change key, and sends nothing. What is sent is
derived from the row, not from the task's arguments, so any number of tasks converge on one
message, at most one update per material change, and one resolved notice.

The crash window. If the COMMIT is lost after Slack accepted a post (the database went away, the
worker died), the row is rolled back. In bot mode each post and thread reply is first recorded
with a key that the message carries in its metadata, in a transaction of its own, and the next
delivery searches the channel for that key before posting again (rca/notify/once.py): the
message is posted once. Where the channel cannot be read (no `channels:history` scope) and with
an incoming webhook (which cannot read at all) that window stays at-least-once: a rare duplicate
is better than an alert nobody sees.

Notices owed. The transaction that finishes an investigation (or resolves the incident at intake)
records a notice as owed (rca/incidents/notices.py); each run settles it with its outcome, so that the
sweep delivers whatever notice a lost enqueue dropped, and a swept run racing a queued one is just
another concurrent task: it waits on the row and sends nothing. A backtest's incident (origin
`backtest`, past warnings replayed) is never owed and never posted, whoever asks.

A Slack outage never touches investigations: this runs in its own task on its own queue, after
the investigation was saved, and only writes the delivery rows.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from rca import metrics
from rca.config import Settings
from rca.diagnosis.ranking import taxonomy
from rca.domain import early_warning
from rca.domain.clock import utcnow
from rca.domain.retry import Backoff
from rca.domain.status import AlertStatus, DeliveryStatus, InvestigationStatus
from rca.incidents import notices
from rca.incidents.queue import ACTIVE
from rca.notify import blocks, once
from rca.notify.delivery import Sender, SendResult, make_sender
from rca.notify.message import (
    Confirmed,
    IncidentMessage,
    change_key_of,
    fleet_change_key,
    from_incident,
    incident_labels,
)
from rca.notify.routing import route
from rca.store import feedback, rounds, similar
from rca.store.db import session_scope
from rca.store.investigations import FINISHED
from rca.store.models import IncidentRow, InvestigationRow, SlackAttemptRow, SlackDeliveryRow

log = logging.getLogger(__name__)

MAX_RETRY_DELAY = 300.0  # seconds; also keeps Celery countdowns well inside Redis' visibility timeout


@dataclass(frozen=True)
class Outcome:
    """How a run ended: `delivered`, `unchanged`, `skipped`, `retrying` (then `retry_in` seconds) or `failed`."""

    status: str
    retry_in: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class Step:
    action: str  # post | update | reply
    send: Callable[[str | None], SendResult]  # given the key of a keyed step
    done: Callable[[SlackDeliveryRow, SendResult], None]
    # Posts and replies: recorded as sending, with a key, before they are sent (rca/notify/once.py);
    # None for chat.update, which edits in place and may simply be sent again.
    channel: str | None = None
    thread_ts: str | None = None


def _lock(session: Session, incident_id: int) -> SlackDeliveryRow | None:
    return session.scalar(select(SlackDeliveryRow).where(SlackDeliveryRow.incident_id == incident_id).with_for_update())


def lock_delivery(session: Session, incident_id: int, mode: str) -> SlackDeliveryRow:
    """The incident's delivery row, created if missing, locked until the transaction ends."""
    row = _lock(session, incident_id)
    if row is None:
        try:
            with session.begin_nested():
                session.add(
                    SlackDeliveryRow(
                        incident_id=incident_id, mode=mode, status=DeliveryStatus.PENDING, messages=0, updates=0
                    )
                )
        except IntegrityError:
            pass  # another run created it first; lock theirs
        row = _lock(session, incident_id)
    assert row is not None
    row.mode = mode
    return row


def _latest_finished(session: Session, incident_id: int) -> InvestigationRow | None:
    """The latest done investigation; without one, the latest inconclusive or failed (the message
    says it could not investigate, or failed): a newer blind run does not hide a diagnosis."""
    return session.scalar(
        select(InvestigationRow)
        .where(InvestigationRow.incident_id == incident_id, InvestigationRow.status.in_(FINISHED))
        .options(selectinload(InvestigationRow.findings), selectinload(InvestigationRow.hypotheses))
        .order_by((InvestigationRow.status == InvestigationStatus.DONE).desc(), InvestigationRow.id.desc())
        .limit(1)
    )


def _main_fingerprint(evidence: str, status: str, verdicts: str) -> str:
    """What the main message shows: the evidence, whether the incident is still firing, and who
    confirmed a cause or asked for an investigation (a message without any keeps its old key)."""
    shown = f"{evidence}:{status}:{verdicts}" if verdicts else f"{evidence}:{status}"
    return hashlib.sha256(shown.encode()).hexdigest()


def _said(session: Session, incident_id: int, message: IncidentMessage) -> IncidentMessage:
    """The message with what people said about the incident: its newest feedback, who asked for
    the investigation queued or running now, and the causes one may pick (the buttons')."""
    said = feedback.history(session, incident_id)
    asked_by = session.scalar(
        select(InvestigationRow.requested_by)
        .where(InvestigationRow.incident_id == incident_id, InvestigationRow.status.in_(ACTIVE))
        .order_by(InvestigationRow.id.desc())
        .limit(1)
    )
    confirmed = Confirmed(said[-1].author, said[-1].category) if said else None
    return replace(message, confirmed=confirmed, asked_by=asked_by, causes=list(taxonomy()))


def _plan(
    delivery: SlackDeliveryRow,
    sender: Sender,
    message: IncidentMessage,
    investigation_id: int,
    evidence: str,
    channel: str | None,
    resolved_at: datetime | None,
) -> list[Step]:
    """The calls still owed to Slack for this incident, derived from what the row says was sent."""
    main = _main_fingerprint(evidence, message.status, message.verdicts)
    resolved = message.status == AlertStatus.RESOLVED and delivery.resolved_notified_at is None

    def posted(row: SlackDeliveryRow, result: SendResult) -> None:
        row.messages += 1
        row.channel, row.ts = result.channel or row.channel, result.ts or row.ts
        row.fingerprint, row.thread_fingerprint = main, evidence
        if message.status == AlertStatus.RESOLVED:
            row.resolved_notified_at = utcnow()  # the message itself says so

    def updated(row: SlackDeliveryRow, _result: SendResult) -> None:
        row.updates += 1
        row.fingerprint = main

    def replied_change(row: SlackDeliveryRow, _result: SendResult) -> None:
        row.messages += 1
        row.thread_fingerprint = evidence

    def replied_resolved(row: SlackDeliveryRow, _result: SendResult) -> None:
        row.messages += 1
        row.resolved_notified_at = utcnow()

    resolved_payload = blocks.resolved_reply(message, resolved_at)
    if sender.mode == "webhook":
        hook = once.WEBHOOK
        if delivery.messages == 0:
            return [Step("post", lambda _key: sender.post(None, blocks.render(message)), posted, channel=hook)]
        steps = []
        if delivery.thread_fingerprint != evidence:
            note = f"Update: re-investigation #{investigation_id} changed the evidence"
            steps.append(
                Step("post", lambda _key: sender.post(None, blocks.render(message, note)), posted, channel=hook)
            )
        elif resolved:
            steps.append(Step("post", lambda _key: sender.post(None, resolved_payload), replied_resolved, channel=hook))
        return steps
    if delivery.ts is None or delivery.channel is None:
        first = blocks.render(message, buttons=True)
        return [Step("post", lambda key: sender.post(channel, first, key=key), posted, channel=channel or "")]
    ts, where = delivery.ts, delivery.channel
    steps = []
    if delivery.fingerprint != main:
        steps.append(
            Step("update", lambda _key: sender.update(where, ts, blocks.render(message, buttons=True)), updated)
        )
    if delivery.thread_fingerprint != evidence:
        reply = blocks.change_reply(message, investigation_id)
        steps.append(
            Step("reply", lambda key: sender.post(where, reply, ts, key), replied_change, channel=where, thread_ts=ts)
        )
    if resolved:
        steps.append(
            Step(
                "reply",
                lambda key: sender.post(where, resolved_payload, ts, key),
                replied_resolved,
                channel=where,
                thread_ts=ts,
            )
        )
    return steps


def slack_backoff(settings: Settings) -> Backoff:
    """Slack's retry policy where it gives no Retry-After: the service's backoff with jitter
    (rca.domain.retry) from RCA_SLACK_RETRY_BACKOFF_SECONDS, doubling, capped at MAX_RETRY_DELAY."""
    return Backoff(base=settings.slack_retry_backoff_seconds, cap=MAX_RETRY_DELAY)


def retry_delay(result: SendResult, attempt: int, backoff: Backoff) -> float:
    """Slack's Retry-After when it gave one (Slack asks for exactly that wait), else `backoff`'s
    wait before attempt `attempt + 1`."""
    if result.retry_after is not None:
        return min(result.retry_after, MAX_RETRY_DELAY)
    return backoff.delay(attempt - 1)


def deliver(
    settings: Settings, incident_id: int, event: str, attempt: int = 1, sender: Sender | None = None
) -> Outcome:
    """Bring the incident's Slack message up to date. `attempt` counts this task's tries (1-based);
    after `RCA_SLACK_MAX_ATTEMPTS` a failing call is final.

    The notices owed (rca/incidents/notices.py) are settled with the outcome, in the same transaction:
    up to date, or nothing to say yet. A retry defers them to its own time, a failure for good to
    RCA_SLACK_FAILED_RETRY_SECONDS later (it stays owed, never dropped); an error (the database
    blinked) settles nothing, and the sweeper re-queues what is still owed."""
    sender = sender or make_sender(settings)
    if sender is None:
        return Outcome("skipped", detail="Slack is not configured")
    done: list[str] = []  # what Slack was told (or found to have), in order
    try:
        outcome = _deliver(settings, sender, incident_id, event, attempt, done)
    except Exception:
        if done:  # Slack has it, the database not: the next delivery looks before sending again
            log.warning(
                "slack: incident %s: %s sent, not yet recorded (the commit failed)", incident_id, ", ".join(done)
            )
        raise
    if outcome.status == "delivered":  # only now is it true, and recorded
        log.info("slack: incident %s up to date (%s)", incident_id, outcome.detail)
    elif done:
        log.info("slack: incident %s: %s sent and recorded, then %s", incident_id, ", ".join(done), outcome.status)
    return outcome


def _deliver(
    settings: Settings, sender: Sender, incident_id: int, event: str, attempt: int, done: list[str]
) -> Outcome:
    """`deliver` inside its transaction, which commits (or not) on return; `done` collects the calls
    Slack took, for the log written once that commit has or has not recorded them."""
    with session_scope(settings.effective_database_url) as session:
        origin = session.scalar(select(IncidentRow.origin).where(IncidentRow.id == incident_id))
        if origin is None:
            return Outcome("skipped", detail=f"incident {incident_id} not found")
        if origin == early_warning.BACKTEST:
            return Outcome("skipped", detail=f"incident {incident_id} is a backtest's: never posted")
        delivery = lock_delivery(session, incident_id, sender.mode)
        # Read after the lock: a notice owed before this point is answered (and settled) here, one
        # owed later changes the count and stays owed.
        incident = session.scalar(
            select(IncidentRow).where(IncidentRow.id == incident_id).options(selectinload(IncidentRow.alerts))
        )
        assert incident is not None  # the delivery row's foreign key holds it
        outcome = _bring_up_to_date(session, settings, sender, delivery, incident, event, attempt, done)
        if outcome.status == "failed":  # stays owed, failed and visible; tried again much later
            notices.defer(session, incident_id, utcnow() + timedelta(seconds=settings.slack_failed_retry_seconds))
        elif outcome.retry_in is None:
            notices.settle(session, incident_id, incident.slack_owed)
        else:
            notices.defer(session, incident_id, utcnow() + timedelta(seconds=outcome.retry_in))
        return outcome


def _bring_up_to_date(
    session: Session,
    settings: Settings,
    sender: Sender,
    delivery: SlackDeliveryRow,
    incident: IncidentRow,
    event: str,
    attempt: int,
    done: list[str],
) -> Outcome:
    """Send what the locked delivery row says Slack is missing, recording every call on the row and
    appending each call Slack took (or a message found already there) to `done`."""
    incident_id = incident.id
    investigation = _latest_finished(session, incident_id)
    if investigation is None:
        return Outcome("skipped", detail="no finished investigation yet; its completion will post")
    fleet = rounds.round_of(session, investigation)
    if fleet is not None and fleet.summary.unfinished:  # one message for the round, once every host answered
        return Outcome("skipped", detail="hosts of the round still being investigated; the last to finish posts")
    channel = route(incident_labels(incident), settings.file_config().slack, settings.slack_channel)
    evidence = fleet_change_key(fleet) if fleet is not None else change_key_of(investigation)

    def plan(message: IncidentMessage) -> list[Step]:
        return _plan(delivery, sender, message, investigation.id, evidence, channel, incident.resolved_at)

    if not plan(_said(session, incident_id, from_incident(incident, investigation, settings.public_url, fleet=fleet))):
        return Outcome("unchanged", detail="Slack already shows this evidence")
    # Only a message that will be sent needs the past incident most like this one (a search).
    signature = similar.signature(session, incident_id)
    last = similar.precedents(session, signature, limit=1) if signature else []
    message = from_incident(incident, investigation, settings.public_url, last[0] if last else None, fleet)
    message = _said(session, incident_id, message)
    steps = plan(message)
    while steps:
        step = steps.pop(0)
        send = None
        if step.channel is not None:  # a post: recorded as sending, with its key, before it is sent
            earlier = once.look_for_earlier(
                session, settings, sender, incident_id, step.action, step.channel, step.thread_ts
            )
            if earlier.read is not None:
                _store_call(delivery, event, "find", earlier.read)
                if not earlier.read.ok and earlier.read.retryable:  # else unreadable: post (at least once)
                    return _stop(settings, delivery, "find", earlier.read, incident_id, attempt)
            if earlier.wait is not None:  # not in the channel yet, but its call may not have ended
                delivery.status = DeliveryStatus.RETRYING
                detail = "an earlier send may still be in flight"
                return Outcome("retrying", min(earlier.wait, MAX_RETRY_DELAY), detail)
            if earlier.ts is not None:  # Slack has it: adopt it instead of posting it again
                metrics.SLACK_DELIVERIES.labels(outcome=metrics.SLACK_FOUND).inc()
                step.done(delivery, SendResult(ok=True, channel=earlier.channel, ts=earlier.ts))
                done.append(f"{step.action} found ts={earlier.ts}")
                if step.action == "post":  # it shows the incident as it was then: update it to now
                    delivery.fingerprint = None
                    steps = plan(message)
                continue
            send = once.begin(session, settings, incident_id, step.action, step.channel, step.thread_ts)
        result = step.send(send.key if send is not None else None)
        if result.ok:  # before any write: the next one may be the one that fails
            done.append(step.action + (f" ts={result.ts}" if result.ts else ""))
        if send is not None:
            once.end(session, send, result)
        _store_call(delivery, event, step.action, result)
        if not result.ok:
            return _stop(settings, delivery, step.action, result, incident_id, attempt)
        step.done(delivery, result)
    delivery.status, delivery.last_error = DeliveryStatus.DELIVERED, None
    return Outcome("delivered", detail=", ".join(done))


def _store_call(delivery: SlackDeliveryRow, event: str, action: str, result: SendResult) -> None:
    """One Slack call on the delivery row (its attempts) and in the metrics."""
    delivery.attempts.append(
        SlackAttemptRow(
            at=utcnow(),
            event=event,
            action=action,
            outcome=result.outcome,
            http_status=result.http_status,
            error=result.error,
            retry_after=result.retry_after,
        )
    )
    delivery.updated_at = utcnow()
    count_slack_call(action, result)


def _stop(
    settings: Settings, delivery: SlackDeliveryRow, action: str, result: SendResult, incident_id: int, attempt: int
) -> Outcome:
    """How a run ends on a failed call: retrying (Slack's Retry-After, or backoff) or failed for good."""
    final = not result.retryable or attempt >= settings.slack_max_attempts
    delivery.status = DeliveryStatus.FAILED if final else DeliveryStatus.RETRYING
    delivery.last_error = result.error
    log.warning(
        "slack %s for incident %s failed (%s, HTTP %s)%s",
        action,
        incident_id,
        result.error,
        result.http_status,
        "" if final else f"; attempt {attempt}, will retry",
    )
    if final:
        return Outcome("failed", detail=result.error or "")
    return Outcome("retrying", retry_delay(result, attempt, slack_backoff(settings)), result.error or "")


def count_slack_call(action: str, result: SendResult) -> None:
    """One Slack call in `rca_slack_deliveries_total` (what a success did) or
    `rca_slack_delivery_failures_total` (why it failed)."""
    if result.ok:
        if action in metrics.SLACK_OUTCOMES:  # a read of the channel delivers nothing
            metrics.SLACK_DELIVERIES.labels(outcome=metrics.SLACK_OUTCOMES[action]).inc()
    else:
        metrics.SLACK_FAILURES.labels(reason=result.failure_reason).inc()


def finished_incident(settings: Settings, investigation_id: int) -> int | None:
    """The incident of a finished investigation, done, inconclusive or failed (None otherwise, and for a
    backtest's incident, never posted): what to notify about."""
    with session_scope(settings.effective_database_url) as session:
        row = session.execute(
            select(InvestigationRow.incident_id, InvestigationRow.status)
            .join(IncidentRow, IncidentRow.id == InvestigationRow.incident_id)
            .where(InvestigationRow.id == investigation_id, IncidentRow.origin != early_warning.BACKTEST)
        ).first()
    return row.incident_id if row is not None and row.status in FINISHED else None
