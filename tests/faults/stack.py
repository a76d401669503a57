"""The service as the fault tests run it: the real `rca serve` (Celery mode) and `rca worker`
processes on the private PostgreSQL and Redis (tests/faults/services.py), a fake Slack and a stub
Prometheus at loopback, with the time settings compressed (a 3 s lease, a sweep every second) so
that a takeover is measured in seconds. Shared by the fault tests and `bench/faults.py`."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Self

import httpx

from rca.jobs.celery_app import create_app as create_celery_app
from rca.store.db import get_engine, migrate
from tests.e2e.promstack import free_port
from tests.fakes.prometheus import StubPrometheus
from tests.fakes.slack import TOKEN, FakeSlack
from tests.faults.ledger import Audit, Burst, audit
from tests.faults.services import PrivatePostgres, PrivateRedis
from tests.helpers.databases import truncate
from tests.helpers.paths import VENV_BIN
from tests.helpers.payloads import make_alert, make_payload
from tests.helpers.processes import Worker, running_worker, stop_process, subprocess_env, wait_until_serving
from tests.helpers.service import API_TOKEN, WEBHOOK_AUTH, WEBHOOK_TOKEN, make_settings
from tests.helpers.slack import CHANNEL

# Seconds, compressed from the defaults (30 s lease, 15 s sweep, 60 s grace) so that a crash is
# taken over within seconds: the bound the tests assert is still the documented minute.
COMPRESSED = {
    "investigation_lease_seconds": "3",
    "sweep_interval_seconds": "1",
    "sweep_after_seconds": "5",
    "slack_retry_backoff_seconds": "0.2",
    "investigation_max_attempts": "2",
}
WORKER_OPTIONS = ("--concurrency", "2", "--slack-concurrency", "1")
WORKER_START_TIMEOUT = 120  # seconds; three processes importing Celery and the service on a loaded machine
DUPLICATES_GRACE = 2.0  # seconds to wait after everything settled: a duplicate post would come by now


class FaultStack:
    """`with FaultStack(home, postgres, redis, slack, prometheus) as stack:` migrates a database of
    the private cluster and starts `rca serve` on it; `stack.worker(...)` starts an `rca worker`."""

    def __init__(
        self,
        home: Path,
        postgres: PrivatePostgres,
        redis: PrivateRedis,
        slack: FakeSlack,
        prometheus: StubPrometheus,
        **settings: str,
    ) -> None:
        self.home, self.postgres, self.redis, self.slack, self.prometheus = home, postgres, redis, slack, prometheus
        self.settings = COMPRESSED | settings
        self.db_url = ""
        self.base = ""
        self.serve: subprocess.Popen[bytes] | None = None
        self._client: httpx.Client | None = None

    def __enter__(self) -> Self:
        self.db_url = self.postgres.create_database("rca_faults")
        migrate(self.db_url)
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        with (self.home / "serve.log").open("wb") as sink:
            self.serve = subprocess.Popen(
                [str(VENV_BIN / "rca"), "serve", "--port", str(port)],
                cwd=self.home,
                env=self.env(log_level="WARNING"),
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        wait_until_serving(self.base, self.serve)
        self._client = httpx.Client(base_url=self.base, headers=WEBHOOK_AUTH, timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._client is not None:
            self._client.close()
        if self.serve is not None:
            stop_process(self.serve)
        get_engine(self.db_url).dispose()

    def env(self, **overrides: str) -> dict[str, str]:
        """The environment of `rca serve` and `rca worker`: the private servers, the fakes."""
        values = {
            "database_url": self.db_url,
            "broker_url": self.redis.url,
            "prometheus_url": self.prometheus.url,
            "scan_enabled": "false",  # the audits count alert incidents; tests/scan tests the scan
            "data_dir": str(self.home / "rca-data"),
            "webhook_token": WEBHOOK_TOKEN,
            "api_tokens": API_TOKEN,
            "log_level": "INFO",
            "slack_bot_token": TOKEN,
            "slack_channel": CHANNEL,
            "slack_api_url": self.slack.api_url,
            "public_url": "https://rca.example",
        }
        return subprocess_env(**(values | self.settings | overrides))

    def reset(self) -> None:
        """A clean slate for the next test: empty tables, queues, Slack, a prompt Prometheus."""
        truncate(self.db_url)
        self.redis.flush()
        self.slack.reset()
        self.prometheus.delay = 0.0
        self.prometheus.queries.clear()

    def worker(
        self, name: str, options: tuple[str, ...] = WORKER_OPTIONS, log_name: str | None = None, **env: str
    ) -> AbstractContextManager[Worker]:
        """`rca worker` (both consumers and the scheduler unless `options` say otherwise), yielded
        once it answers a ping, stopped by its pid at the end (if it still runs)."""
        settings = make_settings(self.db_url, self.home, broker_url=self.redis.url)
        app = create_celery_app(settings)
        log = log_name or f"{name}.log"
        return running_worker(self.home, self.env(**env), app, self.redis.url, name, options, log, WORKER_START_TIMEOUT)

    def post(self, group_key: str) -> tuple[int, dict[str, Any]]:
        """One webhook of a new alert group: its HTTP status (0: no answer) and body."""
        assert self._client is not None
        payload = make_payload(group_key, alerts=[make_alert(f"fp-{group_key}")])
        try:
            reply = self._client.post("/api/v1/alertmanager", json=payload)
        except httpx.HTTPError:
            return 0, {}
        body = reply.json() if reply.headers.get("content-type", "").startswith("application/json") else {}
        if reply.status_code == 503:
            assert reply.headers.get("Retry-After"), f"a 503 without Retry-After: {reply.text}"
        return reply.status_code, body

    def send(self, label: str, count: int, before: Callable[[int], None] | None = None) -> Burst:
        """`count` webhooks of new groups `label-0`, `label-1`, ...; `before(n)` runs ahead of the
        n-th (to break something mid-burst)."""
        burst = Burst()
        for n in range(count):
            if before is not None:
                before(n)
            key = f"{label}-{n}"
            status, body = self.post(key)
            if 200 <= status < 300:
                burst.accepted[key] = body["incident_id"]
            else:
                burst.refused[key] = status
        return burst

    def resend_refused(self, burst: Burst, attempts: int = 20) -> None:
        """What Alertmanager does with a refused notification: send it again until it is taken."""
        for _ in range(attempts):
            if not burst.refused:
                return
            again = Burst()
            for key in list(burst.refused):
                status, body = self.post(key)
                if 200 <= status < 300:
                    again.accepted[key] = body["incident_id"]
                else:
                    again.refused[key] = status
            burst.merge(again)
            if burst.refused:
                time.sleep(1)
        raise AssertionError(f"still refused after {attempts} rounds: {burst.refused}")

    def wait(self, burst: Burst, timeout: float) -> Audit:
        """Wait until every accepted alert of `burst` is investigated and posted (or `timeout`
        seconds passed), then a little more for any duplicate; the audit then."""
        deadline = time.monotonic() + timeout
        while not audit(self.db_url, self.slack, burst).settled and time.monotonic() < deadline:
            time.sleep(0.25)
        time.sleep(DUPLICATES_GRACE)
        return audit(self.db_url, self.slack, burst)

    def settle(self, burst: Burst, timeout: float, what: str = "every accepted alert") -> Audit:
        """`wait`, failing with what is still missing when it times out."""
        report = self.wait(burst, timeout)
        if not report.settled:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}: {report.problems()}")
        return report


@contextmanager
def fault_stack(home: Path, postgres: PrivatePostgres, redis: PrivateRedis) -> Iterator[FaultStack]:
    """The fakes and `rca serve` on servers already started."""
    with (
        FakeSlack() as slack,
        StubPrometheus() as prometheus,
        FaultStack(home, postgres, redis, slack, prometheus) as s,
    ):
        try:
            yield s
        finally:
            slack.delay = prometheus.delay = 0.0  # let a waiting request go before the servers stop
