"""Slack notices owed (`rca.store.notices`) on PostgreSQL and SQLite: owed in the caller's
transaction, cleared only when nothing more was owed since it was read, claimed by the sweeper
after a grace period and leased, and a row another transaction holds is left for the next sweep."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from rca.store import notices
from rca.store.db import session_scope
from rca.store.models import IncidentRow
from tests.helpers.slack import backdate_owed, slack_owed, store_incident


def test_a_new_incident_owes_nothing(db_url: str) -> None:
    incident_id = store_incident(db_url)
    assert slack_owed(db_url, incident_id) == (0, None)
    with session_scope(db_url) as session:
        assert notices.claim_owed(session, timedelta(0)) == []


def test_owe_counts_and_keeps_the_oldest_time(db_url: str) -> None:
    incident_id = store_incident(db_url)
    before = datetime.now(UTC)
    with session_scope(db_url) as session:
        notices.owe(session, incident_id)
    count, since = slack_owed(db_url, incident_id)
    assert count == 1 and since is not None and since >= before - timedelta(seconds=1)
    with session_scope(db_url) as session:
        notices.owe(session, incident_id)
    assert slack_owed(db_url, incident_id) == (2, since)


def test_owe_rolls_back_with_its_transaction(db_url: str) -> None:
    incident_id = store_incident(db_url)
    with pytest.raises(RuntimeError), session_scope(db_url) as session:
        notices.owe(session, incident_id)
        raise RuntimeError("the investigation's commit failed")
    assert slack_owed(db_url, incident_id) == (0, None)


def test_settle_clears_only_what_was_read(db_url: str) -> None:
    """A delivery read count 1; a notice owed meanwhile (count 2) must stay owed."""
    incident_id = store_incident(db_url)
    with session_scope(db_url) as session:
        notices.owe(session, incident_id)
        notices.owe(session, incident_id)
    with session_scope(db_url) as session:
        assert notices.settle(session, incident_id, owed=1) is False
    assert slack_owed(db_url, incident_id)[1] is not None
    with session_scope(db_url) as session:
        assert notices.settle(session, incident_id, owed=2) is True
    assert slack_owed(db_url, incident_id) == (2, None)
    with session_scope(db_url) as session:
        assert notices.settle(session, incident_id, owed=2) is False  # nothing owed: a no-op


def test_the_sweeper_claims_after_the_grace_period_and_leases(db_url: str) -> None:
    first, second = store_incident(db_url), store_incident(db_url)
    with session_scope(db_url) as session:
        notices.owe(session, first)
        notices.owe(session, second)
    with session_scope(db_url) as session:
        assert notices.claim_owed(session, timedelta(minutes=1)) == []  # the enqueue may still come
    backdate_owed(db_url, second, timedelta(minutes=3))
    backdate_owed(db_url, first, timedelta(minutes=2))
    with session_scope(db_url) as session:
        assert notices.claim_owed(session, timedelta(minutes=1)) == [second, first]  # oldest first
    with session_scope(db_url) as session:
        assert notices.claim_owed(session, timedelta(minutes=1)) == []  # leased: re-queued just now
    assert slack_owed(db_url, first)[0] == 1  # a lease is not a notice: the count is unchanged
    with session_scope(db_url) as session:
        assert sorted(notices.claim_owed(session, timedelta(0))) == [first, second]  # the lease ran out


def test_defer_keeps_the_sweeper_off_a_delivery_that_retries_on_its_own(db_url: str) -> None:
    incident_id = store_incident(db_url)
    with session_scope(db_url) as session:
        notices.owe(session, incident_id)
        notices.defer(session, incident_id, datetime.now(UTC) + timedelta(minutes=5))
    with session_scope(db_url) as session:
        assert notices.claim_owed(session, timedelta(0)) == []
    other = store_incident(db_url)
    with session_scope(db_url) as session:
        notices.defer(session, other, datetime.now(UTC))  # nothing owed: nothing to defer
    assert slack_owed(db_url, other) == (0, None)


def test_the_sweeper_skips_an_incident_another_transaction_holds(pg_db: str) -> None:
    """Intake or an investigation's commit holds the incident's row: the sweep does not wait for
    it, the next sweep takes the notice."""
    incident_id = store_incident(pg_db)
    with session_scope(pg_db) as session:
        notices.owe(session, incident_id)
    backdate_owed(pg_db, incident_id, timedelta(minutes=2))
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with session_scope(pg_db) as session:
            session.get(IncidentRow, incident_id, with_for_update=True)
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        with session_scope(pg_db) as session:
            assert notices.claim_owed(session, timedelta(minutes=1)) == []
    finally:
        release.set()
        holder.join(10)
    with session_scope(pg_db) as session:
        assert notices.claim_owed(session, timedelta(minutes=1)) == [incident_id]
