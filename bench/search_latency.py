"""Benchmark: history search, filters and similar incidents at 1,000,000 incidents.

Creates a throwaway Postgres database, migrates it, bulk-loads realistic incidents with COPY
(incidents, one alert and one finished investigation each, their digests, 2% confirmed with
feedback) with the secondary indexes built after the load, then starts the real service
(`rca serve`) on it and measures a mix of search, filter, pagination and similar-incident
requests over HTTP. The database is dropped at the end, whatever happens, unless `--keep NAME`
names it: then it is kept, and a later run with the same name and count measures it again
without loading.

    .venv/bin/python bench/search_latency.py --incidents 1000000 --requests 600

Findings and hypotheses rows are not loaded: search and similarity read only `incident_digests`
(which carries the breached findings, onset order, stack and ranked categories) and `incidents`.
Before measuring, the searched tables and their indexes are read into the OS page cache
(pg_prewarm), as a production database's working set would be. Prints p50/p95/max per request
kind and overall, the cost of one digest refresh (the write side), and EXPLAIN ANALYZE of the
slowest kind's SQL.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rca.store.digests import breached_key, build_document  # noqa: E402
from tests.helpers.processes import wait_until_serving  # noqa: E402

ADMIN_DSN = os.environ.get("BENCH_POSTGRES_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
API_TOKEN = secrets.token_urlsafe(16)

# Each cause with the findings it typically breaches (in onset order) and the alert it fires.
CAUSES: dict[str, tuple[list[str], str]] = {
    "kv_memory_pressure": (["kv_cache_usage", "preemption_rate", "queue_time_p95", "ttft_p95"], "KVCacheUsageHigh"),
    "arrival_surge": (["request_rate", "queue_length", "queue_time_p95", "ttft_p95"], "LLMRequestQueueMedianHigh"),
    "prefix_cache_miss": (["prefix_cache_hit_rate", "prompt_tokens_rate", "ttft_p95"], "TTFTp95High"),
    "batching_misconfig": (["batch_size", "itl_p95", "gpu_utilization"], "ITLp95High"),
    "prefill_blocking": (["prompt_length", "itl_p95", "ttft_p95"], "ITLp95High"),
    "gpu_degraded": (["gpu_xid_errors", "gpu_clock", "itl_p95"], "GPUXidErrors"),
    "cpu_launch_overhead": (["cpu_bound_ratio", "gpu_utilization", "itl_p95"], "ITLp95High"),
    "cpu_quota_throttling": (["cpu_throttling", "itl_p95"], "ITLp95High"),
    "memory_bandwidth_bound": (["dram_active", "itl_p95"], "ITLp95High"),
    "lora_adapter_loading": (["lora_load_time", "ttft_p95"], "TTFTp95High"),
    "host_device_sync": (["pcie_traffic", "gpu_utilization", "itl_p95"], "ITLp95High"),
    "cpu_affinity_numa": (["numa_miss_rate", "context_switch_rate", "itl_p95"], "ITLp95High"),
}
CAUSE_WEIGHTS = [18, 16, 12, 9, 8, 8, 7, 6, 5, 4, 4, 3]
MODELS = [
    "llama-3-70b-instruct",
    "llama-3-8b-instruct",
    "qwen2-72b",
    "mixtral-8x7b",
    "mistral-7b",
    "deepseek-v2",
    "gemma-2-27b",
    "phi-3-medium",
]
STACKS = ["vllm"] * 7 + ["sglang"] * 2 + ["tgi"]
NAMESPACES = [f"inference-{name}" for name in ("prod", "staging", "batch", "eval", "research", "chat", "search")]
CLUSTERS = ["us-east-1a", "us-east-1b", "us-west-2a", "eu-west-1a", "ap-south-1a", "eu-central-1b"]
NODES = 3000


def incident_rows(n: int, start: datetime, rng: random.Random) -> dict[str, Any]:
    """One realistic incident as rows for each table (ids are 1-based and time-ordered)."""
    cause = rng.choices(list(CAUSES), CAUSE_WEIGHTS)[0]
    typical, alertname = CAUSES[cause]
    breached = [k for k in typical if rng.random() < 0.85] or typical[:1]
    if rng.random() < 0.2:
        breached.append(rng.choice(["gpu_memory_used", "request_rate", "queue_length", "prompt_length"]))
    breached = list(dict.fromkeys(breached))
    onset = breached[:] if rng.random() < 0.8 else rng.sample(breached, len(breached))
    others = [c for c in CAUSES if c != cause]
    categories = (
        [cause] + rng.sample(others, 2) if rng.random() < 0.75 else [rng.choice(others), cause, rng.choice(others)]
    )
    model, node = rng.choice(MODELS), f"gpu-node-{rng.randrange(NODES):04d}"
    labels = {
        "alertname": alertname,
        "instance": f"{node}:8000",
        "job": rng.choice(STACKS),
        "model_name": model,
        "namespace": rng.choice(NAMESPACES),
        "cluster": rng.choice(CLUSTERS),
        "severity": rng.choice(["warning", "critical"]),
    }
    annotations = {
        "summary": f"{alertname} on {node}:8000 ({model})",
        "description": f"{alertname} has been above its threshold for 5 minutes.",
    }
    created = start + timedelta(seconds=n * 60 + rng.random() * 30)
    firing = rng.random() < 0.03
    title = f"[{'FIRING' if firing else 'RESOLVED'}:1] {alertname} {model} {node}:8000"
    incident = SimpleNamespace(title=title, alertname=alertname, common_labels=labels, common_annotations=annotations)
    alert = SimpleNamespace(alertname=alertname, labels=labels, annotations=annotations)
    findings = [
        SimpleNamespace(
            breached=True,
            key=k,
            title=f"{k.replace('_', ' ')} breached",
            detail=f"{k} rose from {rng.uniform(0.1, 0.5):.2f} to {rng.uniform(0.8, 3):.2f}",
        )
        for k in breached
    ]
    hypotheses = [SimpleNamespace(category=c, title=c.replace("_", " ")) for c in categories]
    confirmed = cause if rng.random() < 0.02 else None
    feedback = SimpleNamespace(category=confirmed, note="confirmed in the postmortem") if confirmed else None
    stack = labels["job"]
    return {
        "incident": (
            n,
            f'{{}}:{{alertname="{alertname}"}}/{n}',
            "firing" if firing else "resolved",
            title,
            alertname,
            "llm-rca",
            json.dumps({"alertname": alertname}),
            json.dumps(labels),
            json.dumps(annotations),
            "http://alertmanager:9093",
            rng.randint(1, 6),
            created,
            created + timedelta(minutes=5),
            None if firing else created + timedelta(minutes=rng.randint(5, 90)),
        ),
        "alert": (
            n,
            n,
            secrets.token_hex(8),
            alertname,
            "firing" if firing else "resolved",
            json.dumps(labels),
            json.dumps(annotations),
            created,
            None,
            "",
            json.dumps({}),
            created,
            created,
        ),
        "investigation": (
            n,
            n,
            "done",
            "new_incident",
            1,
            created,
            created,
            created + timedelta(seconds=3),
            1.2,
            2.5,
            None,
            "rules",
            created - timedelta(hours=3),
            created + timedelta(minutes=1),
            15,
            json.dumps({"stack": stack}),
        ),
        "digest": (
            n,
            created,
            "firing" if firing else "resolved",
            build_document(incident, [alert], findings, hypotheses, feedback),
            json.dumps(sorted(f"{k}={v}" for k, v in labels.items())),
            json.dumps(sorted(breached)),
            breached_key(breached),
            json.dumps(onset),
            stack,
            json.dumps(categories[:3]),
            categories[0],
            round(rng.uniform(0.3, 0.9), 3),
            "rules",
            confirmed,
        ),
        "feedback": (
            n,
            n,
            confirmed,
            "confirmed in the postmortem",
            json.dumps([{"rank": 1, "correct": True}]),
            "env-token-1",
            created + timedelta(hours=2),
        )
        if confirmed
        else None,
    }


COPY = {
    "incident": "COPY incidents (id, group_key, status, title, alertname, receiver, group_labels, common_labels, "
    "common_annotations, external_url, notification_count, created_at, updated_at, resolved_at) FROM STDIN",
    "alert": "COPY alerts (id, incident_id, fingerprint, alertname, status, labels, annotations, starts_at, ends_at, "
    "generator_url, raw, first_seen_at, last_seen_at) FROM STDIN",
    "investigation": "COPY investigations (id, incident_id, status, reason, attempts, queued_at, started_at, "
    "finished_at, collect_seconds, total_seconds, error, analyst, window_start, window_end, "
    "step_seconds, target) FROM STDIN",
    "digest": "COPY incident_digests (incident_id, created_at, status, document, labels, breached, breached_key, "
    "onset_order, stack, categories, top_category, top_confidence, analyst, confirmed_category) FROM STDIN",
    "feedback": "COPY feedback (incident_id, investigation_id, category, note, verdicts, author, created_at) "
    "FROM STDIN",
}
TABLES = ("incidents", "alerts", "investigations", "incident_digests", "feedback")


CHUNK = 20_000


def _load_chunk(job: tuple[str, int, int, int, datetime]) -> int:
    """Generate and COPY incidents `first`..`last` in one transaction of its own. Each chunk seeds
    its own generator, so the data set does not depend on how many processes load it."""
    dsn, first, last, seed, start = job
    rng = random.Random(seed * 1_000_003 + first)
    rows = [incident_rows(n, start, rng) for n in range(first, last + 1)]
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SET synchronous_commit = off")
        for kind, sql in COPY.items():
            with cur.copy(sql) as copy:
                for row in rows:
                    if row[kind] is not None:
                        copy.write_row(row[kind])
    return last - first + 1


def load(dsn: str, count: int, seed: int) -> None:
    """COPY `count` incidents in, one chunk per process (generating the rows in Python is the slow
    part), with the secondary indexes dropped during the load and rebuilt after."""
    from concurrent.futures import ProcessPoolExecutor

    start = datetime.now(UTC) - timedelta(minutes=count + 60)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = ANY(%s) "
            "AND indexname NOT IN (SELECT conname FROM pg_constraint)",
            [list(TABLES)],
        ).fetchall()
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{name}"')
        began = time.perf_counter()
        jobs = [(dsn, first, min(first + CHUNK - 1, count), seed, start) for first in range(1, count + 1, CHUNK)]
        done = 0
        with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            for loaded in pool.map(_load_chunk, jobs):
                done += loaded
                if done % 100_000 < CHUNK or done == count:
                    print(f"  loaded {done:>9,} incidents  ({time.perf_counter() - began:6.1f} s)", flush=True)
        for name, definition in indexes:
            t = time.perf_counter()
            conn.execute(definition)
            print(f"  index {name} built in {time.perf_counter() - t:.1f} s", flush=True)
        for table in ("incidents", "alerts", "investigations", "feedback"):
            conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
        conn.execute("VACUUM ANALYZE")
        print(f"load finished in {time.perf_counter() - began:.0f} s", flush=True)


def prewarm(dsn: str) -> None:
    """Read the tables search touches, and their indexes, into the OS page cache (pg_prewarm):
    a production database keeps its working set in memory, and on this machine idle page cache is
    reclaimed within minutes, so without this the figures would measure the disk."""
    began = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        blocks = conn.execute(
            "SELECT coalesce(sum(pg_prewarm(c.oid::regclass, 'read')), 0) FROM pg_class c "
            "WHERE c.relname = ANY(%(t)s) OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN "
            "(SELECT oid FROM pg_class WHERE relname = ANY(%(t)s)))",
            {"t": ["incident_digests", "incidents", "investigations"]},
        ).fetchone()[0]
    print(
        f"prewarmed {blocks * 8 / 1024:,.0f} MiB into the page cache in {time.perf_counter() - began:.1f} s", flush=True
    )


def request_mix(rng: random.Random, count: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, path, params) of a realistic mix: what an on-call engineer, Slack and the LLM prompt ask."""
    mix: list[tuple[str, str, dict[str, Any]]] = []
    kinds = [
        "q_rare",
        "q_common_relevance",
        "q_two_words_time",
        "q_filtered",
        "label_filter",
        "signal_category",
        "confirmed",
        "time_window",
        "page_3",
        "similar",
        "host_counted",
    ]
    for i in range(count):
        kind = kinds[i % len(kinds)]
        node, model = f"gpu-node-{rng.randrange(NODES):04d}", rng.choice(MODELS)
        cause = rng.choice(list(CAUSES))
        if kind == "q_rare":
            mix.append((kind, "/api/v1/incidents", {"q": node}))
        elif kind == "q_common_relevance":
            word = rng.choice(["preemption", "prefix cache", "xid", "throttling"])
            mix.append((kind, "/api/v1/incidents", {"q": word}))
        elif kind == "q_two_words_time":
            words = f"{model.split('-')[0]} {cause.split('_')[0]}"
            mix.append((kind, "/api/v1/incidents", {"q": words, "sort": "time"}))
        elif kind == "q_filtered":
            mix.append((kind, "/api/v1/incidents", {"q": model, "status": "resolved", "label": "severity=critical"}))
        elif kind == "label_filter":
            mix.append((kind, "/api/v1/incidents", {"label": [f"instance={node}:8000"]}))
        elif kind == "signal_category":
            mix.append((kind, "/api/v1/incidents", {"signal": CAUSES[cause][0][0], "category": cause}))
        elif kind == "confirmed":
            mix.append((kind, "/api/v1/incidents", {"confirmed": "true", "confirmed_category": cause}))
        elif kind == "time_window":
            mix.append((kind, "/api/v1/incidents", {"since": "__window__", "status": "firing"}))
        elif kind == "host_counted":  # how often did this host alert, newest first, counted
            mix.append((kind, "/api/v1/incidents", {"q": node, "sort": "time", "total": "true"}))
        elif kind == "page_3":
            mix.append((kind, "/api/v1/incidents", {"label": f"model_name={model}", "limit": 20, "__pages__": 3}))
        else:
            mix.append((kind, "/api/v1/incidents/{id}/similar", {}))
    return mix


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def measure(base: str, count: int, incidents: int, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed + 1)
    auth = {"Authorization": f"Bearer {API_TOKEN}"}
    window_start = (datetime.now(UTC) - timedelta(days=7)).isoformat()
    timings: dict[str, list[float]] = defaultdict(list)
    with httpx.Client(base_url=base, headers=auth, timeout=30) as client:
        for warm in range(20):  # connections, plans and caches
            client.get("/api/v1/incidents", params={"q": f"gpu-node-{warm:04d}"})
        for kind, path, params in request_mix(rng, count):
            params = dict(params)
            pages = params.pop("__pages__", 1)
            if params.get("since") == "__window__":
                params["since"] = window_start
            if "{id}" in path:
                path = path.replace("{id}", str(rng.randint(incidents // 2, incidents)))
            for _ in range(pages):
                t = time.perf_counter()
                reply = client.get(path, params=params)
                timings[kind].append((time.perf_counter() - t) * 1000)
                if reply.status_code != 200:
                    raise SystemExit(f"{kind}: {path} {params} -> {reply.status_code} {reply.text[:300]}")
                cursor = reply.json().get("next_cursor")
                if not cursor:
                    break
                params["cursor"] = cursor
    return timings


def measure_refresh(url: str, incidents: int, seed: int, count: int = 200) -> list[float]:
    """Milliseconds to rewrite one incident's digest (read its rows, UPDATE the digest and so its
    tsvector and GIN entries), each in a transaction that is rolled back so the data set stays
    as loaded."""
    from rca.store import digests
    from rca.store.db import _session_factory

    rng = random.Random(seed + 3)
    timings = []
    for _ in range(count):
        session = _session_factory(url)()
        try:
            t = time.perf_counter()
            digests.refresh(session, rng.randint(1, incidents))
            session.flush()
            timings.append((time.perf_counter() - t) * 1000)
        finally:
            session.rollback()
            session.close()
    return timings


def explain_slowest(url: str, kind: str, seed: int) -> None:
    """Re-run one request of the slowest kind in-process with the service's own code, capture its SQL
    and print EXPLAIN ANALYZE of each statement."""
    from fastapi.testclient import TestClient
    from sqlalchemy import event

    from rca.api.app import create_app
    from rca.startup import checked_settings
    from rca.store.db import get_engine

    rng = random.Random(seed + 2)
    _, path, params = next(m for m in request_mix(rng, 200) if m[0] == kind)
    params = {k: v for k, v in params.items() if k != "__pages__"}
    if params.get("since") == "__window__":
        params["since"] = (datetime.now(UTC) - timedelta(days=7)).isoformat()
    path = path.replace("{id}", "900000")
    statements: list[tuple[str, Any]] = []
    engine = get_engine(url)

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        statements.append((statement, parameters))

    settings = checked_settings(database_url=url, api_tokens=API_TOKEN, webhook_token="unused", prometheus_url=None)
    with TestClient(create_app(settings)) as client:
        event.listen(engine, "before_cursor_execute", capture)  # the request's statements only
        reply = client.get(path, params=params, headers={"Authorization": f"Bearer {API_TOKEN}"})
        event.remove(engine, "before_cursor_execute", capture)
        assert reply.status_code == 200, reply.text
    print(f"\nEXPLAIN ANALYZE of the slowest kind ({kind}: GET {path} {params}), statement by statement:")
    with engine.connect() as conn:  # one transaction, as in the request, so planner settings apply alike
        for statement, parameters in statements:
            if "set_config" in statement:
                conn.exec_driver_sql(statement, parameters)
                print(f"\n(planner settings for what follows: {parameters})")
                continue
            if (
                not statement.lstrip().upper().startswith("SELECT")
                or "incident_digests" not in statement
                or "pg_class" in statement
            ):
                continue
            plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters).all()
            print("\n" + statement.strip() + "\n  params: " + repr(parameters)[:300])
            print("\n".join("  " + row[0] for row in plan))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--incidents", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument(
        "--keep",
        metavar="DATABASE",
        help="load into this database and keep it; a later run with the same name and count reuses it",
    )
    args = parser.parse_args()

    db = args.keep or f"rca_bench_{secrets.token_hex(4)}"
    admin = psycopg.conninfo.conninfo_to_dict(ADMIN_DSN)
    dsn = psycopg.conninfo.make_conninfo(ADMIN_DSN, dbname=db)
    url = (
        f"postgresql+psycopg://{admin.get('user', 'postgres')}@{admin.get('host', '127.0.0.1')}:"
        f"{admin.get('port', 5432)}/{db}"
    )
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{db}"')
    proc = None
    try:
        from rca.store.db import migrate

        migrate(url)
        if exists and _incident_count(dsn) == args.incidents:
            print(f"database {db}: reusing its {args.incidents:,} incidents", flush=True)
        else:
            if exists:
                raise SystemExit(f"database {db} holds {_incident_count(dsn):,} incidents, not {args.incidents:,}")
            print(f"database {db}: loading {args.incidents:,} incidents with COPY", flush=True)
            load(dsn, args.incidents, args.seed)
        prewarm(dsn)
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RCA_")} | {
            "RCA_DATABASE_URL": url,
            "RCA_API_TOKENS": API_TOKEN,
            "RCA_WEBHOOK_TOKEN": secrets.token_urlsafe(16),
            "RCA_LOG_LEVEL": "WARNING",
            "RCA_DATA_DIR": str(Path("/tmp") / db),
        }
        proc = subprocess.Popen([str(REPO / ".venv" / "bin" / "rca"), "serve", "--port", str(port)], env=env)
        base = f"http://127.0.0.1:{port}"
        wait_until_serving(base, proc)
        timings = measure(base, args.requests, args.incidents, args.seed)
        every = [t for values in timings.values() for t in values]
        print(f"\n{len(every)} requests over HTTP against {args.incidents:,} incidents (sequential, one client):")
        print(f"{'kind':<22}{'n':>5}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}")
        for kind, values in sorted(timings.items()):
            print(
                f"{kind:<22}{len(values):>5}{percentile(values, 50):>10.1f}{percentile(values, 95):>10.1f}"
                f"{max(values):>10.1f}"
            )
        print(
            f"{'ALL':<22}{len(every):>5}{percentile(every, 50):>10.1f}{percentile(every, 95):>10.1f}{max(every):>10.1f}"
        )
        refresh = measure_refresh(url, args.incidents, args.seed)
        print(
            f"\ndigest refresh (what every webhook, finished analysis and feedback adds), {len(refresh)} incidents: "
            f"p50 {percentile(refresh, 50):.1f} ms, p95 {percentile(refresh, 95):.1f} ms"
        )
        slowest = max(timings, key=lambda k: percentile(timings[k], 95))
        explain_slowest(url, slowest, args.seed)
    finally:
        tear_down(proc, url, db, keep=args.keep)


def tear_down(proc: subprocess.Popen[bytes] | None, url: str, db: str, *, keep: bool) -> None:
    """Stop the bench's server, close its connections, and drop its database unless kept."""
    if proc is not None:
        proc.terminate()
        proc.wait(timeout=15)
    from rca.store.db import get_engine

    get_engine(url).dispose()
    if keep:
        print(f"\ndatabase {db} kept")
    else:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        print(f"\ndatabase {db} dropped")


def _incident_count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM incidents").fetchone()[0]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


if __name__ == "__main__":
    main()
