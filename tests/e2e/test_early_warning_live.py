"""The early warning, live, on real parts whose alerting rules hold only a TTFT SLO alert.

Two hosts serve; on one the prefix-cache hit rate starts sliding a minute after the stack is up and
TTFT follows. Nothing but the SLO alert is configured in Prometheus, so only the service's own fleet
scan (in `rca worker`) can speak before it: it must warn for the sliding host, rank its cause, and
the SLA alert that Prometheus and Alertmanager fire later must join that incident. The healthy
neighbour is never warned about. Time is compressed (a 100 s slide, a scan every 5 s, an SLO
alert `for: 45s` on a 1.6 s SLO); the full-length lead times are bench/early_warning.py's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime

import httpx
import pytest
from sqlalchemy import select

from rca.store.db import session_scope
from rca.store.models import ScanTarget, ScanTransition
from tests.e2e import promstack
from tests.e2e.scenarios import Fleet, Host
from tests.helpers.databases import create_database, drop_database

pytestmark = pytest.mark.e2e

SLO_SECONDS = 1.6  # the prefix-miss engine's TTFT p95 (2.0 s) breaks it; the healthy one's (0.5 s) does not
SLA_ALERT = {
    "alert": "LLMTTFTSLOBreach",
    "expr": f"rca:ttft_seconds:p95_rate5m > {SLO_SECONDS}",
    "for": "45s",
    "labels": {"severity": "critical"},
    "annotations": {"summary": "TTFT p95 over its SLO on {{ $labels.instance }}"},
}
SLIDING, HEALTHY = "gpu-a:8000", "gpu-b:8000"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, e2e_broker_url: str) -> Iterator[tuple[promstack.ServiceStack, str]]:
    """The running stack and its database (its own: the scan's state must start empty)."""
    workdir = tmp_path_factory.mktemp("early-warning")
    config = workdir / "rca.yaml"
    config.write_text(f"slo_ttft_seconds: {SLO_SECONDS}\n")
    now = time.time()
    fleet = Fleet(
        [Host("gpu-a", "prefix_cache_miss", now + 20, ramp=100), Host("gpu-b", None, now + 20)],
        start=now - 40 * 60,
    )
    database = create_database()
    settings = {
        "RCA_SCAN_ENABLED": "true",
        "RCA_SCAN_INTERVAL_SECONDS": "5",
        "RCA_SCAN_HISTORY_MINUTES": "30",
        "RCA_SCAN_TREND_MINUTES": "3",
        "RCA_SCAN_CALM_SECONDS": "60",
        "RCA_CONFIG_FILE": str(config),
    }
    try:
        with promstack.service_stack(
            workdir,
            fleet,
            now,
            database,
            e2e_broker_url,
            with_alertmanager=True,
            only_alerts=[SLA_ALERT],
            settings=settings,
        ) as running:
            yield running, database
    finally:
        drop_database(database)


def wait_for(find: Callable[[], dict | None], timeout: float, what: str, stack: promstack.ServiceStack) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = find()
        if found:
            return found
        time.sleep(2)
    pytest.fail(f"no {what} within {timeout:.0f} s\n{seen(stack)}\n{stack.logs()}")


def seen(stack: promstack.ServiceStack) -> str:
    """What the service and Prometheus hold, for a failure's message."""
    ttft = httpx.get(f"{stack.prometheus}/api/v1/query", params={"query": "rca:ttft_seconds:p95_rate5m"}, timeout=10)
    alerts = httpx.get(f"{stack.prometheus}/api/v1/alerts", timeout=10)
    found = [(i["id"], i["origin"], i["title"], i["status"]) for i in incidents(stack)]
    return f"incidents: {found}\nTTFT p95: {ttft.text}\nPrometheus alerts: {alerts.text}"


def answers(incident: dict) -> str:
    """Each investigation's reason, ranking and findings, for a failure's message."""
    lines = []
    for found in incident["investigations"]:
        ranked = [(h["category"], h["confidence"]) for h in found["hypotheses"][:3]]
        findings = [(f["id"], f["status"], f["value"], f["baseline"]) for f in found["findings"]]
        window = (found["window_start"], found["window_end"])
        lines.append(f"{found['reason']} {found['status']} {window} {found['target']}: {ranked}\n  {findings}")
    return "\n".join(lines)


def incidents(stack: promstack.ServiceStack, **filters: str) -> list[dict]:
    answer = stack.get("/api/v1/incidents", limit=50, **filters)
    assert answer.status_code == 200, answer.text
    return answer.json()["items"]


def test_the_scan_warns_before_the_only_alert_and_the_alert_joins_its_incident(
    live: tuple[promstack.ServiceStack, str],
) -> None:
    stack, database = live

    def warned() -> dict | None:
        return next(iter(incidents(stack, origin="early_warning")), None)

    warning = wait_for(warned, 420, "early warning", stack)

    def joined() -> dict | None:
        found = stack.get(f"/api/v1/incidents/{warning['id']}").json()
        names = {alert["alertname"] for alert in found["alerts"]}
        done = found["investigation"] and found["investigation"]["status"] == "done"
        return found if "LLMTTFTSLOBreach" in names and done else None

    incident = wait_for(joined, 300, "SLA alert joining the warning", stack)

    # The warning names the sliding host, before the SLO alert fired, and the SLA alert joined it
    # instead of opening an incident of its own.
    assert incident["origin"] == "early_warning"
    alerts = {alert["alertname"]: alert for alert in incident["alerts"]}
    assert alerts["EarlyWarning"]["labels"]["instance"] == SLIDING
    assert alerts["LLMTTFTSLOBreach"]["labels"]["instance"] == SLIDING
    warned_at = datetime.fromisoformat(incident["created_at"])
    fired_at = datetime.fromisoformat(alerts["LLMTTFTSLOBreach"]["starts_at"])
    assert warned_at < fired_at, (warned_at, fired_at)
    print(f"warned {(fired_at - warned_at).total_seconds():.0f} s before the SLA alert fired")
    assert incidents(stack, origin="alertmanager") == []
    # The investigation ranks the cause.
    top = incident["investigation"]["hypotheses"][0]
    assert top["category"] == "prefix_cache_miss", answers(incident)
    # The healthy neighbour never left `ok`; both are stored with the SLO they are judged against,
    # the config file's here.
    with session_scope(database) as session:
        rows = {row.instance: row for row in session.scalars(select(ScanTarget))}
        assert {i: (r.slo_ttft_seconds, r.slo_source) for i, r in rows.items()} == {
            SLIDING: (SLO_SECONDS, "config file"),
            HEALTHY: (SLO_SECONDS, "config file"),
        }
        assert rows[HEALTHY].state == "ok"
        assert session.scalars(select(ScanTransition).where(ScanTransition.instance == HEALTHY)).all() == []
