"""The write path of an investigation (`rca.store.investigations.save_result`) on PostgreSQL and
SQLite: text no backend can store (NUL, lone surrogates), wherever it sits in a result, is cleaned
on the way in instead of failing the write."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from rca.domain.analyst import AnalystRecord
from rca.domain.result import InvestigationResult
from rca.domain.status import InconclusiveReason
from rca.store import investigations
from rca.store.db import session_scope
from rca.store.models import InvestigationRow
from tests.helpers import factories
from tests.helpers.slack import queued_investigation

DIRTY = "a\x00b\ud800c"  # NUL (Postgres text and JSONB refuse it) and a lone surrogate (no encoder takes it)
CLEAN = "ab\ufffdc"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def dirty_result() -> InvestigationResult:
    finding = factories.finding(
        "queue_median",
        title=f"queue {DIRTY}",
        onset=NOW,
        query=f'vllm:num_requests_waiting{{pod="{DIRTY}"}}',
        source=DIRTY,
        series_labels={f"label{DIRTY}": DIRTY},
        detail=DIRTY,
    )
    hypothesis = factories.hypothesis(
        1, "arrival_surge", title=DIRTY, evidence=["queue_median"], next_steps=[DIRTY], explanation=DIRTY, analyst="llm"
    )
    record = AnalystRecord(
        analyst="llm",
        model="m",
        fallback_reason=DIRTY,
        disagreement={"note": DIRTY},
        trimmed=[DIRTY],
        dropped=[{"reason": DIRTY}],
        exchange=[{"messages": [{"role": "assistant", "content": DIRTY}], "raw_response": DIRTY}],
    )
    return InvestigationResult(
        findings=[finding],
        hypotheses=[hypothesis],
        analyst=record,
        window_start=NOW - timedelta(hours=3),
        window_end=NOW,
        step_seconds=15,
        target={"host": DIRTY, "labels": {DIRTY: DIRTY}},
        error=DIRTY,
        collect_seconds=0.1,
        total_seconds=0.2,
        change_key="k",
    )


def test_text_no_backend_can_store_is_cleaned_wherever_it_sits_in_a_result(db_url: str) -> None:
    inv_id = queued_investigation(db_url)
    with session_scope(db_url) as session:
        investigations.save_result(session, inv_id, dirty_result())
    with session_scope(db_url) as session:
        inv = session.get(InvestigationRow, inv_id)
        assert inv is not None and inv.status == "done"
        [f], [h] = inv.findings, inv.hypotheses
        assert (f.title, f.source, f.detail, f.series_labels) == (
            f"queue {CLEAN}",
            CLEAN,
            CLEAN,
            {f"label{CLEAN}": CLEAN},
        )
        assert f.query == f'vllm:num_requests_waiting{{pod="{CLEAN}"}}'
        assert (h.title, h.explanation, h.next_steps) == (CLEAN, CLEAN, [CLEAN])
        assert (inv.fallback_reason, inv.disagreement, inv.prompt_trimmed) == (CLEAN, {"note": CLEAN}, [CLEAN])
        assert inv.llm_dropped == [{"reason": CLEAN}]
        assert inv.llm_exchange == [{"messages": [{"role": "assistant", "content": CLEAN}], "raw_response": CLEAN}]
        assert (inv.target, inv.error) == ({"host": CLEAN, "labels": {CLEAN: CLEAN}}, CLEAN)
        # A lookup by a dirty value compares the cleaned one, as it was stored.
        assert session.scalar(select(InvestigationRow.id).where(InvestigationRow.error == DIRTY)) == inv_id


def test_a_running_investigation_is_swept_once_its_lease_lapses_not_before(db_url: str) -> None:
    """The claim carries a lease that the running worker renews (rca/jobs/runner.py); the sweep
    leaves a running investigation alone while its lease holds, and re-queues it once it lapsed."""
    investigation_id = queued_investigation(db_url)
    with session_scope(db_url) as session:
        assert investigations.claim(session, investigation_id, lease=timedelta(seconds=30)) is not None
    with session_scope(db_url) as session:
        assert investigations.stranded(session, timedelta(seconds=60)).requeued == []  # leased: its worker is alive
        assert investigations.renew_lease(session, investigation_id, timedelta(seconds=-1)) is True  # lapsed
    with session_scope(db_url) as session:
        assert investigations.stranded(session, timedelta(seconds=60)).requeued == [investigation_id]
    with session_scope(db_url) as session:
        inv = session.get(InvestigationRow, investigation_id)
        assert inv is not None and (inv.status, inv.lease_until) == ("queued", None)
        assert investigations.renew_lease(session, investigation_id, timedelta(seconds=30)) is False  # not running


def test_a_claim_from_before_leases_is_swept_by_its_age(db_url: str) -> None:
    investigation_id = queued_investigation(db_url)
    with session_scope(db_url) as session:
        assert investigations.claim(session, investigation_id) is not None
    with session_scope(db_url) as session:
        assert investigations.stranded(session, timedelta(seconds=60)).requeued == []
        inv = session.get(InvestigationRow, investigation_id)
        assert inv is not None and inv.lease_until is None
        inv.started_at = datetime.now(UTC) - timedelta(minutes=6)
    with session_scope(db_url) as session:
        assert investigations.stranded(session, timedelta(seconds=60)).requeued == [investigation_id]


def test_an_inconclusive_result_is_finished_with_its_reason_and_stores_no_cause(db_url: str) -> None:
    """Whatever hypotheses a blind result carries, none is stored, and nobody is named as their
    author; it is finished: a redelivered message claims nothing, and a late failure changes nothing."""
    inv_id = queued_investigation(db_url)
    blind = replace(dirty_result(), inconclusive=InconclusiveReason.NO_DATA)  # with an LLM's record, even
    with session_scope(db_url) as session:
        assert investigations.claim(session, inv_id) is not None
        investigations.save_result(session, inv_id, blind)
    with session_scope(db_url) as session:
        inv = session.get(InvestigationRow, inv_id)
        assert inv is not None and (inv.status, inv.inconclusive_reason) == ("inconclusive", "no_data")
        assert inv.hypotheses == [] and inv.analyst is None and len(inv.findings) == 1
        assert investigations.claim(session, inv_id) is None
        assert investigations.mark_failed(session, inv_id, "late") is None
