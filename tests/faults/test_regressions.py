"""Regressions of the defects the fault suite found in the job layer:

- a poison investigation (one whose run dies every time) was re-queued by the sweep forever: now
  the sweep closes it as failed after RCA_INVESTIGATION_MAX_ATTEMPTS runs, with its reason, and
  Slack is posted that it failed;
- a task that Redis redelivered while its run was still alive started a second, overlapping run:
  now a claim under a live lease is refused.

(A notice Slack refused for good used to be dropped: tests/notify/test_service.py holds that one.)
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from rca.incidents import investigations
from rca.jobs.celery_app import INVESTIGATE, INVESTIGATIONS_QUEUE
from rca.store.db import session_scope
from rca.store.models import InvestigationRow
from tests.faults.stack import FaultStack
from tests.faults.workers import investigations_pool, kill_all
from tests.helpers.databases import rows
from tests.helpers.processes import Worker
from tests.helpers.slack import of_incident, queued_investigation, slack_owed
from tests.helpers.waiting import wait_for

LEASE = timedelta(seconds=30)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # every claim of these tests was made since


def investigation(url: str, investigation_id: int) -> InvestigationRow:
    with session_scope(url) as session:
        inv = session.get(InvestigationRow, investigation_id)
        assert inv is not None
        session.expunge(inv)
        return inv


def test_a_claim_under_a_live_lease_is_refused_and_one_that_lapsed_is_taken(db_url: str) -> None:
    investigation_id = queued_investigation(db_url)
    with session_scope(db_url) as session:
        assert investigations.claim(session, investigation_id, lease=LEASE) is not None
    with session_scope(db_url) as session:
        assert investigations.claim(session, investigation_id, lease=LEASE) is None  # its run is alive
        assert investigations.renew_lease(session, investigation_id, timedelta(seconds=-1))  # it died
    with session_scope(db_url) as session:
        assert investigations.claim(session, investigation_id, lease=LEASE) is not None
    # One run handed out: a re-claim of a running investigation (its own retry) is not another.
    assert investigation(db_url, investigation_id).attempts == 1


def test_the_sweep_gives_a_poison_investigation_up_with_its_reason_and_owes_slack(db_url: str) -> None:
    investigation_id = queued_investigation(db_url)
    incident_id = investigation(db_url, investigation_id).incident_id
    for attempt in (1, 2):
        with session_scope(db_url) as session:
            assert investigations.claim(session, investigation_id, lease=LEASE) is not None
            if attempt == 2:
                investigations.release(session, investigation_id, "OperationalError: boom", EPOCH)
            investigations.renew_lease(session, investigation_id, timedelta(seconds=-1))  # its worker died
        with session_scope(db_url) as session:
            found = investigations.stranded(session, timedelta(seconds=60), 2, owe_slack=True)
        if attempt == 1:
            assert (found.requeued, found.gave_up) == ([investigation_id], [])
    assert (found.requeued, found.gave_up) == ([], [incident_id])
    inv = investigation(db_url, investigation_id)
    assert (inv.status, inv.attempts, inv.error) == ("failed", 2, "gave up after 2 attempts: OperationalError: boom")
    assert inv.finished_at is not None and slack_owed(db_url, incident_id)[0] == 1
    with session_scope(db_url) as session:
        assert investigations.stranded(session, timedelta(0), 2, owe_slack=True).requeued == []
        assert investigations.claim(session, investigation_id, lease=LEASE) is None  # failed is final


def investigation_queries(stack: FaultStack) -> list[str]:
    """What the investigations asked Prometheus, without the readiness probes' `1` (/readyz and a
    worker's start ask it, at their own times)."""
    return [q for q in stack.prometheus.queries if q.strip() != "1"]


def test_a_redelivered_task_whose_run_is_alive_starts_no_second_run(stack: FaultStack, worker: Worker) -> None:
    """The same investigation's message delivered again while its run goes on (what Redis does
    after its visibility timeout): the second delivery is skipped, the run is not doubled."""
    stack.prometheus.delay = 0.2
    reference = stack.send("reference", 1)
    stack.settle(reference, 60, "the reference investigation")
    per_run = len(investigation_queries(stack))
    stack.prometheus.queries.clear()

    burst = stack.send("redelivered", 1)
    [incident_id] = burst.accepted.values()
    query = select(InvestigationRow.id, InvestigationRow.status).where(InvestigationRow.incident_id == incident_id)
    wait_for(lambda: [r.status for r in rows(stack.db_url, query)] == ["running"], 30, "the investigation to run")
    wait_for(lambda: stack.prometheus.queries, 10, "the run to query Prometheus")
    [row] = rows(stack.db_url, query)
    again = worker.app.send_task(INVESTIGATE, args=[row.id], queue=INVESTIGATIONS_QUEUE)
    answered = re.compile(rf"rca\.investigate\[{again.id}\] succeeded in [\d.]+s: '(\w+)'")
    outcome = wait_for(lambda: answered.search(worker.log.read_text()), 30, f"the redelivered task\n{worker.output()}")
    assert outcome.group(1) == "skipped"
    report = stack.settle(burst, 60, "the investigation")
    assert report.clean, report.problems()
    assert len(investigation_queries(stack)) == per_run  # one run's queries, not two
    assert investigation(stack.db_url, row.id).attempts == 1


def test_an_investigation_that_kills_its_worker_every_time_is_given_up_and_posted(
    stack: FaultStack, worker: Worker
) -> None:
    """Each run of the investigation dies with its pool process (kill -9, as an OOM kill would):
    after RCA_INVESTIGATION_MAX_ATTEMPTS (2 here) runs the sweep closes it as failed, Slack is
    posted once that it failed, and it is never run again."""
    stack.prometheus.delay = 1.0  # long runs: killed mid-way
    burst = stack.send("poison", 1)
    [incident_id] = burst.accepted.values()
    columns = (InvestigationRow.status, InvestigationRow.started_at, InvestigationRow.attempts, InvestigationRow.error)
    query = select(*columns).where(InvestigationRow.incident_id == incident_id)
    killed: set[object] = set()

    def kill_each_run() -> bool:
        [inv] = rows(stack.db_url, query)
        if inv.status == "running" and inv.started_at not in killed:
            killed.add(inv.started_at)
            kill_all(investigations_pool(worker.process.pid))
        return inv.status == "failed"

    wait_for(kill_each_run, 60, f"the poison investigation to be given up\n{worker.output()}", interval=0.1)
    report = stack.settle(burst, 30, "the notice of the failed investigation")
    assert report.failed == [incident_id] and not report.duplicate_posts and not report.missing_posts
    [inv] = rows(stack.db_url, query)
    assert inv.attempts == 2 and inv.error.startswith("gave up after 2 attempts: its worker stopped"), inv.error
    [post] = of_incident(stack.slack.posts(), incident_id)
    assert "The investigation failed" in json.dumps(post.payload)
    time.sleep(5)  # past a lease and a sweep: a re-queue would have claimed it again by now
    [inv] = rows(stack.db_url, query)
    assert (inv.status, inv.attempts) == ("failed", 2)
