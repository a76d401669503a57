"""A fleet incident on a real Prometheus: one alert group naming two faulty hosts with different
causes (and a healthy one beside them, unnamed) gets an investigation per host, each ranking its
own host's cause first, and the fleet view names both causes with no fleet-wide claim. Before
fleet incidents the group was diagnosed as one target, its most common host. With
kube-state-metrics beside the engines, the round's first investigation judges the common factor:
the image only the affected pods run (rolled out shortly before onset) is named with its counts,
in a handful of queries, as is an engine flag the affected engines were restarted with on hosts
without Kubernetes; a fleet whose affected hosts share nothing the healthy lack gets "no common
factor"."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from rca.collect.peers import PEER_QUERIES
from rca.collect.profile import load_profile
from rca.collect.prometheus import PrometheusSource
from rca.domain.factor import Verdict
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
OLD, NEW = "vllm/vllm-openai:v0.11.0", "vllm/vllm-openai:v0.12.1"
POOL = (("cloud_google_com_gke_nodepool", "h100-pool"), ("nvidia_com_gpu_product", "NVIDIA-H100-80GB-HBM3"))


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

    rows = _investigations(pg_db, stored.incident_id)
    tops = {row.host: row.hypotheses[0].category for row in rows}
    targets = {row.host: (row.target or {}).get("host") for row in rows}
    fleet = latest_round(rows)
    assert tops == CAUSES
    assert targets == {"f01": "f01", "f02": "f02"}
    assert fleet is not None and fleet.summary.fleet_wide is None
    assert sorted(group.category for group in fleet.summary.causes) == sorted(CAUSES.values())


def _kube_host(name: str, faulty: bool, image: str, started: float, onset: float) -> Host:
    return Host(
        name,
        "cpu_launch_overhead" if faulty else None,
        onset,
        pod=f"vllm-{name}",
        image=image,
        node_labels=POOL,
        started=started,
    )


def _first_round(pg_db: str, tmp_path: Path, fleet: Fleet, affected: list[str], onset: float, run: int) -> list:
    """The fleet's alert group (one alert per affected host, fired at onset) stored, its first
    `run` investigations run on the fleet's real Prometheus; the round as the API reads it, and
    the queries that reading the fleet's facts takes."""
    fired = datetime.fromtimestamp(onset, UTC)
    alerts = [make_alert(f"fp-{name}", instance=f"{name}:8000", model_name=MODEL, starts_at=fired) for name in affected]
    payload = make_payload(alerts=alerts)
    with promstack.fleet_prometheus(fleet, time.time(), tmp_path, settle=6) as url:
        settings = make_settings(pg_db, tmp_path, prometheus_url=url)
        with session_scope(pg_db) as session:
            stored = record_notification(
                session, WebhookPayload.model_validate(payload), payload, fleet=fleet_of(settings)
            )
        for investigation_id in stored.investigation_ids[:run]:
            run_investigation(settings, investigation_id)
        source = CountingSource(url, 10, 2)
        facts = source.fleet_facts(load_profile().scopes["serving"].probe, affected, datetime.now(UTC))
    return [latest_round(_investigations(pg_db, stored.incident_id)), source.asked, facts]


class CountingSource(PrometheusSource):
    """The real source, keeping the queries it asks."""

    def __init__(self, url: str, timeout: float, concurrency: int) -> None:
        super().__init__(url, timeout, concurrency)
        self.asked: list[str] = []

    def _instant(self, promql: str, at: datetime) -> list[dict[str, Any]]:
        self.asked.append(promql)
        return super()._instant(promql, at)


def _investigations(pg_db: str, incident_id: int) -> list[InvestigationRow]:
    """The incident's investigations, oldest first, with their hypotheses."""
    with session_scope(pg_db) as session:
        return list(
            session.scalars(
                select(InvestigationRow)
                .where(InvestigationRow.incident_id == incident_id)
                .order_by(InvestigationRow.id)
                .options(selectinload(InvestigationRow.hypotheses))
            ).all()
        )


def test_the_image_only_the_affected_pods_run_is_named_with_its_counts_and_the_rollout(
    pg_db: str, tmp_path: Path
) -> None:
    now = time.time()
    onset = now - 25 * 60
    affected = ["f01", "f02", "f03"]
    hosts = [_kube_host(name, True, NEW, onset - 40 * 60, onset) for name in affected] + [
        _kube_host(name, False, OLD, now - 3 * 86400, onset) for name in ("f04", "f05", "f06")
    ]
    fleet_round, asked, facts = _first_round(pg_db, tmp_path, Fleet(hosts, start=now - 75 * 60), affected, onset, 3)

    assert fleet_round is not None
    factor = fleet_round.summary.common_factor
    assert factor is not None and factor.verdict == Verdict.FOUND
    assert (factor.attribute, factor.value) == ("image", NEW)
    assert (factor.affected, factor.affected_of, factor.healthy, factor.healthy_of) == (3, 3, 0, 3)
    assert factor.rollout_minutes == 40
    line = f"Common factor: image {NEW}: 3 of 3 affected, 0 of 3 healthy; rolled out 40 min before onset: roll back"
    assert fleet_round.summary.lines()[-1] == line
    # A handful of fleet-wide queries, not one per host; the node pool (every host's) is measured
    # but separates nothing.
    assert len(asked) <= PEER_QUERIES, asked
    assert {f.host: f.affected for f in facts} == {name: name in affected for name in [*affected, "f04", "f05", "f06"]}
    assert all(f.attributes["node_label:cloud_google_com_gke_nodepool"] == {"h100-pool"} for f in facts)


def test_affected_hosts_that_share_nothing_the_healthy_lack_get_no_common_factor(pg_db: str, tmp_path: Path) -> None:
    now = time.time()
    onset = now - 25 * 60
    long_ago = now - 3 * 86400
    hosts = [
        _kube_host("f01", True, NEW, long_ago, onset),
        _kube_host("f02", True, OLD, long_ago, onset),
        _kube_host("f03", False, OLD, long_ago, onset),
        _kube_host("f04", False, NEW, long_ago, onset),
    ]
    fleet_round, _, _ = _first_round(pg_db, tmp_path, Fleet(hosts, start=now - 75 * 60), ["f01", "f02"], onset, 1)

    assert fleet_round is not None
    factor = fleet_round.summary.common_factor
    assert factor is not None and factor.verdict == Verdict.NONE
    assert factor.line() == "No common factor among the 2 affected hosts and their 2 healthy peers"


def test_a_flag_the_affected_engines_were_restarted_with_is_named_without_kubernetes(
    pg_db: str, tmp_path: Path
) -> None:
    now = time.time()
    onset = now - 25 * 60

    def engine(name: str, faulty: bool) -> Host:
        caching = "False" if faulty else "True"
        return Host(
            name,
            "prefix_cache_miss" if faulty else None,
            onset,
            started=onset - 30 * 60 if faulty else now - 3 * 86400,
            engine_flags=(("block_size", "16"), ("enable_prefix_caching", caching)),
        )

    hosts = [engine("f01", True), engine("f02", True), engine("f03", False), engine("f04", False)]
    fleet_round, asked, _ = _first_round(pg_db, tmp_path, Fleet(hosts, start=now - 75 * 60), ["f01", "f02"], onset, 1)

    assert fleet_round is not None and fleet_round.summary.common_factor is not None
    assert fleet_round.summary.common_factor.line() == (
        "Common factor: engine flag enable_prefix_caching=False: 2 of 2 affected, 0 of 2 healthy; "
        "rolled out 30 min before onset: roll back enable_prefix_caching=False"
    )
    assert len(asked) == 3  # no pods: the serving instances, their flags, their process starts
