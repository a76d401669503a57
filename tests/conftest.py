"""Shared fixtures: a fresh PostgreSQL database per session, an embedded SQLite store, Redis, a
stub Prometheus, Alertmanager payload builders and helpers to count what got stored.

PostgreSQL and Redis are required: when either is absent the tests that need it fail with a
message saying so, they are never skipped. Override the locations with TEST_POSTGRES_ADMIN_URL
(a database we may connect to in order to create and drop others) and TEST_REDIS_URL.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
import redis
from celery import Celery
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from rca.api.app import create_app
from rca.config import Settings, get_settings, load_settings
from rca.store.db import get_engine, migrate
from rca.store.models import Alert, Finding, Hypothesis, Incident, Investigation, Notification
from tests.e2e.promstack import free_port
from tests.loopback import LoopbackServer

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"
PG_ADMIN_URL = os.environ.get("TEST_POSTGRES_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/test")
# A URL with a database number pins it; otherwise the session claims a spare, empty one.
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379")
REDIS_DB_PREFERENCE = (11, 12, 13, 14, 15, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
REDIS_CLAIM_KEY = "rca-tests:claimed-by"
CLOSED_PORT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:1/x"
CLOSED_PORT_BROKER_URL = "redis://127.0.0.1:1/0"

WEBHOOK_TOKEN = "webhook-secret-for-tests"
API_TOKEN = "api-secret-for-tests"
WEBHOOK_AUTH = {"Authorization": f"Bearer {WEBHOOK_TOKEN}"}
API_AUTH = {"Authorization": f"Bearer {API_TOKEN}"}

# Children first, so that deleting on SQLite never trips a foreign key.
TABLES = ("hypotheses", "findings", "notifications", "alerts", "investigations", "incidents")
SLACK_TABLES = ("slack_attempts", "slack_deliveries")  # emptied too, before the incidents they point at
# Tables that hang off no incident and so survive a cascade from `incidents`.
STANDALONE_TABLES = ("api_tokens",)
MODELS = {"incidents": Incident, "alerts": Alert, "notifications": Notification,
          "investigations": Investigation, "findings": Finding, "hypotheses": Hypothesis}


# --------------------------------------------------------------------------- environment


@pytest.fixture(scope="session", autouse=True)
def _hermetic_environment() -> Iterator[None]:
    """Settings come from each test, never from the developer's shell."""
    mp = pytest.MonkeyPatch()
    for name in list(os.environ):
        if name.startswith("RCA_"):
            mp.delenv(name)
    get_settings.cache_clear()
    yield
    mp.undo()
    get_settings.cache_clear()


def subprocess_env(**rca: str) -> dict[str, str]:
    """A clean environment for a child process: no inherited RCA_* settings, only the given ones."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCA_")}
    env.update({f"RCA_{k.upper()}": v for k, v in rca.items()})
    return env


def stop_process(proc: subprocess.Popen[Any], timeout: float = 15) -> None:
    """Terminate one process we started, by its pid; kill it if it does not go."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


@dataclass
class Worker:
    """A running `rca worker` child process and a Celery client of its broker (to send it tasks)."""

    process: subprocess.Popen[bytes]
    app: Celery
    log: Path
    broker: str

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@contextmanager
def running_worker(home: Path, env: dict[str, str], app: Celery, broker: str, name: str) -> Iterator[Worker]:
    """`rca worker --no-beat --concurrency 1` in `home`, yielded once it answers a ping, stopped by
    its pid afterwards; its output goes to `home/worker.log` for failure messages. Its metrics port
    is off unless `env` sets RCA_WORKER_METRICS_PORT."""
    log = home / "worker.log"
    hostname = f"{name}-{uuid.uuid4().hex[:8]}@127.0.0.1"
    env = {"RCA_WORKER_METRICS_PORT": "0", **env}  # parallel sessions would fight over 9808; tests that want it set it
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(VENV_BIN / "rca"), "worker", "--no-beat", "--concurrency", "1", "--hostname", hostname],
            cwd=home, env=env, stdout=sink, stderr=subprocess.STDOUT,
        )
    worker = Worker(process, app, log, broker)
    try:
        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"rca worker exited with {process.returncode}:\n{worker.output()}")
            return bool(app.control.ping(destination=[hostname], timeout=0.5))

        wait_for(ready, 45, "the Celery worker to answer a ping", interval=0.2)
        yield worker
    finally:
        stop_process(process)
        app.close()


# --------------------------------------------------------------------------- databases


def _admin_connect() -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        error = str(exc).strip()
    pytest.fail(f"PostgreSQL is required for these tests and is not reachable at {PG_ADMIN_URL}: {error}",
                pytrace=False)


def create_database() -> str:
    """Create an empty database with a random name; returns its SQLAlchemy URL."""
    name = f"rca_test_{uuid.uuid4().hex[:12]}"
    with _admin_connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    admin = urlsplit(PG_ADMIN_URL)
    return f"postgresql+psycopg://{admin.netloc}/{name}"


def drop_database(url: str) -> None:
    engine = get_engine(url)
    engine.dispose()
    name = url.rsplit("/", 1)[1]
    with _admin_connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for the whole session, dropped at the end."""
    url = create_database()
    try:
        migrate(url)
        yield url
    finally:
        drop_database(url)


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The embedded default: a migrated SQLite file."""
    url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'rca.db'}"
    migrate(url)
    return url


def truncate(url: str) -> None:
    with get_engine(url).begin() as conn:
        tables = SLACK_TABLES + TABLES + STANDALONE_TABLES
        if url.startswith("postgresql"):
            conn.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
        else:
            for table in tables:
                conn.execute(text(f"DELETE FROM {table}"))


@pytest.fixture
def pg_db(pg_url: str) -> str:
    """The session's PostgreSQL database, emptied for this test."""
    truncate(pg_url)
    return pg_url


@pytest.fixture(params=["postgresql", "sqlite"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each backend in turn, emptied for this test."""
    url = request.getfixturevalue("pg_url" if request.param == "postgresql" else "sqlite_url")
    truncate(url)
    return url


def count_rows(url: str) -> dict[str, int]:
    with get_engine(url).connect() as conn:
        return {table: conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() for table in TABLES}


def scalar(url: str, query: Any) -> Any:
    with get_engine(url).connect() as conn:
        return conn.execute(query).scalar()


def rows(url: str, query: Any) -> list[Any]:
    with get_engine(url).connect() as conn:
        return list(conn.execute(query).all())


def investigation_rows(url: str) -> list[Any]:
    return rows(url, select(Investigation.__table__).order_by(Investigation.id))


def count_for(url: str, model: type, **where: Any) -> int:
    query = select(func.count()).select_from(model)
    for name, value in where.items():
        query = query.where(getattr(model, name) == value)
    return scalar(url, query)


# --------------------------------------------------------------------------- redis


def claim_redis_db(pinned_offset: int = 0) -> tuple[str, redis.Redis]:
    """The pinned database (plus `pinned_offset`, so that two workers of one session get two), or
    the first empty one we can mark as ours (so that concurrent test sessions, each with its own
    worker consuming the same queue name, never share a broker)."""
    parts = urlsplit(REDIS_URL)
    pinned = parts.path.strip("/")
    candidates = [(int(pinned) + pinned_offset) % 16] if pinned else list(REDIS_DB_PREFERENCE)
    token = uuid.uuid4().hex
    for db in candidates:
        url = parts._replace(path=f"/{db}").geturl()
        client = redis.Redis.from_url(url, socket_connect_timeout=3)
        try:
            client.ping()
        except redis.RedisError as exc:
            error = str(exc)
        else:
            error = None
        if error is not None:
            pytest.fail(f"Redis is required for these tests and is not reachable at {url}: {error}", pytrace=False)
        if pinned:
            client.flushdb()
            return url, client
        if client.dbsize() == 0 and client.set(REDIS_CLAIM_KEY, token, nx=True, ex=900):
            return url, client
        client.close()
    pytest.fail(f"no empty Redis database to use at {REDIS_URL} (tried {candidates}); set TEST_REDIS_URL",
                pytrace=False)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis database of our own for the Celery broker, flushed at the end of the session."""
    url, client = claim_redis_db()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


# --------------------------------------------------------------------------- settings and apps


def make_settings(database_url: str, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "data_dir": tmp_path / "rca-data",
        "webhook_token": WEBHOOK_TOKEN,
        "api_tokens": API_TOKEN,
        "prometheus_url": None,
    }
    values.update(overrides)
    return load_settings(**values)


class RecordingDispatcher:
    """Records what intake asked to enqueue, and runs nothing: for tests of intake alone."""

    def __init__(self) -> None:
        self.enqueued: list[int] = []
        self.notified: list[tuple[int, str]] = []

    def enqueue(self, investigation_id: int) -> bool:
        self.enqueued.append(investigation_id)
        return True

    def notify(self, incident_id: int, event: str) -> bool:
        self.notified.append((incident_id, event))
        return True

    def close(self) -> None:
        pass


@pytest.fixture
def recorder() -> RecordingDispatcher:
    return RecordingDispatcher()


@pytest.fixture
def intake_client(db_url: str, tmp_path: Path, recorder: RecordingDispatcher) -> Iterator[TestClient]:
    """The app on each backend, with a dispatcher that only records."""
    with TestClient(create_app(make_settings(db_url, tmp_path), dispatcher=recorder)) as client:
        yield client


# --------------------------------------------------------------------------- payloads


def sample_payload() -> dict[str, Any]:
    return json.loads(resources.files("rca.samples").joinpath("alertmanager_queue_high.json").read_text())


def make_alert(fingerprint: str, *, status: str = "firing", alertname: str = "LLMRequestQueueMedianHigh",
               instance: str = "gpu-node-1:8000", starts_at: datetime | None = None,
               **labels: str) -> dict[str, Any]:
    starts = starts_at or datetime.now(UTC) - timedelta(minutes=5)
    ends = "0001-01-01T00:00:00Z" if status == "firing" else datetime.now(UTC).isoformat()
    return {
        "status": status,
        "labels": {"alertname": alertname, "instance": instance, "job": "vllm", **labels},
        "annotations": {"summary": f"{alertname} on {instance}"},
        "startsAt": starts.isoformat(),
        "endsAt": ends,
        "generatorURL": "http://prometheus.example:9090/graph",
        "fingerprint": fingerprint,
    }


def make_payload(group_key: str = "{}:{alertname=\"LLMRequestQueueMedianHigh\"}", *,
                 alerts: list[dict[str, Any]] | None = None, status: str | None = None) -> dict[str, Any]:
    """A version 4 notification; its status is `firing` if any alert fires, as Alertmanager does."""
    alerts = copy.deepcopy(alerts) if alerts is not None else [make_alert("fp-0001")]
    if status is None:
        status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    common = dict(alerts[0]["labels"])
    for alert in alerts[1:]:
        common = {k: v for k, v in common.items() if alert["labels"].get(k) == v}
    return {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "llm-rca",
        "groupLabels": {"alertname": alerts[0]["labels"]["alertname"]},
        "commonLabels": common,
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example:9093",
        "alerts": alerts,
    }


def post_webhook(client: Any, payload: Any, headers: dict[str, str] | None = None) -> Any:
    return client.post("/api/v1/alertmanager", json=payload, headers=WEBHOOK_AUTH if headers is None else headers)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def wait_for_investigation(client: TestClient, incident_id: int, timeout: float = 30) -> dict[str, Any]:
    """Poll the API until the incident's latest investigation is done or failed."""

    def finished() -> dict[str, Any] | None:
        reply = client.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH)
        assert reply.status_code == 200, reply.text
        inv = reply.json()["investigation"]
        return reply.json() if inv and inv["status"] in ("done", "failed") else None

    return wait_for(finished, timeout, f"the investigation of incident {incident_id}")


# --------------------------------------------------------------------------- stub Prometheus


class StubPrometheus(LoopbackServer):
    """A loopback HTTP server speaking enough of Prometheus' query API for a collection: every
    probe finds series and every range query returns one flat series."""

    VALUE = "0.5"

    def __init__(self) -> None:
        self.queries: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("content-length") or 0)
                params = parse_qs(parts.query) | parse_qs(self.rfile.read(length).decode())
                query = params.get("query", [""])[0]
                stub.queries.append(query)
                now = time.time()
                if parts.path.endswith("/query_range"):
                    start, end = float(params["start"][0]), float(params["end"][0])
                    step = float(params["step"][0].rstrip("s"))
                    count = int((end - start) // step) + 1
                    values = [[start + i * step, stub.VALUE] for i in range(count)]
                    data = {"resultType": "matrix", "result": [{"metric": {"instance": "gpu-node-1:8000"},
                                                                "values": values}]}
                elif parts.path.endswith("/query"):
                    data = {"resultType": "vector", "result": [{"metric": {}, "value": [now, "1"]}]}
                else:
                    self.send_error(404)
                    return
                body = json.dumps({"status": "success", "data": data}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler, name="stub-prometheus")
        self.url = self.base


@pytest.fixture(scope="session")
def prometheus() -> Iterator[StubPrometheus]:
    with StubPrometheus() as stub:
        yield stub


class LiveServer:
    """The app under a real uvicorn on a free loopback port, in a thread of this process."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        wait_for(lambda: self.server.started or not self.thread.is_alive(), 10, "uvicorn to start", 0.02)
        assert self.server.started, "uvicorn did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
