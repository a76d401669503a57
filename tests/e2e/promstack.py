"""Real Prometheus, Alertmanager and `rca` processes on free loopback ports, for e2e tests and
benchmarks. Each gets its own data folder; every process is stopped by its pid."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from tests.e2e.scenarios import Exporter, Fleet

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "rules.yml"
PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
PROMTOOL = shutil.which("promtool")


def require_binaries() -> None:
    """Fail (never skip) when the Debian packages are missing: CI must install them."""
    missing = [
        name
        for name, path in (
            ("prometheus", PROMETHEUS),
            ("promtool", PROMTOOL),
            ("prometheus-alertmanager", ALERTMANAGER),
        )
        if not path
    ]
    if missing:
        raise RuntimeError(f"missing {', '.join(missing)}: apt-get install -y prometheus prometheus-alertmanager")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check: Callable[[], bool], timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: process exited with {proc.returncode}")
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{what} not ready after {timeout} s")


class Process:
    """A child process with its log file, stopped by pid on exit."""

    def __init__(self, name: str, argv: list[str], workdir: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self.log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            argv, stdout=self.log, stderr=subprocess.STDOUT, cwd=workdir, env=env, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, lines: int = 40) -> str:
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        self.log.close()


def backfill(fleet: Fleet, end: float, data_dir: Path, workdir: Path) -> None:
    """Write the fleet's history as OpenMetrics and turn it into TSDB blocks with promtool."""
    source = workdir / "history.om"
    with source.open("w") as out:
        out.writelines(fleet.openmetrics(end))
    blocks_from(source, data_dir, timeout=300)


@contextmanager
def fleet_prometheus(fleet: Fleet, now: float, workdir: Path, settle: float = 0.0) -> Iterator[str]:
    """A real Prometheus with the fleet's history up to `now`, scraping its live exporter; `settle`
    seconds to wait for the first scrapes."""
    backfill(fleet, now, workdir / "tsdb", workdir)
    with Exporter(fleet, time.time) as exporter:
        proc, url = start_prometheus(workdir, exporter.port, None)
        try:
            time.sleep(settle)
            yield url
        finally:
            proc.stop()


def blocks_from(source: Path, data_dir: Path, timeout: float) -> None:
    """TSDB blocks in `data_dir` from an OpenMetrics file (promtool), which is then removed."""
    data_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data_dir)],
        check=True,
        capture_output=True,
        timeout=timeout,
    )
    source.unlink()


def start_prometheus(
    workdir: Path,
    exporter_port: int,
    alertmanager_port: int | None,
    for_override: str | None = "0s",
    extra_rules: list[dict] | None = None,
    only_alerts: list[dict] | None = None,
) -> tuple[Process, str]:
    """Prometheus scraping the exporter, with the deploy rules (their `for:` shortened for tests);
    `only_alerts` replaces the deploy's alerting rules (its recording rules stay)."""
    rules = yaml.safe_load(RULES.read_text())
    if only_alerts is not None:
        for group in rules["groups"]:
            group["rules"] = [rule for rule in group["rules"] if "alert" not in rule]
        rules["groups"].append({"name": "test-alerts", "rules": only_alerts})
    if extra_rules:
        rules["groups"].append({"name": "test-extra", "rules": extra_rules})
    if for_override is not None:
        for group in rules["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    rule["for"] = for_override
    (workdir / "rules.yml").write_text(yaml.safe_dump(rules))
    config = {
        "global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
        "rule_files": ["rules.yml"],
        "scrape_configs": [
            {"job_name": "fleet", "honor_labels": True, "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}
        ],
    }
    if alertmanager_port:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]}
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    return _start_ready(
        "prometheus",
        port,
        workdir,
        60,
        [
            PROMETHEUS,
            f"--web.external-url=http://127.0.0.1:{port}",  # alerts' generatorURL: this machine, not its hostname
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            "--storage.tsdb.retention.time=30d",
            "--log.level=warn",
        ],
    )


def start_alertmanager(workdir: Path, webhook_url: str, token: str, port: int | None = None) -> tuple[Process, str]:
    receiver = {
        "name": "rca",
        "webhook_configs": [
            {
                "url": webhook_url,
                "send_resolved": True,
                "http_config": {"authorization": {"type": "Bearer", "credentials": token}},
            }
        ],
    }
    return alertmanager_for(workdir, receiver, port)


def alertmanager_for(workdir: Path, receiver: dict, port: int | None = None) -> tuple[Process, str]:
    """Alertmanager routing every alert to `receiver` (an Alertmanager `receivers:` entry), grouped
    as the deploy kit's route groups them, with waits shortened for tests."""
    config = {
        "route": {
            "receiver": receiver["name"],
            "group_by": ["alertname", "instance", "model_name"],
            "group_wait": "1s",
            "group_interval": "5s",
            "repeat_interval": "1h",
        },
        "receivers": [receiver],
    }
    (workdir / "alertmanager.yml").write_text(yaml.safe_dump(config))
    port = port or free_port()
    return _start_ready(
        "alertmanager",
        port,
        workdir,
        30,
        [
            ALERTMANAGER,
            f"--web.external-url=http://127.0.0.1:{port}",  # the webhook's externalURL: this machine
            f"--config.file={workdir / 'alertmanager.yml'}",
            f"--storage.path={workdir / 'am-data'}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
    )


def _start_ready(name: str, port: int, workdir: Path, timeout: float, argv: list[str]) -> tuple[Process, str]:
    """Start a Prometheus-family server on a loopback port and wait until `/-/ready` answers."""
    proc = Process(name, [*argv, f"--web.listen-address=127.0.0.1:{port}"], workdir)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: httpx.get(f"{url}/-/ready", timeout=2).status_code == 200, timeout, name, proc.proc)
    return proc, url


def rca_process_env(env: dict[str, str]) -> dict[str, str]:
    """This environment without any RCA_* setting, plus the given ones, importable from the repo."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RCA_")}
    return clean | {"PYTHONPATH": str(REPO)} | env


def rca_process(name: str, args: list[str], workdir: Path, env: dict[str, str]) -> Process:
    """`rca <args>` from this venv, with only the given RCA_* settings."""
    return Process(name, [sys.executable, "-m", "rca.cli", *args], workdir, env=rca_process_env(env))


@dataclass
class ServiceStack:
    """A running fleet: exporter, Prometheus, `rca serve` + `rca worker`, optionally Alertmanager."""

    api: str
    api_token: str
    webhook_token: str
    prometheus: str
    processes: list[Process]

    def get(self, path: str, **params: object) -> httpx.Response:
        return httpx.get(
            f"{self.api}{path}", params=params, timeout=10, headers={"Authorization": f"Bearer {self.api_token}"}
        )

    def post_webhook(self, payload: dict) -> httpx.Response:
        return httpx.post(
            f"{self.api}/api/v1/alertmanager",
            json=payload,
            timeout=10,
            headers={"Authorization": f"Bearer {self.webhook_token}"},
        )

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.tail()}" for p in self.processes)


@contextmanager
def service_stack(
    workdir: Path,
    fleet: Fleet,
    now: float,
    database_url: str,
    broker_url: str,
    with_alertmanager: bool,
    extra_rules: list[dict] | None = None,
    only_alerts: list[dict] | None = None,
    settings: dict[str, str] | None = None,
) -> Iterator[ServiceStack]:
    """Backfill the fleet's history up to `now`, then start every part on loopback ports.
    `settings`: RCA_* variables over the stack's own (the scan is off unless they turn it on)."""
    backfill(fleet, now, workdir / "tsdb", workdir)
    webhook_token, api_token = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    api_port, am_port = free_port(), free_port()
    processes: list[Process] = []
    with Exporter(fleet, time.time) as exporter:
        try:
            prom, prom_url = start_prometheus(
                workdir,
                exporter.port,
                am_port if with_alertmanager else None,
                for_override=None if only_alerts else "0s",
                extra_rules=extra_rules,
                only_alerts=only_alerts,
            )
            processes.append(prom)
            env = {
                "RCA_DATABASE_URL": database_url,
                "RCA_BROKER_URL": broker_url,
                "RCA_PROMETHEUS_URL": prom_url,
                "RCA_SCAN_ENABLED": "false",  # these stacks test alerts; tests/scan tests the scan
                "RCA_WEBHOOK_TOKEN": webhook_token,
                "RCA_API_TOKENS": api_token,
                "RCA_PORT": str(api_port),
                "RCA_DATA_DIR": str(workdir / "rca-data"),
                "RCA_LOG_LEVEL": "WARNING",
                "RCA_WORKER_METRICS_PORT": str(free_port()),  # not 9808: runs in parallel must not clash
            } | (settings or {})
            subprocess.run(
                [sys.executable, "-m", "rca.cli", "migrate"],
                check=True,
                timeout=60,
                env=rca_process_env(env),
                capture_output=True,
            )
            serve = rca_process("rca-serve", ["serve"], workdir, env)
            processes += [serve, rca_process("rca-worker", ["worker", "--concurrency", "2"], workdir, env)]
            api = f"http://127.0.0.1:{api_port}"
            wait_until(lambda: httpx.get(f"{api}/readyz", timeout=2).status_code == 200, 30, "rca serve", serve.proc)
            if with_alertmanager:
                am, _ = start_alertmanager(workdir, f"{api}/api/v1/alertmanager", webhook_token, port=am_port)
                processes.append(am)
            yield ServiceStack(
                api=api, api_token=api_token, webhook_token=webhook_token, prometheus=prom_url, processes=processes
            )
        finally:
            for proc in reversed(processes):
                proc.stop()
