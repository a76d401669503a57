"""`rca`: serve, worker, migrate, investigate, demo."""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import shutil
import sys
import threading
import time
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError

from rca.config import ConfigError, Settings, first_error, load_settings

log = logging.getLogger("rca")
SAMPLE_PAYLOAD = "alertmanager_queue_high.json"


def _fail(message: str, code: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def _setup_logging(settings: Settings) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Alembic announces each of its plugins at INFO on import; that noise buried our one-line errors.
    logging.getLogger("alembic.runtime.plugins").setLevel(max(logging.WARNING, logging.root.level))
    # httpx logs every request at INFO: the demo's polling and each trace or LLM call would flood the log.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.root.level))


def _check_auth_settings(settings: Settings) -> None:
    if not settings.webhook_token and not settings.webhook_allow_unauthenticated:
        _fail("RCA_WEBHOOK_TOKEN: not set; set a token (or RCA_WEBHOOK_ALLOW_UNAUTHENTICATED=true to accept anyone)")
    if not settings.api_tokens and not settings.api_allow_unauthenticated:
        _fail("RCA_API_TOKENS: not set; set comma-separated tokens (or RCA_API_ALLOW_UNAUTHENTICATED=true)")


def _prepare_database(settings: Settings) -> None:
    """The embedded SQLite store migrates itself; a configured database must already be migrated."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from sqlalchemy.exc import OperationalError

    from rca.store.db import alembic_config, get_engine, migrate

    url = settings.effective_database_url
    if not settings.database_url:
        migrate(url)
        return
    try:
        with get_engine(url).connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
    except OperationalError as exc:
        _fail(f"RCA_DATABASE_URL: cannot connect ({str(exc.orig).strip().splitlines()[0]}); is the database running?")
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    if current != head:
        _fail(f"RCA_DATABASE_URL: schema is at {current or 'nothing'}, expected {head}; run `rca migrate`")


def cmd_serve(settings: Settings, args: argparse.Namespace) -> None:
    import uvicorn

    from rca.api.app import create_app

    _check_auth_settings(settings)
    _prepare_database(settings)
    mode = "embedded queue" if settings.embedded_queue else "celery"
    log.info("serving on %s:%s (%s, database %s)", args.host or settings.host, args.port or settings.port,
             mode, "sqlite" if settings.effective_database_url.startswith("sqlite") else "postgresql")
    uvicorn.run(create_app(settings), host=args.host or settings.host, port=args.port or settings.port,
                log_level=settings.log_level.lower())


def _multiprocess_metrics(settings: Settings) -> None:
    """Point prometheus-client's multiprocess mode at an emptied `RCA_DATA_DIR/worker-metrics`, so
    that the prefork children's counters reach the worker's metrics port. It must happen before
    prometheus-client is imported: it picks its value store at import time."""
    if "prometheus_client" in sys.modules:
        raise RuntimeError("prometheus_client was imported before the worker set PROMETHEUS_MULTIPROC_DIR")
    directory = settings.data_dir / "worker-metrics"
    try:
        if directory.exists():
            shutil.rmtree(directory)  # values of an earlier run: counters restart with the worker
        directory.mkdir(parents=True)
    except OSError as exc:
        _fail(f"RCA_DATA_DIR: cannot prepare {directory} for the worker's metrics: {exc.strerror or exc}")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory.resolve())


def _serve_worker_metrics(settings: Settings) -> None:
    """The worker's own metrics on RCA_WORKER_METRICS_HOST:RCA_WORKER_METRICS_PORT (0: not served)."""
    if settings.worker_metrics_port == 0:
        return
    from prometheus_client import start_http_server

    from rca.metrics import scrape_registry

    try:
        start_http_server(settings.worker_metrics_port, settings.worker_metrics_host, registry=scrape_registry())
    except OSError as exc:
        _fail(f"RCA_WORKER_METRICS_PORT: cannot listen on {settings.worker_metrics_host}:"
              f"{settings.worker_metrics_port}: {exc.strerror or exc} (0 turns the metrics port off)")
    log.info("worker metrics on http://%s:%s/metrics", settings.worker_metrics_host, settings.worker_metrics_port)


def cmd_worker(settings: Settings, args: argparse.Namespace) -> None:
    if settings.embedded_queue:
        _fail("RCA_BROKER_URL: not set; `rca worker` needs a broker (without one, `rca serve` investigates in-process)")
    if settings.worker_metrics_port:
        _multiprocess_metrics(settings)
    _prepare_database(settings)
    from workers.app import app

    _serve_worker_metrics(settings)

    argv = ["worker", "--loglevel", settings.log_level.upper(), "--concurrency", str(args.concurrency),
            "--queues", args.queues, "--hostname", args.hostname]
    if not args.no_beat:
        argv += ["--beat", "--schedule", str(settings.data_dir / "celerybeat-schedule")]
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    app.worker_main(argv)


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> None:
    from sqlalchemy.exc import OperationalError

    from rca.store.db import migrate

    try:
        migrate(settings.effective_database_url, args.revision)
    except OperationalError as exc:
        _fail(f"RCA_DATABASE_URL: cannot connect ({str(exc.orig).strip().splitlines()[0]}); is the database running?")
    print(f"database migrated to {args.revision}")


def _alerts_from_args(args: argparse.Namespace) -> tuple[list[dict[str, str]], list[datetime]]:
    from rca.intake.schema import WebhookPayload

    if args.payload:
        try:
            payload = WebhookPayload.model_validate_json(Path(args.payload).read_bytes())
        except OSError as exc:
            _fail(f"{args.payload}: {exc.strerror}")
        except ValidationError as exc:
            _fail(f"{args.payload}: not an Alertmanager payload: {first_error(exc)}")
        firing = [a for a in payload.alerts if a.status == "firing"] or payload.alerts
        return [a.labels for a in firing], [a.startsAt for a in firing]
    labels = {}
    for item in args.label:
        name, sep, value = item.partition("=")
        if not sep:
            _fail(f"--label {item!r}: expected name=value")
        labels[name] = value
    if not labels:
        _fail("give an Alertmanager payload file or at least one --label name=value")
    start = datetime.fromisoformat(args.start) if args.start else datetime.now(UTC)
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    return [labels], [start]


def cmd_investigate(settings: Settings, args: argparse.Namespace) -> None:
    from rca.analyst.summary import AlertText
    from rca.collect.target import target_from_alerts
    from rca.pipeline import analyse
    from rca.report import render

    labels, starts = _alerts_from_args(args)
    target = target_from_alerts(labels, starts, settings.file_config().target)
    alerts = [AlertText(alert, {}, start) for alert, start in zip(labels, starts, strict=True)]
    analysis = analyse(settings, target, alerts=alerts)
    findings = [f.to_dict() | {"id": f.key} for f in analysis.findings]
    hypotheses = [h.to_dict() for h in analysis.hypotheses]
    if args.json:
        window = analysis.collection.window
        out = {"target": target.to_dict(), "selectors": analysis.collection.selectors,
               "window": {"start": window.start.isoformat(), "end": window.end.isoformat(),
                          "step_seconds": window.step_seconds},
               "collect_seconds": round(analysis.collect_seconds, 3),
               "findings": findings, "hypotheses": hypotheses,
               "analyst": analysis.analyst.to_dict() if analysis.analyst else None}
        print(json.dumps(out, indent=2, default=str))
    else:
        print(render(target.describe(), findings, hypotheses))
        if analysis.analyst:
            record = analysis.analyst
            print(f"\nAnalyst: {record.analyst}" + (f" - {record.fallback_reason}" if record.fallback_reason else ""))


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cmd_demo(settings: Settings, args: argparse.Namespace) -> None:
    """Start the real service on embedded defaults, send it a sample alert, print what it stored."""
    import httpx
    import uvicorn

    from rca.api.app import create_app
    from rca.report import render

    webhook_token, api_token = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    settings = settings.model_copy(
        update={"webhook_token": SecretStr(webhook_token), "api_tokens": [SecretStr(api_token)]}
    )
    _prepare_database(settings)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline:
                _fail("the service did not start within 10 s")
            time.sleep(0.05)
        payload: dict[str, Any] = json.loads(
            resources.files("rca.samples").joinpath(SAMPLE_PAYLOAD).read_text()
            if not args.payload else Path(args.payload).read_text()
        )
        if not args.payload:
            payload["groupKey"] += f"/demo-{int(time.time())}"  # a fresh incident on every run
            for alert in payload["alerts"]:
                alert["startsAt"] = datetime.now(UTC).isoformat()
        print(f"rca demo: service on {base} ({'SQLite ' + str(settings.effective_database_url)})")
        reply = httpx.post(f"{base}/api/v1/alertmanager", json=payload,
                           headers={"Authorization": f"Bearer {webhook_token}"}, timeout=10)
        print(f"POST /api/v1/alertmanager -> {reply.status_code} {reply.text}")
        reply.raise_for_status()
        incident_id = reply.json()["incident_id"]
        auth = {"Authorization": f"Bearer {api_token}"}
        deadline = time.monotonic() + 60
        while True:
            incident = httpx.get(f"{base}/api/v1/incidents/{incident_id}", headers=auth, timeout=10).json()
            inv = incident["investigation"]
            if inv and inv["status"] in ("done", "failed"):
                break
            if time.monotonic() > deadline:
                _fail("the investigation did not finish within 60 s")
            time.sleep(0.2)
        print(f"GET /api/v1/incidents/{incident_id} -> investigation {inv['status']} "
              f"in {inv['total_seconds']} s\n")
        print(f"Incident {incident_id}: {incident['title']}")
        if inv.get("error"):
            print(f"Note: {inv['error']}")
        stored = inv.get("target") or {}
        named = ({"host": stored["host"]} if stored.get("host") else {}) | stored.get("labels", {})
        target = " ".join(f"{k}={v}" for k, v in named.items())
        print(render(target or "-", inv["findings"], inv["hypotheses"]))
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def cmd_gpu_probe(settings: Settings, args: argparse.Namespace) -> None:
    """Sample NVML on this GPU host and serve it as Prometheus metrics: no standard exporter publishes GPM."""
    from rca.gpu.exporter import run_once, serve
    from rca.gpu.nvml import NoGpuError

    if args.interval <= 0 or not 0 <= args.port <= 65535:
        _fail("--interval must be > 0 and --port within 0-65535")
    try:
        if args.once:
            run_once(sys.stdout)
        else:
            serve(args.host, args.port, args.interval)
    except NoGpuError as exc:
        _fail(f"no NVIDIA GPU available: {exc}", code=3)
    except OSError as exc:
        if args.once:
            raise
        _fail(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")


def cmd_token(settings: Settings, args: argparse.Namespace) -> None:
    """Create or revoke a named API token; a new token is printed once and only its hash is kept."""
    from rca.store import tokens
    from rca.store.db import session_scope

    _prepare_database(settings)
    url = settings.effective_database_url
    name = args.name.strip()  # the same name for create and revoke
    if args.action == "create":
        if not name or len(name) > 128:
            _fail("--name: give 1 to 128 characters")
        try:
            with session_scope(url) as session:
                token = tokens.create(session, name, args.scope)
        except ValueError as exc:
            _fail(str(exc))
        print(token)
        print(f"token {name!r} ({args.scope}) created; it is shown only now", file=sys.stderr)
    else:
        with session_scope(url) as session:
            revoked = tokens.revoke(session, name)
        if not revoked:
            _fail(f"no live token named {name!r}")
        print(f"token {name!r} revoked")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rca", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP service (webhook + search API)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", help="run a Celery worker for investigations")
    worker.add_argument("--concurrency", type=int, default=2)
    worker.add_argument("--hostname", default="rca@%h")
    worker.add_argument("--queues", default="investigations,slack",
                        help="comma-separated queues to consume (Slack deliveries have their own)")
    worker.add_argument("--no-beat", action="store_true", help="do not run the stranded-investigation sweeper")
    worker.set_defaults(func=cmd_worker)

    mig = sub.add_parser("migrate", help="create or upgrade the database schema")
    mig.add_argument("revision", nargs="?", default="head")
    mig.set_defaults(func=cmd_migrate)

    inv = sub.add_parser("investigate", help="run one investigation now and print the ranked result")
    inv.add_argument("payload", nargs="?", help="Alertmanager webhook payload (JSON file)")
    inv.add_argument("--label", action="append", default=[], help="alert label name=value (instead of a payload)")
    inv.add_argument("--start", help="alert start, ISO 8601 (with --label; default now)")
    inv.add_argument("--json", action="store_true", help="machine-readable output")
    inv.set_defaults(func=cmd_investigate)

    demo = sub.add_parser("demo", help="start the service on embedded defaults and investigate a sample alert")
    demo.add_argument("--payload", help="send this Alertmanager payload instead of the bundled sample")
    demo.set_defaults(func=cmd_demo)

    gpu = sub.add_parser("gpu-probe", help="serve this host's NVML GPU metrics (GPM included) for Prometheus")
    gpu.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    gpu.add_argument("--port", type=int, default=9835, help="listen port (default 9835)")
    gpu.add_argument("--interval", type=float, default=5.0, help="seconds between NVML samples (default 5)")
    gpu.add_argument("--once", action="store_true", help="print one sample as Prometheus text and exit")
    gpu.set_defaults(func=cmd_gpu_probe)

    token = sub.add_parser("token", help="create or revoke a named API token (read or write scope)")
    token_sub = token.add_subparsers(dest="action", required=True)
    create = token_sub.add_parser("create", help="print a new token; only its hash is stored")
    create.add_argument("--name", required=True, help="who or what uses it; recorded as the author of feedback")
    create.add_argument("--scope", choices=["read", "write"], default="read",
                        help="read: search and statistics; write: also feedback (default read)")
    revoke = token_sub.add_parser("revoke", help="stop a token from working")
    revoke.add_argument("--name", required=True)
    token.set_defaults(func=cmd_token)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
    except ConfigError as exc:
        _fail(str(exc))
    _setup_logging(settings)
    try:
        args.func(settings, args)
    except ConfigError as exc:
        _fail(str(exc))


if __name__ == "__main__":
    main()
