"""Warnings in the database: one incident per target, resolved when cleared, reopened when the
target warns again, and kept open while an SLA alert that joined it still fires."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from rca.api.app import create_app
from rca.scan.fleet import ServingInstance
from rca.scan.forecast import Limit, SignalForecast
from rca.scan.states import Assessment, Policy, ScanState, TargetMemory, Transition
from rca.scan.warnings import Actions, load_memories, record
from rca.store.db import session_scope
from rca.store.models import AlertRow, IncidentRow, InvestigationRow, ScanTransitionRow
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import RecordingDispatcher, make_settings

TARGET = ServingInstance("gpu-a:8000", "gpu-a", "gpu-a", "vllm", "vllm_v1")
QUEUE = Limit("queue_median", "Median waiting requests", "requests", ">", 4.7)
POLICY = Policy()
ASSESSMENT = Assessment(
    at=1_800_000_000.0,
    signals=[SignalForecast(QUEUE, "test", 6.2, 1.1, 0.4, None, True, True, 1_799_999_500.0)],
)


def step(url: str, memory: TargetMemory, before: ScanState, after: ScanState) -> tuple[TargetMemory, Actions]:
    actions = Actions()
    transition = Transition(before, after, ASSESSMENT.at, f"{before} to {after}", {"signals": []})
    with session_scope(url) as session:
        memory = record(session, TARGET, transition, memory, ASSESSMENT, POLICY, owe_slack=False, actions=actions)
    return memory, actions


def test_a_target_keeps_one_incident_through_clearing_and_warning_again(pg_db: str) -> None:
    memory, opened = step(pg_db, TargetMemory(), ScanState.WATCH, ScanState.WARNING)
    assert memory.incident_id is not None and len(opened.investigations) == 1
    with session_scope(pg_db) as session:
        incident = session.get(IncidentRow, memory.incident_id)
        assert incident is not None and incident.origin == "early_warning" and incident.status == "firing"
        assert "Median waiting requests 6.2" in incident.common_annotations["summary"]

    memory, cleared = step(pg_db, memory, ScanState.WARNING, ScanState.CLEARED)
    assert cleared.resolved == [memory.incident_id]
    memory, again = step(pg_db, memory, ScanState.CLEARED, ScanState.WARNING)
    assert len(again.investigations) == 1
    with session_scope(pg_db) as session:
        assert session.scalar(select(func.count()).select_from(IncidentRow)) == 1
        incident = session.get(IncidentRow, memory.incident_id)
        assert incident is not None and incident.status == "firing" and incident.resolved_at is None
        assert session.scalar(select(func.count()).select_from(InvestigationRow)) == 2
        assert session.scalar(select(func.count()).select_from(ScanTransitionRow)) == 3
        assert load_memories(session)["gpu-a:8000"].state == ScanState.WARNING


def test_clearing_leaves_the_incident_open_while_a_joined_sla_alert_fires(pg_db: str) -> None:
    memory, _ = step(pg_db, TargetMemory(), ScanState.OK, ScanState.WARNING)
    with session_scope(pg_db) as session:
        sla = AlertRow(
            incident_id=memory.incident_id,
            fingerprint="fp-sla",
            alertname="LLMTTFTSLOBreach",
            status="firing",
            labels={"instance": "gpu-a:8000"},
            annotations={},
            starts_at=datetime.now(UTC),
            raw={},
        )
        session.add(sla)
    memory, cleared = step(pg_db, memory, ScanState.WARNING, ScanState.CLEARED)
    assert cleared.resolved == []
    with session_scope(pg_db) as session:
        incident = session.get(IncidentRow, memory.incident_id)
        assert incident is not None and incident.status == "firing"
        own = session.scalars(select(AlertRow).where(AlertRow.alertname == "EarlyWarning")).one()
        assert own.status == "resolved"


def test_an_sla_alert_naming_the_host_by_a_configured_label_joins_the_warning(pg_db: str, tmp_path: Path) -> None:
    """The operator's `target.host_labels` decide which label names the host, at intake as everywhere:
    an alert whose `instance` is the SLO exporter's own address but whose `kubernetes_node` is the warned
    host joins."""
    memory, _ = step(pg_db, TargetMemory(), ScanState.OK, ScanState.WARNING)
    config = tmp_path / "rca.yaml"
    config.write_text("target:\n  host_labels: [kubernetes_node, instance]\n")
    settings = make_settings(pg_db, tmp_path, config_file=config)
    sla = make_alert("fp-sla-node", alertname="LLMTTFTSLOBreach", instance="slo-exporter:9090", kubernetes_node="gpu-a")
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher())) as client:
        answer = post_webhook(client, make_payload('{}:{alertname="LLMTTFTSLOBreach"}', alerts=[sla]))
    assert answer.status_code == 200, answer.text
    assert answer.json()["incident_id"] == memory.incident_id
    unconfigured = make_settings(pg_db, tmp_path)  # not a host label by default: a new incident
    other = make_alert(
        "fp-sla-other", alertname="LLMTTFTSLOBreach", instance="slo-exporter:9090", kubernetes_node="gpu-a"
    )
    with TestClient(create_app(unconfigured, dispatcher=RecordingDispatcher())) as client:
        answer = post_webhook(client, make_payload('{}:{alertname="LLMTTFTSLOBreach2"}', alerts=[other]))
    assert answer.status_code == 200 and answer.json()["incident_id"] != memory.incident_id
