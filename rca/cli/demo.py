"""`rca demo`: a recorded incident investigated end to end by the real service, on embedded
defaults, and the diagnosis it stored printed with its evidence."""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import sys
import threading
import time
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from rca.cli.checks import can_listen, prepare_database
from rca.cli.common import EXIT_FAILED, EXIT_NO_DATA, Command, fail
from rca.cli.logs import report_logging
from rca.config import Settings
from rca.domain.answer import answer_line
from rca.domain.status import InvestigationStatus

DEMO_ALERT = "demo_alert.json"  # the recorded incident's webhook (tools/record_demo_window.py)
DEMO_GROUP = "/rca-demo"  # appended to its group key: the demo's one incident


def add_parser(command: Command) -> None:
    demo = command(
        "demo",
        "investigate a recorded incident end to end, on embedded defaults",
        "Start the real service on embedded defaults (SQLite, in-process queue), replay a recorded "
        "3-hour Prometheus window of a real incident on a loopback port, post its alert to the "
        "webhook and print the diagnosis the service stored, with its evidence.",
    )
    demo.add_argument(
        "--payload",
        help="send this Alertmanager payload instead of the recorded incident's; "
        "it is investigated against RCA_PROMETHEUS_URL",
    )
    demo.add_argument("--port", type=int, default=0, help="service port (0: a free one)")
    demo.add_argument("--serve", action="store_true", help="keep the service up after the diagnosis (Ctrl-C stops)")
    demo.set_defaults(func=run)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _demo_payload(args: argparse.Namespace, alert_start: float) -> dict[str, Any]:
    """The recorded incident's webhook, its alerts started `alert_start` (unix seconds), or the
    user's own payload as it is."""
    if args.payload:
        try:
            return json.loads(Path(args.payload).read_text())
        except OSError as exc:
            fail(f"{args.payload}: {exc.strerror}")
        except ValueError as exc:
            fail(f"{args.payload}: not JSON: {exc}")
    payload = json.loads(resources.files("rca.samples").joinpath(DEMO_ALERT).read_text())
    # One group for every run: a later run folds into the demo's incident (investigated again)
    # instead of opening another one just like it, which "Similar incidents" would list at 100 %.
    payload["groupKey"] += DEMO_GROUP
    # Neither the recorded Alertmanager nor the recorded Prometheus is here: no links to them.
    payload["externalURL"] = ""
    for alert in payload["alerts"]:
        alert["startsAt"] = datetime.fromtimestamp(alert_start, UTC).isoformat()
        alert["generatorURL"] = ""
    return payload


def _next_steps(base: str, api_token: str, incident: dict[str, Any], serving: bool, measured: bool) -> list[str]:
    """Where to look next: the API calls that show what was stored, ready to paste."""
    top = (incident["investigation"]["hypotheses"] or [{}])[0].get("category")
    curl = f"curl -H 'Authorization: Bearer {api_token}'"
    when = (
        "the service is up until Ctrl-C"
        if serving
        else "this run stops its service now; `rca demo --serve` keeps it up"
    )
    by_cause = [f"    {curl} '{base}/api/v1/incidents?category={top}'"] if measured and top else []
    return [
        "",
        f"Where to look next ({when}):",
        "  the incident with all its evidence and PromQL:",
        f"    {curl} {base}/api/v1/incidents/{incident['id']}",
        "  the history" + (", by top cause and by free text:" if by_cause else ", by free text:"),
        *by_cause,
        f"    {curl} '{base}/api/v1/incidents?q={incident['alertname'] or ''}'",
        "  past incidents with the same evidence:",
        f"    {curl} {base}/api/v1/incidents/{incident['id']}/similar",
        f"  the whole API: {base}/docs",
        "  the incident page, with a chart per breached finding (sign in with the API token above):",
        f"    {base}/incidents/{incident['id']}",
    ]


def run(settings: Settings, args: argparse.Namespace) -> None:
    """Replay a recorded incident through the real service on embedded defaults: the recorded
    Prometheus answers are served by a loopback replay (rca/collect/replay.py), the sample alert
    is posted to the real webhook, investigated in-process and read back through the API."""
    import uvicorn

    from rca.cli.demo_client import DemoClient
    from rca.collect.replay import Recording, ReplayServer
    from rca.incidents.queue import investigate_again
    from rca.jobs.dispatch import create_dispatcher
    from rca.pages.site import create_site
    from rca.report import no_data_reason, render, use_colour, written_by
    from rca.store.db import session_scope

    report_logging()
    recording = Recording.load()
    alert_start = time.time() - float(recording.meta["investigated_after_seconds"])
    payload = _demo_payload(args, alert_start)
    webhook_token, api_token = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    with ReplayServer(recording, anchor=alert_start) as replay:
        # The bundled alert is investigated on the replay; a payload of one's own on RCA_PROMETHEUS_URL.
        prometheus_url = settings.prometheus_url if args.payload else replay.url
        settings = settings.model_copy(
            update={
                "webhook_token": SecretStr(webhook_token),
                "api_tokens": [SecretStr(api_token)],
                "prometheus_url": prometheus_url,
                "broker_url": None,
                # The recording holds one investigation's window, not a fleet to scan.
                "scan_enabled": False if not args.payload else settings.scan_enabled,
            }
        )
        prepare_database(settings)
        if args.port:
            can_listen("127.0.0.1", args.port)
        port = args.port or _free_port()
        dispatcher = create_dispatcher(settings)  # the demo's own, to investigate its incident again
        site = create_site(settings, dispatcher)
        server = uvicorn.Server(uvicorn.Config(site, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        base = f"http://127.0.0.1:{port}"
        client = DemoClient(base, webhook_token, api_token)
        try:
            deadline = time.monotonic() + 10
            while not server.started:
                if time.monotonic() > deadline or not thread.is_alive():
                    fail(f"the service did not start on 127.0.0.1:{port}", code=EXIT_FAILED)
                time.sleep(0.05)
            source = (
                f"Prometheus at {prometheus_url}"
                if prometheus_url and args.payload
                else "no Prometheus (RCA_PROMETHEUS_URL is not set)"
                if args.payload
                else f"a recorded Prometheus window replayed at {replay.url} "
                f"(recorded from Prometheus {recording.meta['prometheus_version']} by "
                f"{recording.meta['recorded_by']})"
            )
            store = settings.effective_database_url
            store = f"SQLite {store}" if store.startswith("sqlite") else "RCA_DATABASE_URL"
            print(f"rca demo: service on {base} ({store}, in-process queue); metrics from {source}")
            reply = client.post_alert(payload)
            print(f"POST /api/v1/alertmanager -> {reply.status_code} {reply.text}")
            accepted = reply.json()
            incident_id, investigation_id = accepted["incident_id"], accepted["investigation_id"]
            if investigation_id is None:  # it joined the incident an earlier run left open
                with session_scope(settings.effective_database_url) as session:
                    # A running one may be a killed earlier run's, under a lease that outlives the wait.
                    again = investigate_again(session, incident_id, reason="rerun", unless=[InvestigationStatus.QUEUED])
                if again is not None:  # a new one, or one an earlier run left queued: this process runs it
                    investigation_id = again.investigation_id
                    dispatcher.enqueue(investigation_id)
                    print(
                        f"Incident {incident_id} is open since an earlier run: "
                        f"investigating it again (investigation {investigation_id})"
                    )
            incident = client.wait_for_investigation(incident_id, timeout=60, investigation_id=investigation_id)
            inv = incident["investigation"]
            print(
                f"GET /api/v1/incidents/{incident_id} -> investigation {inv['status']} "
                f"in {inv['total_seconds'] or 0:.1f} s\n"
            )
            if inv["status"] == InvestigationStatus.FAILED:  # inconclusive is the report's "no data"
                why = answer_line(inv.get("error") or "no error recorded", limit=300)
                fail(f"investigation failed: {why}", code=EXIT_FAILED)
            alert = incident["alerts"][0] if incident["alerts"] else {}
            since = datetime.fromisoformat(alert["starts_at"]).strftime(" (firing since %H:%M:%S UTC)") if alert else ""
            print(f"Incident {incident_id}: {incident['title']}{since}")
            stored = inv.get("target") or {}
            named = ({"host": stored["host"]} if stored.get("host") else {}) | stored.get("labels", {})
            subject = " ".join(f"{k}={v}" for k, v in named.items()) or "-"
            no_data = no_data_reason(inv["findings"], inv.get("error"))
            print(render(subject, inv["findings"], inv["hypotheses"], colour=use_colour(sys.stdout), no_data=no_data))
            if no_data is None:
                print("\n" + written_by(inv.get("analyst"), inv.get("llm_model"), inv.get("fallback_reason")))
            if replay.misses and not args.payload:
                print(
                    f"\nNote: {len(replay.misses)} queries are not in the recording (the profile changed since it "
                    "was recorded: rerun tools/record_demo_window.py); they were answered as absent series."
                )
            print("\n".join(_next_steps(base, api_token, incident, args.serve, measured=no_data is None)))
            if no_data is not None and not args.serve:
                raise SystemExit(EXIT_NO_DATA)  # the report said why
            if args.serve:
                with contextlib.suppress(KeyboardInterrupt):
                    while thread.is_alive():
                        thread.join(0.5)
        finally:
            server.should_exit = True
            thread.join(timeout=10)
            dispatcher.close()
