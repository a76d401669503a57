#!/usr/bin/env python3
"""Production-install smoke test: install the project as production does and run it for real.

A fresh venv gets `pip install <source>` (non-editable, no extras), then on a fresh Postgres
database and a spare Redis database: `rca migrate`, `rca serve` and `rca worker` as real
processes, `/readyz` 200, one Alertmanager webhook enqueued and investigated to `done` against a
stub Prometheus, plus `rca token`, `rca investigate`, `rca gpu-probe` and `rca demo`.

Why a script and not a test: the test extra (pytest and its dependencies) hides modules that the
package imports without declaring them, so this must run before, and without, the test extra.
It uses only the standard library, `psql` and `redis-cli`, so nothing it imports can mask a
dependency the install lacks. Every failure exits non-zero with one `smoke: FAILED ...` line
and the logs of the processes involved.

    python3 .ci/smoke_install.py [--source DIR] [--label NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

REPO = Path(__file__).resolve().parents[1]
PG_ADMIN_URL = os.environ.get("TEST_POSTGRES_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379")
# The same claim protocol as tests/helpers/brokers.py, so that parallel test sessions never share a broker.
REDIS_DB_PREFERENCE = (11, 12, 13, 14, 15, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
REDIS_CLAIM_KEY = "rca-tests:claimed-by"
INVESTIGATION_TIMEOUT = 120.0
START_TIMEOUT = 60.0
# Every module of the installed distribution imports (some are loaded only lazily at run time).
IMPORT_ALL = """
import importlib, pkgutil, sys
failed = []
for top in ("rca", "workers", "rca_migrations", "rca_prompts"):
    package = importlib.import_module(top)
    assert "site-packages" in package.__file__, f"{top} imported from {package.__file__}, not the install"
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        if info.name == "rca_migrations.env":  # runs only inside Alembic (`rca migrate` covers it)
            continue
        try:
            importlib.import_module(info.name)
        except Exception as exc:
            failed.append(f"{info.name}: {type(exc).__name__}: {exc}")
# Transports and pools that kombu and celery import only when a worker or a broker check starts.
for name in ("kombu.transport.redis", "celery.concurrency.prefork", "celery.apps.beat",
             "uvicorn.protocols.http.h11_impl"):
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


class SmokeFailure(Exception):
    """One check failed; the message says which, `logs` carries what the processes printed."""

    def __init__(self, message: str, logs: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.logs = logs or {}


STARTED = time.monotonic()


def say(message: str) -> None:
    print(f"smoke [{time.monotonic() - STARTED:5.1f} s]: {message}", flush=True)


def run(
    argv: list[str],
    what: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
    ok: tuple[int, ...] = (0,),
) -> subprocess.CompletedProcess[str]:
    """Run a command to completion; a return code outside `ok` is a failure with its output."""
    try:
        done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise SmokeFailure(
            f"{what}: did not finish within {timeout:g} s", {what: f"{exc.stdout or ''}{exc.stderr or ''}"}
        ) from None
    if done.returncode not in ok:
        raise SmokeFailure(f"{what}: exited with {done.returncode}", {what: done.stdout + done.stderr})
    return done


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------- Postgres and Redis


@contextmanager
def fresh_database() -> Iterator[str]:
    """An empty Postgres database with a random name, dropped afterwards; yields its SQLAlchemy URL."""
    name = f"rca_smoke_{secrets.token_hex(6)}"
    run(
        ["psql", PG_ADMIN_URL, "-v", "ON_ERROR_STOP=1", "-qc", f'CREATE DATABASE "{name}"'],
        f"creating database {name} at {PG_ADMIN_URL}",
        timeout=30,
    )
    try:
        yield f"postgresql+psycopg://{urlsplit(PG_ADMIN_URL).netloc}/{name}"
    finally:
        run(
            ["psql", PG_ADMIN_URL, "-qc", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'],
            f"dropping database {name}",
            timeout=30,
        )


def redis_cli(db: int, *args: str) -> str:
    parts = urlsplit(REDIS_URL)
    argv = ["redis-cli", "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 6379), "-n", str(db), *args]
    return run(argv, f"redis-cli {' '.join(args)}", timeout=10).stdout.strip()


@contextmanager
def spare_redis_db() -> Iterator[str]:
    """An empty Redis database marked as ours (see tests/helpers/brokers.py), flushed afterwards."""
    token = secrets.token_hex(8)
    for db in REDIS_DB_PREFERENCE:
        if redis_cli(db, "DBSIZE") == "0" and redis_cli(db, "SET", REDIS_CLAIM_KEY, token, "NX", "EX", "900") == "OK":
            break
    else:
        raise SmokeFailure(f"no empty Redis database at {REDIS_URL} (tried {list(REDIS_DB_PREFERENCE)})")
    parts = urlsplit(REDIS_URL)
    try:
        yield f"redis://{parts.hostname or '127.0.0.1'}:{parts.port or 6379}/{db}"
    finally:
        redis_cli(db, "FLUSHDB")


# --------------------------------------------------------------------------- stub Prometheus


class StubPrometheus:
    """Enough of Prometheus' query API on loopback for a collection: every probe finds series and
    every range query returns one flat series, so the worker's whole query path really runs."""

    def __init__(self) -> None:
        self.queries = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("content-length") or 0)
                params = parse_qs(parts.query) | parse_qs(self.rfile.read(length).decode())
                stub.queries += 1
                if parts.path.endswith("/query_range"):
                    start, end = float(params["start"][0]), float(params["end"][0])
                    step = float(params["step"][0].rstrip("s"))
                    values = [[start + i * step, "0.5"] for i in range(int((end - start) // step) + 1)]
                    data: dict[str, Any] = {
                        "resultType": "matrix",
                        "result": [{"metric": {"instance": "gpu-node-1:8000"}, "values": values}],
                    }
                elif parts.path.endswith("/query"):
                    data = {"resultType": "vector", "result": [{"metric": {}, "value": [time.time(), "1"]}]}
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

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> StubPrometheus:
        threading.Thread(target=self.server.serve_forever, name="stub-prometheus", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# --------------------------------------------------------------------------- processes


class Service:
    """A long-running `rca` process with its output in a log file, stopped by its pid (its process
    group too: the worker's pool and beat children must not outlive the test)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], home: Path) -> None:
        self.name = name
        self.log = home / f"{name}.log"
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                argv, env=env, cwd=home, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def check_alive(self, logs: Callable[[], dict[str, str]]) -> None:
        if self.process.poll() is not None:
            raise SmokeFailure(f"`rca {self.name}` exited with {self.process.returncode}", logs())

    def stop(self, timeout: float = 20) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
        with suppress(ProcessLookupError):  # children left behind in the group this process led
            os.killpg(self.process.pid, signal.SIGKILL)


def http(method: str, url: str, token: str | None = None, body: Any = None, timeout: float = 10) -> tuple[int, Any]:
    """(status, parsed JSON or text); connection errors come back as status 0."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            status, raw = reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def wait_until(
    check: Callable[[], Any], timeout: float, what: str, guard: Callable[[], None], logs: Callable[[], dict[str, str]]
) -> Any:
    """Poll `check` until it returns something truthy; `guard` fails fast when a process died."""
    deadline = time.monotonic() + timeout
    while True:
        guard()
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise SmokeFailure(f"{what} did not happen within {timeout:g} s", logs())
        time.sleep(0.3)


# --------------------------------------------------------------------------- the smoke test


def install(source: Path, home: Path) -> Path:
    """A fresh venv with `pip install <source>`, no extras; returns its bin directory."""
    venv = home / "venv"
    run([sys.executable, "-m", "venv", str(venv)], "python3 -m venv", timeout=120)
    say(f"pip install {source} (non-editable, no extras)")
    env = os.environ | {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    # --no-compile: byte-compiling every dependency is most of the install time and changes nothing checked here.
    run(
        [str(venv / "bin" / "pip"), "install", "-q", "--no-compile", str(source)],
        f"pip install {source}",
        env=env,
        timeout=600,
    )
    return venv / "bin"


def sample_payload(python: Path, home: Path) -> dict[str, Any]:
    """The bundled Alertmanager sample, read from the installed package (so package data shipped),
    made a fresh incident the way `rca demo` does it."""
    code = (
        "from importlib import resources; "
        "print(resources.files('rca.samples').joinpath('alertmanager_queue_high.json').read_text())"
    )
    payload = json.loads(run([str(python), "-c", code], "reading the bundled sample payload", cwd=home).stdout)
    payload["groupKey"] += f"/smoke-{secrets.token_hex(4)}"
    for alert in payload["alerts"]:
        alert["startsAt"] = datetime.now(UTC).isoformat()
    return payload


def check_service(bin_dir: Path, home: Path) -> None:
    """Migrate, serve, work: one webhook through the whole production path on Postgres and Redis."""
    rca = str(bin_dir / "rca")
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("RCA_")}
    base_env.pop("PYTHONPATH", None)
    webhook_token, api_token = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    with ExitStack() as stack:
        database_url = stack.enter_context(fresh_database())
        broker_url = stack.enter_context(spare_redis_db())
        prometheus = stack.enter_context(StubPrometheus())
        port, metrics_port = free_port(), free_port()
        env = base_env | {
            "RCA_DATABASE_URL": database_url,
            "RCA_BROKER_URL": broker_url,
            "RCA_PROMETHEUS_URL": prometheus.url,
            "RCA_WEBHOOK_TOKEN": webhook_token,
            "RCA_API_TOKENS": api_token,
            "RCA_DATA_DIR": str(home / "data"),
            "RCA_HOST": "127.0.0.1",
            "RCA_PORT": str(port),
            "RCA_LOG_LEVEL": "INFO",
            "RCA_WORKER_METRICS_PORT": str(metrics_port),
        }
        say(f"rca migrate ({database_url})")
        run([rca, "migrate"], "rca migrate", env=env, cwd=home, timeout=120)
        services: list[Service] = []
        stack.callback(lambda: [service.stop() for service in reversed(services)])

        def logs() -> dict[str, str]:
            return {f"rca {service.name}": service.output() for service in services}

        def alive() -> None:
            for service in services:
                service.check_alive(logs)

        services.append(Service("serve", [rca, "serve"], env, home))
        services.append(Service("worker", [rca, "worker"], env, home))  # as shipped: beat included
        base = f"http://127.0.0.1:{port}"
        say(f"rca serve on {base} and rca worker (pids {[s.process.pid for s in services]}) started")

        wait_until(
            lambda: http("GET", f"{base}/readyz")[0] == 200,
            START_TIMEOUT,
            "GET /readyz answering 200",
            alive,
            lambda: logs() | {"last /readyz": str(http("GET", f"{base}/readyz"))},
        )
        say("/readyz 200")
        status, reply = http(
            "POST", f"{base}/api/v1/alertmanager", webhook_token, sample_payload(bin_dir / "python", home)
        )
        if status != 200 or not isinstance(reply, dict) or reply.get("enqueued") is not True:
            raise SmokeFailure(f"POST /api/v1/alertmanager answered {status} {reply} (expected enqueued: true)", logs())
        incident_id = reply["incident_id"]
        say(f"webhook -> {status}, incident {incident_id} enqueued")

        def finished() -> dict[str, Any] | None:
            code, incident = http("GET", f"{base}/api/v1/incidents/{incident_id}", api_token)
            inv = incident.get("investigation") if code == 200 and isinstance(incident, dict) else None
            if inv and inv["status"] in ("failed", "inconclusive"):  # inconclusive: it read no evidence
                raise SmokeFailure(f"investigation {inv['status']}: {inv.get('data_gap') or inv.get('error')}", logs())
            return inv if inv and inv["status"] == "done" else None

        inv = wait_until(
            finished, INVESTIGATION_TIMEOUT, f"the investigation of incident {incident_id} reaching done", alive, logs
        )
        if not inv.get("findings") or not prometheus.queries:
            raise SmokeFailure(
                f"investigation done without evidence: {len(inv.get('findings') or [])} findings, "
                f"{prometheus.queries} Prometheus queries",
                logs(),
            )
        say(
            f"investigation done: {len(inv['findings'])} findings, {len(inv.get('hypotheses') or [])} hypotheses, "
            f"{prometheus.queries} Prometheus queries"
        )

        # The service's own metrics: the API's (behind the token) and the worker's pool children, summed.
        for where, url, token, line in [
            ("API", f"{base}/metrics", api_token, 'rca_webhook_requests_total{code="200",outcome="stored"} 1.0'),
            ("worker", f"http://127.0.0.1:{metrics_port}/metrics", None, 'rca_investigations_total{status="done"} 1.0'),
        ]:
            status, text = http("GET", url, token)
            if status != 200 or line not in str(text):
                raise SmokeFailure(f"{where} metrics at {url}: {status}, no line {line!r}", logs() | {url: str(text)})
        say("/metrics: the webhook counted by the API, the investigation by the worker")

        created = run(
            [rca, "token", "create", "--name", "smoke", "--scope", "read"],
            "rca token create",
            env=env,
            cwd=home,
            timeout=60,
        ).stdout.strip()
        status, _ = http("GET", f"{base}/api/v1/incidents/{incident_id}", created)
        if status != 200:
            raise SmokeFailure(f"a token from `rca token create` got {status} from the API", logs())
        say("rca token create: the new token reads the API")

        investigate = run(
            [rca, "investigate", "--json", "--label", "instance=gpu-node-1:8000", "--label", "job=vllm"],
            "rca investigate",
            env=env,
            cwd=home,
            timeout=120,
        )
        if not json.loads(investigate.stdout).get("findings"):
            raise SmokeFailure("rca investigate printed no findings", {"rca investigate": investigate.stdout})
        say("rca investigate --json: findings printed")
        for service in reversed(services):
            service.stop()
            say(f"rca {service.name} (pid {service.process.pid}) stopped, exit {service.process.returncode}")


def check_commands(bin_dir: Path, home: Path) -> None:
    """The commands that need no Postgres or Redis: imports, help, gpu-probe and the embedded demo."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCA_")}
    env.pop("PYTHONPATH", None)
    failed = run(
        [str(bin_dir / "python"), "-c", IMPORT_ALL], "importing every installed module", cwd=home, env=env, ok=(0, 1)
    )
    if failed.returncode:
        raise SmokeFailure("modules of the installed package do not import", {"imports": failed.stdout + failed.stderr})
    say("every module of the installed package imports")
    run([str(bin_dir / "rca"), "--help"], "rca --help", env=env, cwd=home)
    probe = run(
        [str(bin_dir / "rca"), "gpu-probe", "--once"], "rca gpu-probe --once", env=env, cwd=home, ok=(0, 3), timeout=60
    )  # 3: no NVIDIA GPU on this machine, said in one line
    if "Traceback" in probe.stderr:
        raise SmokeFailure("rca gpu-probe --once crashed", {"rca gpu-probe": probe.stderr})
    say(f"rca gpu-probe --once: exit {probe.returncode}")
    demo_home = home / "demo"
    demo_home.mkdir()
    demo = run([str(bin_dir / "rca"), "demo"], "rca demo (embedded defaults)", env=env, cwd=demo_home, timeout=180)
    say(f"rca demo: exit 0, {len(demo.stdout.splitlines())} lines")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=REPO, help="what to pip install (default: this checkout)")
    parser.add_argument("--label", default="production install", help="what is being tested, for the messages")
    args = parser.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="rca-smoke-"))
    try:
        bin_dir = install(args.source.resolve(), home)
        check_commands(bin_dir, home)
        check_service(bin_dir, home)
    except SmokeFailure as exc:
        for name, text in exc.logs.items():
            print(f"----- {name} -----\n{text.rstrip()}\n", file=sys.stderr)
        print(f"smoke: FAILED ({args.label}): {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        shutil.rmtree(home, ignore_errors=True)
    say(f"OK ({args.label})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
