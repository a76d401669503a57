"""A fleet incident on a real Prometheus: one alert group naming two faulty hosts with different
causes (and a healthy one beside them, unnamed) gets an investigation per host, each ranking its
own host's cause first, and the fleet view names both causes with no fleet-wide claim. Before
fleet incidents the group was diagnosed as one target, its most common host."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from rca.intake.schema import WebhookPayload
from rca.intake.service import fleet_of, record_notification
from rca.jobs.runner import run_investigation
from rca.store.db import session_scope
from rca.store.models import InvestigationRow
from rca.store.rounds import latest_round
from tests.e2e import promstack
from tests.e2e.scenarios import MODEL, Fleet, Host
from tests.helpers.payloads import make_alert, make_payload
from tests.helpers.service import make_settings

pytestmark = pytest.mark.e2e
CAUSES = {"f01": "arrival_surge", "f02": "kv_memory_pressure"}


def test_two_hosts_of_one_group_with_different_causes_each_get_their_own_cause_first(
    pg_db: str, tmp_path: Path
) -> None:
    now = time.time()
    onset = now - 25 * 60
    hosts = [Host(name, cause, onset) for name, cause in CAUSES.items()] + [Host("f03", None, onset)]
    alerts = [make_alert(f"fp-{name}", instance=f"{name}:8000", model_name=MODEL) for name in CAUSES]
    # f01 alerts twice (queue and TTFT): as one target, the group was f01's alone
    alerts.append(make_alert("fp-f01-ttft", alertname="LLMTimeToFirstTokenHigh", instance="f01:8000", model_name=MODEL))
    payload = make_payload(alerts=alerts)
    with promstack.fleet_prometheus(Fleet(hosts, start=now - 3 * 3600 - 15 * 60), now, tmp_path, settle=6) as url:
        settings = make_settings(pg_db, tmp_path, prometheus_url=url)
        with session_scope(pg_db) as session:
            stored = record_notification(
                session, WebhookPayload.model_validate(payload), payload, fleet=fleet_of(settings)
            )
        assert len(stored.investigation_ids) == 2
        for investigation_id in stored.investigation_ids:  # as the worker pool runs each
            assert run_investigation(settings, investigation_id) == "done"

    with session_scope(pg_db) as session:
        rows = session.scalars(
            select(InvestigationRow)
            .where(InvestigationRow.incident_id == stored.incident_id)
            .order_by(InvestigationRow.id)
            .options(selectinload(InvestigationRow.hypotheses))
        ).all()
        tops = {row.host: row.hypotheses[0].category for row in rows}
        targets = {row.host: (row.target or {}).get("host") for row in rows}
        fleet = latest_round(rows)
    assert tops == CAUSES
    assert targets == {"f01": "f01", "f02": "f02"}
    assert fleet is not None and fleet.summary.fleet_wide is None
    assert sorted(group.category for group in fleet.summary.causes) == sorted(CAUSES.values())
