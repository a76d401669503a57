"""The scan on a real Prometheus and PostgreSQL: a fault develops over 20 minutes on one of three
hosts (a growing surge: the queue builds, TTFT follows); the scan, replayed every 30 s of that
history, warns for that host only, before its TTFT breaks the SLO, and stores the warning as an
early-warning incident with a queued investigation, which the pipeline runs like any other. The
healthy neighbour and a host whose cores are always busy beyond the 82 % threshold never leave
`ok`. The SLA alert that comes later joins the warning's incident through the webhook."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from rca.api.app import create_app
from rca.jobs.runner import run_investigation
from rca.notify.message import from_incident
from rca.scan.backtest import backtest
from rca.scan.scanner import (
    BASELINE_MOVE_SECONDS,
    BASELINE_SECONDS,
    BASELINE_STEP_SECONDS,
    Scanner,
    prometheus_fleet_source,
)
from rca.scan.service import EarlyWarnings
from rca.scan.states import ScanState
from rca.store.db import session_scope
from rca.store.incidents import IncidentFilter, search
from rca.store.models import HypothesisRow, IncidentRow, InvestigationRow, ScanTargetRow, ScanTransitionRow
from tests.e2e import promstack
from tests.e2e.scenarios import Exporter, Fleet, Host
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.processes import subprocess_env
from tests.helpers.service import RecordingDispatcher, make_settings

RAMP = 20 * 60
DEPLOY_SLO = "rule LLMTTFTSLOBreach (group llm-rca-early-degradation, rules.yml)"


@pytest.fixture(scope="module")
def fleet_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, float, float]]:
    """Prometheus holding 2 h of three hosts; the fault starts 24 minutes before `now`."""
    assert promstack.PROMETHEUS and promstack.PROMTOOL, "apt-get install -y prometheus"
    workdir = tmp_path_factory.mktemp("scan")
    now = time.time()
    onset = now - 24 * 60
    fleet = Fleet(
        [
            Host("gpu-a", "arrival_surge", onset, ramp=RAMP),
            Host("gpu-b", None, onset),
            Host("gpu-busy", None, onset, normal=(("pinned_busy", 0.88),)),
        ],
        start=now - 2 * 3600,
    )
    promstack.backfill(fleet, now, workdir / "tsdb", workdir)
    with Exporter(fleet, time.time) as exporter:
        proc, url = promstack.start_prometheus(workdir, exporter.port, None)
        try:
            yield url, onset, now
        finally:
            proc.stop()


def test_the_scan_warns_for_the_degrading_host_only_before_its_slo_breaks(
    fleet_prometheus: tuple[str, float, float], pg_db: str, tmp_path: Path
) -> None:
    url, onset, now = fleet_prometheus
    settings = make_settings(pg_db, tmp_path, prometheus_url=url, scan_interval_seconds=30)
    warnings = EarlyWarnings.from_settings(settings)
    enqueued: list[int] = []
    first_warning: float | None = None
    ttft_breached: float | None = None
    at = onset - 120
    while at < now - 60:
        report, actions = warnings.tick(datetime.fromtimestamp(at, UTC))
        assert {t.instance for t in report.targets} == {"gpu-a:8000", "gpu-b:8000", "gpu-busy:8000"}
        # A bounded cost: discovery, the identity series, the start times, Prometheus' rules (at the
        # first scan, then every 10 minutes), and per signal a range query for each window's new
        # steps and at most one for each window's missing history.
        scanner = warnings.scanner
        assert report.queries <= 3 + len(scanner.profile.identities) + 4 * len(scanner.queries)
        enqueued += actions.investigations
        states = warnings.memories or {}
        if first_warning is None and states["gpu-a:8000"].state == ScanState.WARNING:
            first_warning = at
        ttft = next(s for s in report.assessments["gpu-a:8000"].signals if s.limit.signal == "ttft_p95")
        if ttft_breached is None and ttft.breached:
            ttft_breached = at
        at += 30

    assert first_warning is not None, "no warning for the degrading host"
    assert ttft_breached is None or first_warning <= ttft_breached + 60
    with session_scope(pg_db) as session:
        rows = {row.instance: row for row in session.scalars(select(ScanTargetRow))}
        # Every target is listed with the SLO it is judged against (the deploy's own rule, 2 s);
        # the others never left ok: no transition stored for them.
        assert {i: (r.state, r.slo_ttft_seconds, r.slo_source) for i, r in rows.items()} == {
            "gpu-a:8000": (ScanState.WARNING, 2.0, DEPLOY_SLO),
            "gpu-b:8000": (ScanState.OK, 2.0, DEPLOY_SLO),
            "gpu-busy:8000": (ScanState.OK, 2.0, DEPLOY_SLO),
        }
        transitions = list(session.scalars(select(ScanTransitionRow).order_by(ScanTransitionRow.id)))
        assert {t.instance for t in transitions} == {"gpu-a:8000"}
        assert [(t.before, t.after) for t in transitions] == [("ok", "watch"), ("watch", "warning")]
        assert all(t.reason and t.figures["signals"] for t in transitions)
        incident = session.get(IncidentRow, rows["gpu-a:8000"].incident_id)
        assert incident is not None and incident.origin == "early_warning" and incident.status == "firing"
        assert incident.common_labels["instance"] == "gpu-a:8000"
        # The summary says whether it led the breach or came with it, never claims a lead it lacks.
        led = ttft_breached is None or first_warning < ttft_breached
        headline = "Early warning, before the TTFT SLO breaks: " if led else "TTFT SLO breached, "
        assert incident.common_annotations["summary"].startswith(headline), incident.common_annotations["summary"]
        assert incident.common_annotations["summary"].endswith(f"TTFT SLO 2 s from {DEPLOY_SLO}")
        # The warning's alert starts when the scan warned (as Prometheus dates an alert from when it
        # fired); when the signals started moving, earlier, is in the warning's figures.
        assert incident.alerts[0].starts_at.timestamp() == pytest.approx(first_warning)
        signals = transitions[-1].figures["signals"]
        assert min(s["moving_since"] for s in signals if s["departed"] and s["moving_since"]) < first_warning
        queued = list(session.scalars(select(InvestigationRow.id).where(InvestigationRow.incident_id == incident.id)))
        assert queued == enqueued and len(queued) == 1
        hits, _, _ = search(session, filters=IncidentFilter(origin="early_warning"), sort="time", limit=10)
        assert [hit.incident_id for hit in hits] == [incident.id]
        assert search(session, filters=IncidentFilter(origin="alertmanager"), sort="time", limit=10)[0] == []

    # The pipeline investigates the warning like an alert, and ranks the surge first.
    assert run_investigation(settings, enqueued[0]) == "done"
    with session_scope(pg_db) as session:
        top = session.scalar(
            select(HypothesisRow).where(HypothesisRow.investigation_id == enqueued[0], HypothesisRow.rank == 1)
        )
        assert top is not None and top.category == "arrival_surge"

    # The SLA alert fires later for the same instance: it joins the warning's incident; its
    # resolve leaves the incident open while the warning still stands.
    with session_scope(pg_db) as session:
        warned_at = session.scalars(select(IncidentRow.created_at)).one()
    sla = make_alert(
        "fp-sla-a", alertname="LLMTTFTSLOBreach", instance="gpu-a:8000", starts_at=warned_at + timedelta(minutes=9)
    )
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher())) as client:
        joined = post_webhook(client, make_payload('{}:{alertname="LLMTTFTSLOBreach"}', alerts=[sla]))
        assert joined.status_code == 200, joined.text
        resolved = make_payload('{}:{alertname="LLMTTFTSLOBreach"}', alerts=[{**sla, "status": "resolved"}])
        assert post_webhook(client, resolved).status_code == 200
    with session_scope(pg_db) as session:
        assert session.scalar(select(func.count()).select_from(IncidentRow)) == 1
        incident = session.scalars(select(IncidentRow)).one()
        assert {a.alertname for a in incident.alerts} == {"EarlyWarning", "LLMTTFTSLOBreach"}
        assert incident.status == "firing" and incident.origin == "early_warning"
        # Slack says it is an early warning, what moved since when, and how far ahead of the SLA alert.
        summary = from_incident(incident, incident.investigations[0], None).summary or ""
        assert summary.startswith(headline) and "moving since" in summary
        assert "SLA alert LLMTTFTSLOBreach fired 9 min after the early warning" in summary


def test_the_backtest_finds_the_warning_ahead_of_the_breach_and_no_false_one(
    fleet_prometheus: tuple[str, float, float], tmp_path: Path
) -> None:
    url, onset, now = fleet_prometheus
    settings = make_settings("sqlite://", tmp_path, prometheus_url=url, scan_interval_seconds=30)
    start, end = (datetime.fromtimestamp(t, UTC) for t in (onset - 120, now - 60))
    result = backtest(settings, prometheus_fleet_source(settings), start, end)
    assert result.targets == 3 and result.scans == int((end - start).total_seconds() // 30) + 1
    assert [w.instance for w in result.warnings] == ["gpu-a:8000"] and result.false_warnings == []
    assert [b.instance for b in result.breaches] == ["gpu-a:8000"] and result.missed == []
    lead = result.breaches[0].lead_seconds
    assert lead is not None and lead >= 0  # the warning did not wait for TTFT to break its SLO
    one = backtest(settings, prometheus_fleet_source(settings), start, end, only="gpu-b:8000")
    assert one.targets == 1 and one.warnings == [] and one.breaches == []


def test_the_backtest_stores_its_warning_once_as_a_backtest_incident(
    fleet_prometheus: tuple[str, float, float], pg_db: str, tmp_path: Path
) -> None:
    """`rca backtest --store`, as an operator runs it, twice over the same history."""
    url, onset, _ = fleet_prometheus
    since = f"{math.ceil((time.time() - onset) / 60) + 5}m"  # from 5 minutes before the fault
    env = subprocess_env(
        database_url=pg_db, prometheus_url=url, scan_interval_seconds="30", data_dir=str(tmp_path / "rca-data")
    )
    runs = [
        subprocess.run(
            [sys.executable, "-m", "rca.cli", "backtest", "--since", since, "--store", *extra],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        for extra in (["--json"], [])
    ]
    assert [run.returncode for run in runs] == [0, 0], [run.stderr for run in runs]
    first = json.loads(runs[0].stdout)
    assert [w["instance"] for w in first["warnings"]] == ["gpu-a:8000"] and first["warnings"][0]["end"] is None
    assert (first["stored"], first["already_stored"]) == (1, 0)
    # The yardstick is the raw breach: its lead's p50 over the one breach is that breach's lead.
    [breach] = first["breaches"]
    assert first["lead_p50_seconds"] == breach["lead_seconds"] and first["missed"] == 0
    assert first["warned_before"] == (1 if breach["lead_seconds"] > 0 else 0)
    assert any(line.startswith("breaches (TTFT p95 first beyond its SLO) 1: ") for line in runs[1].stdout.splitlines())
    # The second run starts on the same scan grid: it finds the same warning, already stored.
    assert runs[1].stdout.splitlines()[-1] == (
        "stored 0 warning(s) as incidents of origin backtest (1 already stored); never posted to Slack"
    )
    with session_scope(pg_db) as session:
        incident = session.scalars(select(IncidentRow)).one()
        warned = datetime.fromtimestamp(first["warnings"][0]["start"], UTC)
        assert incident.origin == "backtest" and incident.status == "resolved"
        assert incident.group_key == f"backtest/gpu-a:8000/{warned:%Y-%m-%dT%H:%M:%SZ}"
        assert incident.resolved_at == datetime.fromisoformat(first["end"])  # still warning at the end
        assert "still warning when the backtest ended" in incident.common_annotations["summary"]
        moves = session.scalars(select(ScanTransitionRow).order_by(ScanTransitionRow.id)).all()
        assert [(t.before, t.after, t.incident_id) for t in moves] == [
            ("ok", "watch", incident.id),
            ("watch", "warning", incident.id),
        ]
        assert session.scalars(select(ScanTargetRow)).all() == [], "the live scan's state is not written"
        assert session.scalars(select(InvestigationRow)).all() == [], "nothing investigated"


def test_scans_after_the_first_read_only_the_new_steps_and_see_what_a_whole_read_sees(
    fleet_prometheus: tuple[str, float, float], tmp_path: Path
) -> None:
    url, onset, _ = fleet_prometheus
    settings = make_settings("sqlite://", tmp_path, prometheus_url=url, scan_interval_seconds=30)
    spans: list[tuple[float, int]] = []  # each range read's length and step
    source = prometheus_fleet_source(settings)
    ranged = source.range_query
    source.range_query = lambda promql, start, end, step: (
        spans.append(((end - start).total_seconds(), step)) or ranged(promql, start, end, step)
    )
    scanner = Scanner(settings, source)
    at = onset + 5 * 60
    scanner.scan(datetime.fromtimestamp(at, UTC))
    # The first scan reads the whole hour, and the hour around this time yesterday at a minute.
    assert set(spans) == {(settings.scan_history_minutes * 60, 30), (BASELINE_SECONDS, BASELINE_STEP_SECONDS)}
    for _ in range(12):  # six minutes of scans, through the ramp
        at += 30
        spans.clear()
        incremental = scanner.scan(datetime.fromtimestamp(at, UTC))
        # The step since the last scan and two before it, read again; yesterday's next minutes.
        assert {length for length, step in spans if step == 30} == {3 * 30}
        assert {length for length, step in spans if step != 30} <= {BASELINE_MOVE_SECONDS - BASELINE_STEP_SECONDS}
    fresh = Scanner(settings, prometheus_fleet_source(settings)).scan(datetime.fromtimestamp(at, UTC))
    for instance, assessment in fresh.assessments.items():
        kept = incremental.assessments[instance]
        assert [s.figures() for s in kept.signals] == [s.figures() for s in assessment.signals], instance
        assert kept.slo == assessment.slo
