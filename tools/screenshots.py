"""Regenerate the screenshots of docs/pages.md: docs/incident-list.png and docs/incident-page.png.

A throwaway Postgres database is seeded the way the service fills one, with the demo's recorded
Prometheus window replayed at loopback (rca/collect/replay.py) and the site (`create_site`, what
`rca serve` runs) on a loopback port:

1. the demo's alert, investigated through the real pipeline, its cause confirmed by feedback (the
   "earlier" look-alike the page lists as similar);
2. two alerts on other hosts (one of them resolved since), investigated likewise;
3. the fleet scan's early warning for a third host, stored as the scan stores it
   (rca/scan/warnings.py) and investigated, which its SLA alert joins 7 minutes later;
4. the demo's alert again: the incident whose page is taken.

Headless Chromium (Debian's `chromium` and `chromium-driver`, as the page tests drive it) then
signs in and takes the list and that incident's page, in light mode and the UTC zone (with
--phone, at a phone's 390 px in dark mode as well). The database is dropped at the end.

    .venv/bin/python tools/screenshots.py [--out docs] [--phone]
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rca.jobs.runner import run_investigation  # noqa: E402
from rca.pages.site import create_site  # noqa: E402
from rca.scan.fleet import ServingInstance  # noqa: E402
from rca.scan.forecast import Limit, SignalForecast  # noqa: E402
from rca.scan.states import Assessment, Policy, ScanState, TargetMemory, Transition  # noqa: E402
from rca.scan.warnings import Actions, record  # noqa: E402
from rca.store.db import migrate, session_scope  # noqa: E402
from rca.store.models import IncidentRow  # noqa: E402
from tests.helpers.demo_incident import demo_payload, replayed_window  # noqa: E402
from tests.helpers.payloads import make_alert, make_payload  # noqa: E402
from tests.helpers.service import API_AUTH, API_TOKEN, WEBHOOK_AUTH, LiveServer, make_settings  # noqa: E402
from tests.pages.browser import chromium, emulate, full_page_screenshot, screenshot_at  # noqa: E402

ADMIN_DSN = os.environ.get("SCREENSHOTS_POSTGRES_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@contextmanager
def throwaway_database() -> Iterator[str]:
    """A new, migrated database (its SQLAlchemy URL), dropped afterwards whatever happens."""
    name = f"rca_screens_{secrets.token_hex(4)}"
    admin = psycopg.conninfo.conninfo_to_dict(ADMIN_DSN)
    user, host, port = admin.get("user", "postgres"), admin.get("host", "127.0.0.1"), admin.get("port", 5432)
    url = f"postgresql+psycopg://{user}@{host}:{port}/{name}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        migrate(url)
        yield url
    finally:
        from rca.store.db import get_engine

        get_engine(url).dispose()
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _client(base: str) -> httpx.Client:
    return httpx.Client(base_url=base, timeout=30)


def post_alert(base: str, payload: dict[str, Any]) -> int:
    reply = _client(base).post("/api/v1/alertmanager", json=payload, headers=WEBHOOK_AUTH)
    reply.raise_for_status()
    incident_id: int = reply.json()["incident_id"]
    return incident_id


def wait_done(base: str, incident_id: int, investigations: int = 1, timeout: float = 120) -> dict[str, Any]:
    """The incident once `investigations` of its investigations have finished."""
    deadline = time.monotonic() + timeout
    with _client(base) as client:
        while True:
            incident: dict[str, Any] = client.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH).json()
            finished = [i for i in incident["investigations"] if i["status"] in ("done", "inconclusive", "failed")]
            if len(finished) >= investigations:
                return incident
            if time.monotonic() > deadline:
                raise SystemExit(f"incident {incident_id}: investigations did not finish: {incident['investigations']}")
            time.sleep(0.3)


def confirm(base: str, incident_id: int, category: str, note: str) -> None:
    body = {"category": category, "note": note, "hypotheses": [{"rank": 1, "correct": True}]}
    reply = _client(base).post(f"/api/v1/incidents/{incident_id}/feedback", json=body, headers=API_AUTH)
    reply.raise_for_status()


def warn(url: str, host: str, at: float) -> int:
    """The scan's warning for `host` at `at`, with the figures it would have stored: the queue past
    its threshold, the KV cache and TTFT heading there. Returns its queued investigation's id."""
    queue = Limit("queue_median", "Median waiting requests", "requests", ">", 4.7)
    kv = Limit("kv_cache_usage", "KV cache usage", "ratio", ">", 0.95)
    ttft = Limit("ttft_p95", "TTFT p95", "seconds", ">", 2.0)
    assessment = Assessment(
        at=at,
        signals=[
            SignalForecast(queue, "prometheus", 6.4, 0.8, 0.9, None, True, True, at - 240),
            SignalForecast(kv, "prometheus", 0.91, 0.46, 0.03, 160.0, False, True, at - 300),
            SignalForecast(ttft, "prometheus", 1.4, 0.35, 0.12, 300.0, False, True, at - 180),
        ],
    )
    figures = {"signals": [s.figures() for s in assessment.signals], "slo_probability": 0.87}
    reason = "queue_median beyond threshold and own baseline for 3 scans"
    serving = ServingInstance(f"{host}:8000", host, host, "vllm", "vllm_v1")
    actions = Actions()
    with session_scope(url) as session:
        memory = record(
            session,
            serving,
            Transition(ScanState.WATCH, ScanState.WARNING, at, reason, figures),
            TargetMemory(),
            assessment,
            Policy(),
            owe_slack=False,
            actions=actions,
        )
        # `record` stamps the wall clock; the scan ran at `at`, the seed's past.
        incident = session.get(IncidentRow, memory.incident_id)
        assert incident is not None
        when = datetime.fromtimestamp(at, UTC)
        incident.created_at = incident.updated_at = when
        for alert in incident.alerts:
            alert.first_seen_at = alert.last_seen_at = when
        for investigation in incident.investigations:
            investigation.queued_at = when
    return actions.investigations[0]


def post_and_wait(base: str, payload: dict[str, Any], **wait: Any) -> int:
    incident_id = post_alert(base, payload)
    wait_done(base, incident_id, **wait)
    return incident_id


def seed(base: str, url: str, settings: Any, alert_start: float) -> int:
    """The incidents the screenshots show; returns the one whose page is taken."""
    earlier = post_and_wait(base, demo_payload(alert_start, "earlier", description="KV cache full, preemptions"))
    confirm(base, earlier, "kv_memory_pressure", "max_num_seqs too high for this model's context")
    start = datetime.fromtimestamp(alert_start, UTC)
    xid = make_alert("fp-xid", alertname="LLMGPUXidErrors", instance="gpu-node-12:8000", starts_at=start)
    post_and_wait(base, make_payload('{}:{alertname="LLMGPUXidErrors"}', alerts=[xid]))
    ttft = make_alert("fp-ttft", alertname="LLMTTFTSLOBreach", instance="gpu-node-5:8000", starts_at=start)
    post_and_wait(base, make_payload('{}:{alertname="LLMTTFTSLOBreach"}', alerts=[ttft]))
    post_alert(base, make_payload('{}:{alertname="LLMTTFTSLOBreach"}', alerts=[ttft | {"status": "resolved"}]))
    # The scan warns for gpu-node-3 ten minutes before now; its SLA alert fires 7 minutes later and joins.
    warned = alert_start - 10 * 60
    # The recording holds no series of gpu-node-3: its investigation finishes blind (inconclusive).
    status = run_investigation(settings, warn(url, "gpu-node-3", warned))
    assert status in ("done", "inconclusive"), f"the early warning's investigation: {status}"
    sla = make_alert(
        "fp-sla", alertname="LLMTTFTSLOBreach", instance="gpu-node-3:8000", starts_at=start - timedelta(minutes=3)
    )
    post_and_wait(base, make_payload('{}:{alertname="LLMTTFTSLOBreach", host="gpu-node-3"}', alerts=[sla]))
    return post_and_wait(base, demo_payload(alert_start, "now", description="Median queue above 4.7 for 5 minutes"))


def phone(driver: Any, url: str, path: Path) -> None:
    """`url` as a phone shows it: 390 px wide, dark mode; then the desktop again."""
    emulate(driver, 390, scheme="dark")
    driver.get(url)
    time.sleep(1.0)  # the charts draw at the phone's width
    screenshot_at(driver, path, 390)
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    emulate(driver, 1400, 1000, scheme="light")
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs", help="where the PNGs go")
    parser.add_argument(
        "--phone", action="store_true", help="also take both at a phone's 390 px, in dark mode (*-phone.png)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    names = ["incident-list.png", "incident-page.png"]
    with (
        tempfile.TemporaryDirectory(prefix="rca-screens-") as home,
        throwaway_database() as url,
        replayed_window() as (prometheus_url, alert_start),
    ):
        settings = make_settings(url, Path(home), prometheus_url=prometheus_url)
        with LiveServer(create_site(settings)) as server:
            incident_id = seed(server.url, url, settings, alert_start)
            driver = chromium(Path(home) / "chromium-profile")
            try:
                driver.get(f"{server.url}/signin?next=/")
                driver.find_element("name", "token").send_keys(API_TOKEN)
                driver.find_element("css selector", "#signin button").click()
                time.sleep(0.5)
                full_page_screenshot(driver, args.out / "incident-list.png")
                if args.phone:
                    phone(driver, f"{server.url}/", args.out / "incident-list-phone.png")
                    names.append("incident-list-phone.png")
                driver.get(f"{server.url}/incidents/{incident_id}")
                deadline = time.monotonic() + 20
                while not driver.find_elements("css selector", "figure.chart[data-drawn]"):
                    if time.monotonic() > deadline:
                        inv = httpx.get(f"{server.url}/api/v1/incidents/{incident_id}", headers=API_AUTH).json()
                        states = [
                            (i["id"], i["status"], i["window_end"], [f["id"] for f in i["findings"] if f["breached"]])
                            for i in inv["investigations"]
                        ]
                        raise SystemExit(f"the charts were not drawn at {driver.current_url}: {states}")
                    time.sleep(0.2)
                time.sleep(0.5)
                full_page_screenshot(driver, args.out / "incident-page.png", max_height=5000)
                if args.phone:
                    phone(driver, driver.current_url, args.out / "incident-page-phone.png")
                    names.append("incident-page-phone.png")
            finally:
                driver.quit()
    for name in names:
        print(f"{args.out / name}: {(args.out / name).stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
