"""rca: root-cause analysis for LLM-serving incidents (Alertmanager webhook -> Prometheus evidence -> ranked causes)."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from pydantic import SecretStr, ValidationError

from rca.config import ConfigError, Settings, first_error
from rca.domain.answer import answer_line
from rca.domain.status import AlertStatus, InvestigationStatus
from rca.startup import checked_settings, prometheus_problem

if TYPE_CHECKING:
    from rca.scan.backtest import BacktestResult
    from rca.scan.stored import Stored

log = logging.getLogger("rca")
DEMO_ALERT = "demo_alert.json"  # the recorded incident's webhook (tools/record_demo_window.py)
DEMO_GROUP = "/rca-demo"  # appended to its group key: the demo's one incident
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_DATA = 0, 1, 2, 3
EXIT_CODES = f"""exit codes:
  {EXIT_OK}  done (for investigate and demo: a diagnosis was made)
  {EXIT_FAILED}  the command failed while running (the demo's investigation failed; backtest:
     Prometheus unreachable, or not a Prometheus; investigate-again: no such
     incident)
  {EXIT_USAGE}  usage or configuration error (bad option, bad RCA_* setting, database unreachable or
     not migrated, port in use)
  {EXIT_NO_DATA}  no data: nothing could be measured (no or unreachable Prometheus, no series for
     the target; backtest: no serving target in the history; gpu-probe: no NVIDIA GPU), so no cause
     was ranked"""


def _fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


# Libraries that log every request at INFO (with its full URL): the demo's polling and each trace
# or LLM call would flood the log. The openai client sends through httpx2 (a fork of httpx with its
# own logger names); its own "openai" logger announces retries with the URL.
CHATTY_LOGGERS = ("httpx", "httpcore", "httpx2", "httpcore2", "openai")
# Alembic announces each of its plugins at INFO on import, and its migration context at INFO
# whenever the schema's revision is read (every `serve`, `worker`, `token`): noise around our
# one-line errors. `rca migrate` shows the steps it runs.
ALEMBIC_LOGGERS = ("alembic.runtime.plugins", "alembic.runtime.migration")
RETRY_LOGGER = "urllib3.connectionpool"
URLLIB3_RETRY = "Retrying (%r) after connection broken by '%r': %s"  # urllib3 2.x's own format
PROMQL_SHOWN = 80  # characters of a retried request's PromQL in the log


class ShortRetryWarnings(logging.Filter):
    """urllib3's warning of each retried request in one short line: the path with its PromQL
    decoded and cut, and the error's own words, instead of the retry state's repr, the error's
    nested reprs and the whole URL-encoded query."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == URLLIB3_RETRY and isinstance(record.args, tuple) and len(record.args) == 3:
            _, error, url = record.args
            record.msg, record.args = "retrying %s after %s", (_short_request(str(url)), _short_cause(error))
        return True


def _short_request(url: str) -> str:
    """`/api/v1/query (sum(rate(vllm:...)…)`: the path, and the PromQL it asked, cut."""
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(url)
    query = " ".join(parse_qs(parts.query).get("query", [""])[0].split())
    if len(query) > PROMQL_SHOWN:
        query = query[: PROMQL_SHOWN - 1] + "…"
    return f"{parts.path} ({query})" if query else parts.path


def _short_cause(error: object) -> str:
    """`NewConnectionError: ... [Errno 111] Connection refused`, on one line, cut."""
    return f"{type(error).__name__}: {answer_line(str(error))}"


def quiet_library_loggers() -> None:
    """Libraries' per-request logs at WARNING and above only, whatever RCA_LOG_LEVEL says, and
    urllib3's retries in one short line each. Called by every entry point that runs the service
    (`rca ...`, `celery -A workers.app`)."""
    for name in (*ALEMBIC_LOGGERS, *CHATTY_LOGGERS):
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.root.level))
    retries = logging.getLogger(RETRY_LOGGER)
    if not any(isinstance(f, ShortRetryWarnings) for f in retries.filters):
        retries.addFilter(ShortRetryWarnings())


def _report_logging() -> None:
    """The output of `investigate`, `backtest` and `demo` is their report, not the service's log:
    warnings only unless RCA_LOG_LEVEL is set, and not urllib3's per-retry warnings, which would
    bury the one line that says Prometheus is unreachable (RCA_LOG_LEVEL=DEBUG shows them)."""
    if "RCA_LOG_LEVEL" not in os.environ:
        logging.getLogger().setLevel(logging.WARNING)
    if logging.root.level > logging.DEBUG:
        logging.getLogger(RETRY_LOGGER).setLevel(logging.ERROR)


def _setup_logging(settings: Settings) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_library_loggers()


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


def _warn_if_blind(settings: Settings) -> None:
    """One warning at start when Prometheus is unset or unreachable: the service runs, but every
    investigation ends inconclusive until it answers (`/readyz` says degraded meanwhile)."""
    problem = prometheus_problem(settings)
    if problem is not None:
        log.warning("%s", problem)


def usable_cpus() -> int:
    """The CPUs this process may run on, capped by a container's CPU limit (cgroup v2 `cpu.max`),
    which the affinity mask does not show."""
    count = len(os.sched_getaffinity(0))
    with contextlib.suppress(OSError, ValueError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            count = min(count, max(1, math.ceil(int(quota) / int(period))))
    return count


def default_serve_workers(settings: Settings) -> int:
    """One server process per usable CPU; one with the embedded queue, whose investigations and
    sweeper live inside the server process."""
    return 1 if settings.embedded_queue else usable_cpus()


def serve_app() -> Any:
    """The app of one worker process of `rca serve --workers N`, which uvicorn imports by this
    name: the settings are read again from the environment the parent checked."""
    from rca.pages.site import create_site

    settings = checked_settings()
    _setup_logging(settings)
    return create_site(settings)


def cmd_serve(settings: Settings, args: argparse.Namespace) -> None:
    import uvicorn

    _check_auth_settings(settings)
    workers = args.workers if args.workers is not None else default_serve_workers(settings)
    if workers < 1:
        _fail("--workers: give 1 or more")
    if workers > 1 and settings.embedded_queue:
        _fail("--workers: more than 1 needs RCA_BROKER_URL (the embedded queue runs inside the one server process)")
    _prepare_database(settings)
    host, port, level = args.host or settings.host, args.port or settings.port, settings.log_level.lower()
    _can_listen(host, port)
    _warn_if_blind(settings)  # after what stops the start, so that a refusal stays one line
    mode = "embedded queue" if settings.embedded_queue else "celery"
    log.info(
        "serving on %s:%s (%s, database %s, %d worker process%s)",
        host,
        port,
        mode,
        "sqlite" if settings.effective_database_url.startswith("sqlite") else "postgresql",
        workers,
        "" if workers == 1 else "es",
    )
    if workers == 1:
        from rca.pages.site import create_site

        uvicorn.run(create_site(settings), host=host, port=port, log_level=level)
        return
    # Each worker process counts its own requests; /metrics, answered by any of them, sums them all.
    _multiprocess_metrics(settings, "serve-metrics")
    uvicorn.run(
        "rca.cli:serve_app",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level=level,
        timeout_worker_healthcheck=settings.serve_worker_healthcheck_seconds,
    )


def _multiprocess_metrics(settings: Settings, name: str) -> None:
    """Point prometheus-client's multiprocess mode at an emptied `RCA_DATA_DIR/<name>`, so that
    the children's counters reach the metrics port (the worker's, or any server process's). It must happen before
    prometheus-client is imported: it picks its value store at import time."""
    if "prometheus_client" in sys.modules:
        raise RuntimeError("prometheus_client was imported before the worker set PROMETHEUS_MULTIPROC_DIR")
    directory = settings.data_dir / name
    try:
        if directory.exists():
            shutil.rmtree(directory)  # values of an earlier run: counters restart with the worker
        directory.mkdir(parents=True)
    except OSError as exc:
        _fail(f"RCA_DATA_DIR: cannot prepare {directory} for the worker's metrics: {exc.strerror or exc}")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory.resolve())


_HELD_SLOTS: list[TextIO] = []  # the metrics slot's lock file, held open while the worker lives


def _metrics_slot(settings: Settings) -> tuple[int, str]:
    """This worker's metrics port and multiprocess directory: the first of RCA_WORKER_METRICS_PORTS
    ports from RCA_WORKER_METRICS_PORT that no other worker of this host holds (a lock file in
    RCA_DATA_DIR, held while it lives) and nothing else listens on. Several workers on one host
    then serve on 9808, 9809, … and each empties only its own directory (the first keeps the
    plain `worker-metrics`)."""
    first, host = settings.worker_metrics_port, settings.worker_metrics_host
    ports = range(first, min(first + settings.worker_metrics_ports, 65536))
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _fail(f"RCA_DATA_DIR: cannot create {settings.data_dir}: {exc.strerror or exc}")
    busy = []
    for port in ports:
        lock = (settings.data_dir / f"worker-metrics-{port}.lock").open("w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            busy.append(f"{port} (another rca worker)")
            continue
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the metrics server binds
            try:
                probe.bind((host, port))
            except OSError as exc:
                lock.close()
                busy.append(f"{port} ({exc.strerror or exc})")
                continue
        _HELD_SLOTS.append(lock)
        return port, "worker-metrics" if port == first else f"worker-metrics-{port}"
    _fail(
        f"RCA_WORKER_METRICS_PORT: no free port on {host} among {first}-{ports[-1]}: {', '.join(busy)}"
        " (raise RCA_WORKER_METRICS_PORTS, or 0 turns the metrics port off)"
    )


def _serve_worker_metrics(settings: Settings, port: int) -> None:
    """The worker's own metrics on RCA_WORKER_METRICS_HOST:`port`."""
    from prometheus_client import start_http_server

    from rca.metrics import scrape_registry

    try:
        start_http_server(port, settings.worker_metrics_host, registry=scrape_registry())
    except OSError as exc:
        _fail(
            f"RCA_WORKER_METRICS_PORT: cannot listen on {settings.worker_metrics_host}:{port}:"
            f" {exc.strerror or exc} (0 turns the metrics port off)"
        )
    log.info("worker metrics on http://%s:%s/metrics", settings.worker_metrics_host, port)


def cmd_worker(settings: Settings, args: argparse.Namespace) -> None:
    """Supervise one Celery worker process per queue (investigations; Slack with its own small
    pool, so that a hanging Slack never takes an investigation's place) and the scheduler
    (`rca beat`); they die with this process and it stops them all when one of them exits."""
    if settings.embedded_queue:
        _fail("RCA_BROKER_URL: not set; `rca worker` needs a broker (without one, `rca serve` investigates in-process)")
    if args.role == "consumer":
        _die_with_parent(args.parent_pid)
        _run_consumer(settings, args)
        return
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    if not queues:
        _fail("--queues: name at least one queue")
    metrics_port = None
    if settings.worker_metrics_port:
        metrics_port, directory = _metrics_slot(settings)
        _multiprocess_metrics(settings, directory)
    _prepare_database(settings)
    if metrics_port is not None:
        _serve_worker_metrics(settings, metrics_port)
    _warn_if_blind(settings)  # after what stops the start, so that a refusal stays one line
    me = str(os.getpid())
    children: dict[str, list[str]] = {}
    for queue in queues:
        concurrency = args.slack_concurrency if queue == SLACK_QUEUE_NAME else args.concurrency
        children[f"worker {queue}"] = [
            *RCA_COMMAND,
            "worker",
            "--role=consumer",
            f"--parent-pid={me}",
            f"--queues={queue}",
            f"--concurrency={concurrency}",
            f"--hostname={_consumer_hostname(args.hostname, queue, queues[0])}",
        ]
    if not args.no_beat:
        children["scheduler"] = [*RCA_COMMAND, "beat", f"--parent-pid={me}"]
    raise SystemExit(_supervise(children))


SLACK_QUEUE_NAME = "slack"  # rca.jobs.celery_app.SLACK_QUEUE, named here to import no metrics before their set-up
RCA_COMMAND = (sys.executable, "-m", "rca")
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _consumer_hostname(hostname: str, queue: str, first: str) -> str:
    """The first queue's worker keeps the node name (health checks ping it); the others get
    theirs from it: `rca@host` -> `rca-slack@host`."""
    if queue == first:
        return hostname
    name, at, host = hostname.partition("@")
    return f"{name}-{queue}{at}{host}"


def _die_with_parent(parent_pid: int | None) -> None:
    """A child of `rca worker` or of the scheduler's parent: killed by the kernel when its parent
    dies (Linux' PR_SET_PDEATHSIG, as Celery does for its pool), so a crash leaves no orphan."""
    if parent_pid is None:
        return
    if sys.platform == "linux":  # elsewhere the scheduler still checks its parent each tick
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the line above
        raise SystemExit(EXIT_FAILED)


def _run_consumer(settings: Settings, args: argparse.Namespace) -> None:
    """One Celery worker on one queue; its parent prepared the database and serves the metrics."""
    from rca.jobs.celery_app import create_app

    argv = ["worker", "--loglevel", settings.log_level.upper(), "--concurrency", str(args.concurrency)]
    argv += ["--queues", args.queues, "--hostname", args.hostname]
    create_app(settings).worker_main(argv)


def _supervise(children: dict[str, list[str]]) -> int:
    """Start the children, forward SIGTERM and SIGINT to them, and when one fails (a non-zero exit)
    stop the others: the whole worker then exits (non-zero) for its supervisor (compose, Kubernetes)
    to restart it whole. A child that shut down cleanly without being asked is started again: a
    Celery consumer does that when its broker goes away at the wrong moment (its connection's
    close fails with an AttributeError in kombu), and the rest of the worker is still sound.
    Returns the exit status."""
    stop = threading.Event()
    status = EXIT_OK

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    procs = {name: subprocess.Popen(command) for name, command in children.items()}
    log.info("worker: started %s", ", ".join(f"{name} (pid {p.pid})" for name, p in procs.items()))
    while not stop.is_set():
        for name, proc in list(procs.items()):
            if proc.poll() is None or stop.is_set():
                continue
            if proc.returncode == 0:
                log.warning("worker: %s shut down on its own; starting it again", name)
                procs[name] = subprocess.Popen(children[name])
                continue
            log.error("worker: %s exited with %s; stopping the others", name, proc.returncode)
            status = EXIT_FAILED
            stop.set()
        stop.wait(0.5)
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # Celery's warm shutdown: running tasks finish first
    for proc in procs.values():
        proc.wait()
    return status


def cmd_beat(settings: Settings, args: argparse.Namespace) -> None:
    if settings.embedded_queue:
        _fail("RCA_BROKER_URL: not set; `rca beat` needs a broker (without one, `rca serve` sweeps in-process)")
    if args.parent_pid is not None:
        _die_with_parent(args.parent_pid)
    else:
        _prepare_database(settings)
    from rca.jobs.beat import run_scheduler
    from rca.jobs.celery_app import create_app

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    run_scheduler(settings, create_app(settings), stop, args.parent_pid)


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """`90m`, `6h`, `7d` (Prometheus' units s, m, h, d) as a timedelta."""
    number, unit = text.strip()[:-1], text.strip()[-1:]
    if unit not in DURATION_UNITS or not number.isdigit() or int(number) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90m, 6h or 7d")
    return timedelta(seconds=int(number) * DURATION_UNITS[unit])


def _on_the_scan_grid(when: datetime, interval: float) -> datetime:
    """`when` moved back to a multiple of the scan interval (unix time): a re-run over the same
    history scans at the same times, so it finds the same warnings (what `--store` skips)."""
    return datetime.fromtimestamp(when.timestamp() // interval * interval, UTC)


def _stored(settings: Settings, result: BacktestResult) -> Stored:
    """The backtest's warnings stored in one transaction: all of them, or none on an error."""
    from sqlalchemy.exc import OperationalError

    from rca.scan.service import policy_of
    from rca.scan.stored import store_all

    try:
        stored = store_all(settings.effective_database_url, result, policy_of(settings))
    except OperationalError as exc:
        _fail(f"RCA_DATABASE_URL: cannot connect ({str(exc.orig).strip().splitlines()[0]}); nothing was stored")
    return stored


def _minutes(seconds: float | None) -> str:
    return f"{seconds / 60:.1f} min" if seconds is not None else "n/a"


def _replayed(settings: Settings, args: argparse.Namespace, start: datetime, end: datetime) -> BacktestResult:
    """The backtest's result, or one line and exit 1 when Prometheus fails it. Prometheus is asked
    once first, so that one not there (or not Prometheus) is said at once, before the replay."""
    from rca.collect.prometheus import QUERY_ERRORS, short_error
    from rca.scan.backtest import backtest
    from rca.scan.scanner import prometheus_fleet_source

    source = prometheus_fleet_source(settings)
    try:
        source.instant("vector(1)", end)
        return backtest(settings, source, start, end, args.target)
    except QUERY_ERRORS as exc:
        _fail(
            f"Prometheus at {settings.prometheus_url} is unavailable: {short_error(exc)} (check RCA_PROMETHEUS_URL)",
            code=EXIT_FAILED,
        )


def _no_targets(settings: Settings, args: argparse.Namespace, result: BacktestResult) -> str:
    """Why a replay saw no target, in a line."""
    from rca.collect.profile import profile_for

    span = (
        f"from {datetime.fromtimestamp(result.start, UTC):%Y-%m-%d %H:%M} "
        f"to {datetime.fromtimestamp(result.end, UTC):%Y-%m-%d %H:%M} UTC"
    )
    if args.target:
        return f"{args.target} is not a serving target of Prometheus at {settings.prometheus_url} {span}"
    serving = profile_for(settings.file_config()).scopes["serving"].probe.split("|")
    return (
        f"Prometheus at {settings.prometheus_url} has no serving target {span} "
        f"(no series of the profile's serving metrics, such as {serving[0]})"
    )


def cmd_backtest(settings: Settings, args: argparse.Namespace) -> None:
    if not settings.prometheus_url:
        _fail("RCA_PROMETHEUS_URL: not set; the backtest replays the scan over Prometheus history")
    if args.store:
        _prepare_database(settings)  # before the replay, which can take minutes
    _report_logging()
    now = datetime.now(UTC)
    end = now - (args.until or timedelta(0))
    start = _on_the_scan_grid(now - args.since, settings.scan_interval_seconds)
    if start >= end:
        _fail("--since: must reach further back than --until")
    result = _replayed(settings, args, start, end)
    summary = result.as_dict()
    if result.targets == 0:  # no data: nothing was judged, so nothing to store or score
        if args.json:
            print(json.dumps(summary, indent=2))
        print(f"no data: {_no_targets(settings, args, result)}", file=sys.stderr)
        raise SystemExit(EXIT_NO_DATA)
    stored = _stored(settings, result) if args.store else None
    if stored is not None:
        summary |= {"stored": len(stored.incident_ids), "already_stored": stored.already_stored}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{result.scans} scans of {result.targets} targets, {summary['start']} to {summary['end']}")
    for verdict in result.breaches:
        when = datetime.fromtimestamp(verdict.breach_at, UTC)
        lead = f"warned {verdict.lead_seconds / 60:.1f} min ahead" if verdict.lead_seconds is not None else "MISSED"
        print(f"  breach {verdict.instance} at {when:%Y-%m-%d %H:%M} UTC: {lead}")
    for warning in result.false_warnings:
        when = datetime.fromtimestamp(warning.start, UTC)
        print(f"  false warning {warning.instance} at {when:%Y-%m-%d %H:%M} UTC: {warning.reason}")
    breaches = len(result.breaches)
    share = f" ({len(result.warned_before) / breaches:.0%})" if breaches else ""
    per_week = result.false_per_week
    print(
        f"breaches (TTFT p95 first beyond its SLO) {breaches}: warned before {len(result.warned_before)}{share}, "
        f"missed {len(result.missed)}; lead p50 {_minutes(result.lead_quantile(0.5))}, "
        f"p10 {_minutes(result.lead_quantile(0.1))}; warnings {len(result.warnings)}, "
        f"false warnings {len(result.false_warnings)}"
        + (f" ({per_week:.2f} per 7 target-days)" if per_week is not None else "")
    )
    if stored is not None:
        print(
            f"stored {len(stored.incident_ids)} warning(s) as incidents of origin backtest "
            f"({stored.already_stored} already stored); never posted to Slack"
        )


def _migration_steps(record: logging.LogRecord) -> bool:
    """Of alembic's migration lines, the steps it runs ("Running upgrade 0014 -> 0015, ...")."""
    return record.msg == "Running %s"


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> None:
    from alembic.util import CommandError
    from sqlalchemy.exc import OperationalError

    from rca.store.db import migrate

    steps = logging.getLogger("alembic.runtime.migration")
    steps.setLevel(max(logging.INFO, logging.root.level))
    steps.addFilter(_migration_steps)
    try:
        migrate(settings.effective_database_url, args.revision)
    except OperationalError as exc:
        _fail(f"RCA_DATABASE_URL: cannot connect ({str(exc.orig).strip().splitlines()[0]}); is the database running?")
    except CommandError as exc:  # a revision alembic does not know
        _fail(f"revision {args.revision!r}: {exc}")
    print(f"database migrated to {args.revision}")


def _alerts_from_args(args: argparse.Namespace) -> tuple[list[dict[str, str]], list[datetime]]:
    from rca.intake.schema import WebhookPayload

    if args.payload and args.label:
        _fail(
            f"--label: not with a payload file ({args.payload}), whose alerts carry their labels; give one or the other"
        )
    if args.payload and args.start:
        _fail(f"--start: not with a payload file ({args.payload}), whose alerts carry their start; use it with --label")
    if args.payload:
        try:
            payload = WebhookPayload.model_validate_json(Path(args.payload).read_bytes())
        except OSError as exc:
            _fail(f"{args.payload}: {exc.strerror}")
        except ValidationError as exc:
            _fail(f"{args.payload}: not an Alertmanager payload: {first_error(exc)}")
        firing = [a for a in payload.alerts if a.status == AlertStatus.FIRING] or payload.alerts
        return [a.labels for a in firing], [a.startsAt for a in firing]
    labels = {}
    for item in args.label:
        name, sep, value = item.partition("=")
        if not sep:
            _fail(f"--label {item!r}: expected name=value")
        labels[name] = value
    if not labels:
        _fail("give an Alertmanager payload file or at least one --label name=value")
    return [labels], [parse_start(args.start) if args.start else datetime.now(UTC)]


def parse_start(text: str) -> datetime:
    """An ISO 8601 time (UTC when it names no offset); a one-line usage error otherwise."""
    try:
        start = datetime.fromisoformat(text.strip())
    except ValueError:
        _fail(
            f"--start {text!r}: expected an ISO 8601 time such as 2026-12-03T08:40:00Z "
            "or 2026-12-03 08:40 (UTC unless an offset is given)"
        )
    return start if start.tzinfo else start.replace(tzinfo=UTC)


def cmd_investigate(settings: Settings, args: argparse.Namespace) -> None:
    from rca.analyst.summary import AlertText
    from rca.collect.target import target_from_alerts
    from rca.domain.coverage import data_gap
    from rca.pipeline import analyse
    from rca.report import no_data_reason, render, use_colour, written_by

    _report_logging()
    labels, starts = _alerts_from_args(args)
    target = target_from_alerts(labels, starts, settings.file_config().target)
    alerts = [AlertText(alert, {}, start) for alert, start in zip(labels, starts, strict=True)]
    analysis = analyse(settings, target, alerts=alerts)
    findings = [f.to_dict() | {"id": f.key} for f in analysis.findings]
    hypotheses = [h.to_dict() for h in analysis.hypotheses]
    record = analysis.analyst
    no_data = no_data_reason(findings, analysis.collection.prometheus_error)
    gap = data_gap(analysis.findings, analysis.collection.prometheus_error)
    if args.json:  # the same document with or without data; the exit code says which
        window = analysis.collection.window
        out = {
            "target": target.to_dict(),
            "selectors": analysis.collection.selectors,
            "window": {
                "start": window.start.isoformat(),
                "end": window.end.isoformat(),
                "step_seconds": window.step_seconds,
            },
            "collect_seconds": round(analysis.collect_seconds, 3),
            "findings": findings,
            "hypotheses": hypotheses,
            "analyst": record.to_dict() if record else None,
            "written_by": written_by(record.analyst, record.model, record.fallback_reason) if record else None,
            "error": analysis.collection.prometheus_error,
            "data_gap": gap.text if gap else None,  # what was not measured: not a healthy verdict
            "inconclusive_reason": gap.reason if gap else None,  # set when nothing was: no cause ranked
        }
        print(json.dumps(out, indent=2, default=str))
    elif no_data is None:
        print(render(target.describe(), findings, hypotheses, colour=use_colour(sys.stdout)))
        if record is not None:
            print("\n" + written_by(record.analyst, record.model, record.fallback_reason))
    if no_data is not None:
        _no_data(target.describe(), no_data, settings.prometheus_url)


def _no_data(target: str, reason: str, prometheus_url: str | None) -> None:
    """ "No data" is its own answer: one line saying why, and exit code 3 (never a confidence)."""
    from rca.report import no_data_hint

    hint = no_data_hint(reason, prometheus_url)
    print(f"no data for {target}: {reason}" + (f" ({hint})" if hint else ""), file=sys.stderr)
    raise SystemExit(EXIT_NO_DATA)


def _can_listen(host: str, port: int) -> None:
    """One line now when the address is taken or not this host's, rather than the server's log of
    it and its exit status 3, which means "no data" here."""
    import socket

    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            sock.bind(address)
    except OSError as exc:
        _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --host or --port")


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
            _fail(f"{args.payload}: {exc.strerror}")
        except ValueError as exc:
            _fail(f"{args.payload}: not JSON: {exc}")
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


def _wait_for_investigation(
    base: str, incident_id: int, auth: dict[str, str], timeout: float, investigation_id: int | None = None
) -> dict[str, Any]:
    """The incident once its latest investigation (`investigation_id`, when given) has finished."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        incident = httpx.get(f"{base}/api/v1/incidents/{incident_id}", headers=auth, timeout=10).json()
        inv = incident["investigation"]
        if investigation_id is not None and inv and inv["id"] < investigation_id:
            inv = None  # the one before it
        if inv and inv["status"] in (
            InvestigationStatus.DONE,
            InvestigationStatus.INCONCLUSIVE,
            InvestigationStatus.FAILED,
        ):
            return incident
        if time.monotonic() > deadline:
            _fail(f"the investigation did not finish within {timeout:.0f} s", code=EXIT_FAILED)
        time.sleep(0.1)


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


def cmd_demo(settings: Settings, args: argparse.Namespace) -> None:
    """Replay a recorded incident through the real service on embedded defaults: the recorded
    Prometheus answers are served by a loopback replay (rca/collect/replay.py), the sample alert
    is posted to the real webhook, investigated in-process and read back through the API."""
    import httpx
    import uvicorn

    from rca.collect.replay import Recording, ReplayServer
    from rca.intake.service import investigate_again
    from rca.jobs.dispatch import create_dispatcher
    from rca.pages.site import create_site
    from rca.report import no_data_reason, render, use_colour, written_by
    from rca.store.db import session_scope

    _report_logging()
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
        _prepare_database(settings)
        if args.port:
            _can_listen("127.0.0.1", args.port)
        port = args.port or _free_port()
        dispatcher = create_dispatcher(settings)  # the demo's own, to investigate its incident again
        site = create_site(settings, dispatcher)
        server = uvicorn.Server(uvicorn.Config(site, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 10
            while not server.started:
                if time.monotonic() > deadline or not thread.is_alive():
                    _fail(f"the service did not start on 127.0.0.1:{port}", code=EXIT_FAILED)
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
            reply = httpx.post(
                f"{base}/api/v1/alertmanager",
                json=payload,
                headers={"Authorization": f"Bearer {webhook_token}"},
                timeout=10,
            )
            if reply.status_code >= 400:
                _fail(f"the webhook refused the payload: HTTP {reply.status_code}: {answer_line(reply.text)}")
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
            auth = {"Authorization": f"Bearer {api_token}"}
            incident = _wait_for_investigation(base, incident_id, auth, timeout=60, investigation_id=investigation_id)
            inv = incident["investigation"]
            print(
                f"GET /api/v1/incidents/{incident_id} -> investigation {inv['status']} "
                f"in {inv['total_seconds'] or 0:.1f} s\n"
            )
            if inv["status"] == InvestigationStatus.FAILED:  # inconclusive is the report's "no data"
                why = answer_line(inv.get("error") or "no error recorded", limit=300)
                _fail(f"investigation failed: {why}", code=EXIT_FAILED)
            alert = incident["alerts"][0] if incident["alerts"] else {}
            since = datetime.fromisoformat(alert["starts_at"]).strftime(" (firing since %H:%M:%S UTC)") if alert else ""
            print(f"Incident {incident_id}: {incident['title']}{since}")
            stored = inv.get("target") or {}
            named = ({"host": stored["host"]} if stored.get("host") else {}) | stored.get("labels", {})
            target = " ".join(f"{k}={v}" for k, v in named.items()) or "-"
            no_data = no_data_reason(inv["findings"], inv.get("error"))
            print(render(target, inv["findings"], inv["hypotheses"], colour=use_colour(sys.stdout), no_data=no_data))
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


def cmd_investigate_again(settings: Settings, args: argparse.Namespace) -> None:
    """Queue a new investigation of a stored incident now, as `POST /api/v1/incidents/{id}/investigations`
    does: on RCA_BROKER_URL's queue, or, without a broker, for the running `rca serve` to sweep."""
    from rca.intake.service import investigate_again
    from rca.jobs.dispatch import CeleryDispatcher
    from rca.store.db import session_scope

    if not 1 <= args.incident_id <= 2**31 - 1:
        _fail(f"INCIDENT_ID: {args.incident_id} is not an incident id (1 to {2**31 - 1})")
    by = args.by.strip()
    if not by or len(by) > 128:
        _fail("--by: give 1 to 128 characters")
    _prepare_database(settings)
    with session_scope(settings.effective_database_url) as session:
        requested = investigate_again(session, args.incident_id, requested_by=by)
    if requested is None:
        _fail(f"no incident {args.incident_id}", code=EXIT_FAILED)
    which = f"investigation {requested.investigation_id} of incident {args.incident_id}"
    if not requested.created:
        print(f"{which} is already {requested.status}; no other queued")
        return
    if settings.embedded_queue:
        soon = settings.sweep_after_seconds + settings.sweep_interval_seconds
        print(f"{which} queued; the running `rca serve` starts it within about {soon:.0f} s (its sweep)")
        return
    dispatcher = CeleryDispatcher(settings)
    try:
        enqueued = dispatcher.enqueue(requested.investigation_id)
    finally:
        dispatcher.close()
    where = "sent to RCA_BROKER_URL" if enqueued else "the broker refused it; the sweeper enqueues it"
    print(f"{which} queued ({where})")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default (unless it is unset or the help already says it), and keeps
    the epilog's line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        shown = not (default is None or default is False or default is argparse.SUPPRESS or isinstance(default, list))
        if shown and "default" not in text and (action.option_strings or action.nargs in ("?", "*")):
            text += " (default: %(default)s)"
        return text


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llm-serving-rca")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, as every other error of `rca` (exit 2), naming the help to read."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rca",
        description=textwrap.fill(__doc__ or "", 79),
        formatter_class=_HelpFormatter,
        epilog="Settings come from RCA_* environment variables (see docs/configuration.md).\n\n" + EXIT_CODES,
    )
    parser.add_argument("-V", "--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=help_,
            description=textwrap.fill(description, 79),
            formatter_class=_HelpFormatter,
            epilog=EXIT_CODES,
        )

    serve = command(
        "serve",
        "run the HTTP service (webhook + search API)",
        "Serve the Alertmanager webhook and the search API. Without RCA_BROKER_URL investigations "
        "run in-process; without RCA_DATABASE_URL the store is SQLite under RCA_DATA_DIR.",
    )
    serve.add_argument("--host", help="listen address (default: RCA_HOST, else 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default: RCA_PORT, else 8080)")
    serve.add_argument(
        "--workers",
        type=int,
        help="server processes sharing the port (default: one per CPU with RCA_BROKER_URL, else 1: the embedded "
        "queue runs in the one process)",
    )
    serve.set_defaults(func=cmd_serve)

    worker = command(
        "worker",
        "run the Celery workers for investigations and Slack, and the scheduler",
        "Consume investigations and Slack deliveries from RCA_BROKER_URL, each queue with a Celery "
        "worker process of its own; with the scheduler, also re-enqueue investigations whose enqueue "
        "was lost or whose worker died, and Slack notices still owed (one scheduler sweeps at a time).",
    )
    worker.add_argument("--concurrency", type=int, default=2, help="investigations run at once")
    worker.add_argument(
        "--slack-concurrency", type=int, default=2, help="Slack deliveries at once (a pool of their own)"
    )
    worker.add_argument("--hostname", default="rca@%h", help="Celery node name (%%h: this host's name)")
    worker.add_argument(
        "--queues",
        default="investigations,slack",
        help="comma-separated queues to consume, a Celery worker process each (Slack deliveries have their own)",
    )
    worker.add_argument("--no-beat", action="store_true", help="do not run the scheduler (the sweeper)")
    worker.add_argument("--role", choices=["consumer"], help=argparse.SUPPRESS)
    worker.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    worker.set_defaults(func=cmd_worker)

    beat = command(
        "beat",
        "run the scheduler alone",
        "Sweep every RCA_SWEEP_INTERVAL_SECONDS: re-enqueue investigations whose enqueue was lost or "
        "whose worker died, and Slack notices still owed. Any number may run: one holds the lock "
        "and sweeps, the others stand by. `rca worker` runs one itself unless --no-beat.",
    )
    beat.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    beat.set_defaults(func=cmd_beat)

    mig = command(
        "migrate",
        "create or upgrade the database schema",
        "Run the Alembic migrations on RCA_DATABASE_URL (or the embedded SQLite file).",
    )
    mig.add_argument("revision", nargs="?", default="head", help="Alembic revision to migrate to")
    mig.set_defaults(func=cmd_migrate)

    inv = command(
        "investigate",
        "run one investigation now and print the ranked result",
        "Investigate one alert now, without the service: collect the window from RCA_PROMETHEUS_URL, "
        "judge the signals, rank the causes and print them (nothing is stored). Exits 3 when "
        "nothing could be measured.",
    )
    inv.add_argument("payload", nargs="?", help="Alertmanager webhook payload (JSON file)")
    inv.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="alert label, repeatable (instead of a payload)",
    )
    inv.add_argument(
        "--start",
        metavar="TIME",
        help="alert start with --label, ISO 8601 such as 2026-12-03T08:40:00Z; UTC unless an "
        "offset is given (default: now)",
    )
    inv.add_argument("--json", action="store_true", help="machine-readable output")
    inv.set_defaults(func=cmd_investigate)

    again = command(
        "investigate-again",
        "queue a new investigation of a stored incident now",
        "Investigate a stored incident again now, firing or resolved (after fixing RCA_PROMETHEUS_URL, "
        "say), beside its earlier investigations: on RCA_BROKER_URL's queue, or, without a broker, for "
        "the running `rca serve` to start. One already queued or running is named instead. Exits 1 "
        "when there is no such incident.",
    )
    again.add_argument("incident_id", type=int, metavar="INCIDENT_ID", help="the incident's id, as the API shows it")
    again.add_argument(
        "--by", default="cli", metavar="NAME", help="who asks, recorded as the investigation's requested_by"
    )
    again.set_defaults(func=cmd_investigate_again)

    backtest = command(
        "backtest",
        "replay the early-warning scan over Prometheus history",
        "Run the fleet scan at every RCA_SCAN_INTERVAL_SECONDS of the past (same queries, forecasts "
        "and states as live, nothing written unless --store) and report each warning, its lead time "
        "before the TTFT SLO breach over the same history, the breaches it missed and the warnings no "
        "breach followed.",
    )
    backtest.add_argument("--since", required=True, type=parse_duration, help="how far back: 90m, 6h, 7d")
    backtest.add_argument("--until", type=parse_duration, help="stop this long before now (default: now)")
    backtest.add_argument("--target", help="one serving instance (host:port) instead of the whole fleet")
    backtest.add_argument("--json", action="store_true", help="print the result as JSON")
    backtest.add_argument(
        "--store",
        action="store_true",
        help="store each warning as a resolved incident of origin backtest, with its transitions, in "
        "RCA_DATABASE_URL (never posted to Slack, not investigated); warnings stored before are skipped",
    )
    backtest.set_defaults(func=cmd_backtest)

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
    demo.set_defaults(func=cmd_demo)

    gpu = command(
        "gpu-probe",
        "serve this host's NVML GPU metrics (GPM included) for Prometheus",
        "Sample NVML on this GPU host and serve it as Prometheus metrics (GPM counters included, "
        "which no standard exporter publishes). Exits 3 without an NVIDIA GPU.",
    )
    gpu.add_argument("--host", default="127.0.0.1", help="listen address")
    gpu.add_argument("--port", type=int, default=9835, help="listen port")
    gpu.add_argument("--interval", type=float, default=5.0, help="seconds between NVML samples")
    gpu.add_argument("--once", action="store_true", help="print one sample as Prometheus text and exit")
    gpu.set_defaults(func=cmd_gpu_probe)

    token = command(
        "token",
        "create or revoke a named API token (read or write scope)",
        "Manage named API tokens in the database; only their hashes are stored.",
    )
    token_sub = token.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = token_sub.add_parser(
        "create",
        help="print a new token; only its hash is stored",
        description="Create a token and print it once.",
        formatter_class=_HelpFormatter,
    )
    create.add_argument("--name", required=True, help="who or what uses it; recorded as the author of feedback")
    create.add_argument(
        "--scope",
        choices=["read", "write"],
        default="read",
        help="read: search and statistics; write: also feedback and investigating again",
    )
    revoke = token_sub.add_parser(
        "revoke",
        help="stop a token from working",
        description="Revoke a live token by name.",
        formatter_class=_HelpFormatter,
    )
    revoke.add_argument("--name", required=True, help="the token's name, as given to create")
    token.set_defaults(func=cmd_token)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        settings = checked_settings()
    except ConfigError as exc:
        _fail(str(exc))
    _setup_logging(settings)
    try:
        args.func(settings, args)
    except ConfigError as exc:
        _fail(str(exc))
    except BrokenPipeError:  # `rca demo | head`: the reader left; no traceback for that
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(EXIT_FAILED) from None


if __name__ == "__main__":
    main()
