"""Benchmark: server time of the incident pages at 1,000,000 incidents, and an incident page's
total transfer.

Loads a throwaway Postgres database as bench/search_latency.py does (COPY, `--incidents`, the
same realistic mix, `--keep NAME` to reuse it), starts the real service (`rca serve`) on it with
the demo's recorded Prometheus window replayed at loopback (rca/collect/replay.py), and posts the
demo's alert `--rich` times: each investigated in-process through the real pipeline, so those
incidents carry findings, hypotheses and their kept series (rca/domain/series.py), the heaviest
pages there are. Then, sequentially over HTTP with a bearer token, it measures:

- `incident`: `/incidents/{id}` of those rich incidents and of loaded ones;
- `list`: `/` (newest first), with status, top cause, confirmed, full-text filters, and the next page by cursor;
- the same reads through the JSON API (`/api/v1/incidents/{id}` plus its `/similar`, and the search), to
  tell what the pages add from what the reads cost;

and prints p50/p95/max per kind (client-side wall time on loopback, which includes the transfer),
and the bytes of one incident page and every file it loads (as sent: the service does not compress).

    .venv/bin/python bench/pages.py --incidents 1000000 --requests 300
"""

from __future__ import annotations

import argparse
import os
import random
import re
import secrets
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import httpx
import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import search_latency  # noqa: E402  (the loader of the 1M-incident database)

from tests.helpers.demo_incident import demo_payload, replayed_window  # noqa: E402
from tests.helpers.processes import wait_until_serving  # noqa: E402

TARGET_MS = 100
TRANSFER_LIMIT = 300 * 1024
LIST_PARAMS: list[dict[str, str]] = [
    {},
    {"status": "firing"},
    {"category": "kv_memory_pressure"},
    {"confirmed": "yes"},
    {"q": "kv cache"},
    {"q": "gpu-node-0042"},
]


def investigate_demo(base: str, webhook_token: str, api_token: str, alert_start: float, count: int) -> list[int]:
    """Post the demo's alert `count` times (distinct groups) and wait for each investigation."""
    ids = []
    with httpx.Client(base_url=base, timeout=30) as client:
        for n in range(count):
            payload = demo_payload(alert_start, f"bench-{n}-{secrets.token_hex(3)}")
            reply = client.post(
                "/api/v1/alertmanager", json=payload, headers={"Authorization": f"Bearer {webhook_token}"}
            )
            reply.raise_for_status()
            ids.append(reply.json()["incident_id"])
        deadline = time.monotonic() + 120
        for incident_id in ids:
            while True:
                inv = client.get(
                    f"/api/v1/incidents/{incident_id}", headers={"Authorization": f"Bearer {api_token}"}
                ).json()["investigation"]
                if inv and inv["status"] == "done":
                    break
                if time.monotonic() > deadline or (inv and inv["status"] == "failed"):
                    raise SystemExit(f"incident {incident_id}: investigation did not finish: {inv}")
                time.sleep(0.2)
    return ids


def measure(base: str, token: str, rich: list[int], incidents: int, requests: int, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    timings: dict[str, list[float]] = defaultdict(list)
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:

        def get(*paths: str, params: dict[str, str] | None = None) -> tuple[float, httpx.Response]:
            """Milliseconds for these requests one after the other, and the last answer."""
            t = time.perf_counter()
            for path in paths:
                reply = client.get(path, params=params)
                if reply.status_code != 200:
                    raise SystemExit(f"{path} {params} -> {reply.status_code} {reply.text[:300]}")
            return (time.perf_counter() - t) * 1000, reply

        for warm in range(10):
            get(f"/incidents/{rich[warm % len(rich)]}", "/")
        for n in range(requests):
            if n % 2:
                timings["incident (investigated, with charts)"].append(get(f"/incidents/{rng.choice(rich)}")[0])
            else:
                timings["incident (loaded)"].append(get(f"/incidents/{rng.randint(incidents // 2, incidents)}")[0])
            elapsed, page = get("/", params=dict(rng.choice(LIST_PARAMS)))
            timings["list"].append(elapsed)
            found = re.search(r'href="/\?([^"]*cursor=[^"]*)" rel="next"', page.text)
            if found and n % 4 == 0:
                timings["list (next page)"].append(get("/?" + found.group(1).replace("&amp;", "&"))[0])
            if n % 4 == 1:  # the same reads through the JSON API: what the pages add, what the reads cost
                chosen = rng.choice(rich)
                both = (f"/api/v1/incidents/{chosen}", f"/api/v1/incidents/{chosen}/similar")
                timings["API: incident + similar (JSON)"].append(get(*both)[0])
                timings["API: list (JSON)"].append(get("/api/v1/incidents", params=dict(rng.choice(LIST_PARAMS)))[0])
    return timings


def transfer(base: str, token: str, incident_id: int) -> list[tuple[str, int]]:
    """Bytes of the incident page and of every script and stylesheet it loads."""
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        page = client.get(f"/incidents/{incident_id}")
        sizes = [(f"/incidents/{incident_id}", len(page.content))]
        for url in re.findall(r'<(?:script|link)[^>]+(?:src|href)="(/[^"]+)"', page.text):
            sizes.append((url, len(client.get(url).content)))
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--incidents", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rich", type=int, default=5, help="demo incidents investigated through the pipeline")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--keep", metavar="DATABASE", help="load into this database and keep it for later runs")
    args = parser.parse_args()

    db = args.keep or f"rca_bench_{secrets.token_hex(4)}"
    admin = psycopg.conninfo.conninfo_to_dict(search_latency.ADMIN_DSN)
    dsn = psycopg.conninfo.make_conninfo(search_latency.ADMIN_DSN, dbname=db)
    url = (
        f"postgresql+psycopg://{admin.get('user', 'postgres')}@{admin.get('host', '127.0.0.1')}:"
        f"{admin.get('port', 5432)}/{db}"
    )
    with psycopg.connect(search_latency.ADMIN_DSN, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{db}"')
    proc = None
    api_token, webhook_token = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    try:
        from rca.store.db import migrate

        migrate(url)
        count = search_latency._incident_count(dsn)
        if exists and count >= args.incidents:
            print(f"database {db}: reusing its {count:,} incidents", flush=True)
        else:
            if exists:
                raise SystemExit(f"database {db} holds {count:,} incidents, not {args.incidents:,}")
            print(f"database {db}: loading {args.incidents:,} incidents with COPY", flush=True)
            search_latency.load(dsn, args.incidents, args.seed)
        search_latency.prewarm(dsn)
        with replayed_window() as (prometheus_url, alert_start):
            port = search_latency._free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("RCA_")} | {
                "RCA_DATABASE_URL": url,
                "RCA_API_TOKENS": api_token,
                "RCA_WEBHOOK_TOKEN": webhook_token,
                "RCA_PROMETHEUS_URL": prometheus_url,
                "RCA_LOG_LEVEL": "WARNING",
                "RCA_DATA_DIR": str(Path("/tmp") / db),
            }
            proc = subprocess.Popen([str(REPO / ".venv" / "bin" / "rca"), "serve", "--port", str(port)], env=env)
            base = f"http://127.0.0.1:{port}"
            wait_until_serving(base, proc)
            rich = investigate_demo(base, webhook_token, api_token, alert_start, args.rich)
            timings = measure(base, api_token, rich, args.incidents, args.requests, args.seed)
            sizes = transfer(base, api_token, rich[0])
        print(f"\nserver time over HTTP, {args.incidents:,} incidents (sequential, one client, loopback):")
        print(f"{'page':<40}{'n':>5}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}")
        for kind, values in sorted(timings.items()):
            p95 = search_latency.percentile(values, 95)
            verdict = "ok" if p95 <= TARGET_MS else f"OVER {TARGET_MS} ms"
            print(
                f"{kind:<40}{len(values):>5}{search_latency.percentile(values, 50):>10.1f}{p95:>10.1f}"
                f"{max(values):>10.1f}  {verdict}"
            )
        total = sum(size for _, size in sizes)
        print(f"\nincident page transfer (uncompressed): {total / 1024:.1f} KiB (limit {TRANSFER_LIMIT // 1024} KiB)")
        for path, size in sizes:
            print(f"  {size / 1024:8.1f} KiB  {path}")
    finally:
        search_latency.tear_down(proc, url, db, keep=args.keep)


if __name__ == "__main__":
    main()
