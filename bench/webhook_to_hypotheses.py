"""Benchmark: time from webhook receipt to stored ranked hypotheses (rules only, no LLM).

Production topology on this machine: real Prometheus holding 3 h of backfilled history for a
five-host fleet, `rca serve` + `rca worker` (Celery on Redis) and Postgres. Each run posts a new
alert group for one of the hosts and waits for its investigation to be stored.

    .venv/bin/python bench/webhook_to_hypotheses.py --runs 30

Reports, per run: server-side latency (investigation `finished_at` - `queued_at`, both written by
the service; `queued_at` is set in the webhook's own transaction) and client-side latency (POST
sent -> investigation seen `done` by polling every 20 ms).
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e import promstack  # noqa: E402
from tests.e2e.scenarios import FAULTS, MODEL, Fleet, Host  # noqa: E402

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
BENCH_REDIS = "redis://127.0.0.1:6379/14"


def payload(host: str, run: int, starts_at: datetime) -> dict:
    labels = {
        "alertname": "LLMRequestQueueMedianHigh",
        "instance": f"{host}:8000",
        "model_name": MODEL,
        "job": "vllm",
        "severity": "warning",
    }
    return {
        "version": "4",
        "groupKey": f"bench/{run}/{secrets.token_hex(4)}",
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "bench",
        "groupLabels": {"alertname": labels["alertname"]},
        "commonLabels": labels,
        "commonAnnotations": {},
        "externalURL": "http://127.0.0.1:9093",
        "alerts": [
            {
                "status": "firing",
                "labels": labels,
                "annotations": {},
                "startsAt": starts_at.isoformat(),
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "",
                "fingerprint": secrets.token_hex(8),
            }
        ],
    }


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    promstack.require_binaries()

    db = f"rca_bench_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    broker = redis.Redis.from_url(BENCH_REDIS)
    broker.flushdb()
    now = time.time()
    onset = now - 20 * 60
    hosts = [Host(f"bench-{fault.replace('_', '-')}", fault, onset) for fault in FAULTS]
    hosts.append(Host("bench-healthy", None, onset))
    fleet = Fleet(hosts, start=now - 3 * 3600 - 15 * 60)
    server_s: list[float] = []
    client_s: list[float] = []
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            promstack.service_stack(
                Path(tmp),
                fleet,
                now,
                f"postgresql+psycopg://postgres@127.0.0.1:5432/{db}",
                BENCH_REDIS,
                with_alertmanager=False,
            ) as stack,
        ):
            series = sum(1 for _ in fleet.series)
            print(f"fleet: {len(hosts)} hosts, {series} series, 3 h 15 min of history; Prometheus {stack.prometheus}")
            for run in range(args.runs + 1):  # run 0 warms up worker imports and connections
                host = hosts[run % len(hosts)].name
                sent = time.perf_counter()
                reply = stack.post_webhook(payload(host, run, datetime.now(UTC)))
                reply.raise_for_status()
                incident_id = reply.json()["incident_id"]
                while True:
                    inv = stack.get(f"/api/v1/incidents/{incident_id}").json()["investigation"]
                    if inv["status"] in ("done", "inconclusive", "failed"):
                        break
                    if time.perf_counter() - sent > 60:
                        raise SystemExit(f"run {run}: not done after 60 s\n{stack.logs()}")
                    time.sleep(0.02)
                observed = time.perf_counter() - sent
                if inv["status"] != "done":
                    raise SystemExit(f"run {run}: investigation failed: {inv['error']}")
                server = (
                    datetime.fromisoformat(inv["finished_at"]) - datetime.fromisoformat(inv["queued_at"])
                ).total_seconds()
                if run:
                    server_s.append(server)
                    client_s.append(observed)
                    print(
                        f"run {run:3d} {host:28s} top={inv['hypotheses'][0]['category']:22s} "
                        f"server {server:.3f} s  client {observed:.3f} s  collect {inv['collect_seconds']:.3f} s"
                    )
    finally:
        broker.flushdb()
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    print()
    print(f"webhook receipt -> stored ranked hypotheses, {len(server_s)} runs (rules analyst, no LLM)")
    print(
        f"  server-side: p50 {percentile(server_s, 50):.3f} s  p95 {percentile(server_s, 95):.3f} s  "
        f"max {max(server_s):.3f} s"
    )
    print(
        f"  client-side: p50 {percentile(client_s, 50):.3f} s  p95 {percentile(client_s, 95):.3f} s  "
        f"max {max(client_s):.3f} s"
    )
    print(f"  target p95 < 2 s: {'met' if percentile(client_s, 95) < 2 else 'NOT met'}")


if __name__ == "__main__":
    main()
