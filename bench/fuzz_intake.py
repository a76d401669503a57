"""Benchmark: the corpus-driven fuzzer (tests/fuzz/) against a real `rca serve` on PostgreSQL.

Creates a throwaway Postgres database, migrates it, starts `rca serve` on it (the embedded queue:
accepted notifications are investigated in the server's own threads, as a one-machine install
runs), posts the seed corpus, then sends N fuzzed requests from a seeded RNG, each over its own
socket, byte for byte (malformed JSON, NaN, nesting, every documented limit at and over,
encodings, duplicate keys, extreme times, wrong types, bad search parameters and cursors, feedback
bodies, chunked and mismatched framing). The database is dropped at the end.

    .venv/bin/python bench/fuzz_intake.py --requests 5000 --seed 1

Prints the answers by status and by operation, every rule broken (a 5xx, a dropped connection, an
undocumented status or error shape, rows stored from a refused request, an accepted notification
not stored, an answer the mutation alone called for that did not come), the server's RSS at start,
every 1,000 requests and at the end (memory bounded), and how many errors the server logged. Each
failing request is saved to --out (its body as sent, what was sent and the answer). Exits 1 when a
5xx or a row stored from a refusal was found.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rca.store.db import get_engine, migrate  # noqa: E402
from tests.fuzz import corpus  # noqa: E402
from tests.fuzz.engine import (  # noqa: E402
    INTAKE_TABLES,
    Case,
    Failure,
    Reply,
    documented_statuses,
    generate,
    make_context,
    run,
    save,
    send_raw,
)
from tests.helpers.processes import wait_until_serving  # noqa: E402

ADMIN_DSN = os.environ.get("BENCH_POSTGRES_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
BODY_TIMEOUT = 2  # RCA_REQUEST_BODY_TIMEOUT_SECONDS: what a body that never ends costs


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_kib(pid: int) -> tuple[int, int]:
    """The process's resident set and its peak (VmRSS, VmHWM), in KiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("/tmp/rca-fuzz-failures"), help="failing requests go here")
    parser.add_argument("--slow", type=int, default=5, help="bodies that never end (each waits out the timeout)")
    args = parser.parse_args()

    db = f"rca_fuzz_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    dsn = ADMIN_DSN.rsplit("/", 1)[0] + f"/{db}"
    url = dsn.replace("postgresql://", "postgresql+psycopg://", 1)
    webhook_token, api_token = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    run_dir = args.out / f"seed-{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    proc: subprocess.Popen[bytes] | None = None
    try:
        migrate(url)
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RCA_")} | {
            "RCA_DATABASE_URL": url,
            "RCA_API_TOKENS": api_token,
            "RCA_WEBHOOK_TOKEN": webhook_token,
            "RCA_LOG_LEVEL": "WARNING",
            "RCA_REQUEST_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
            "RCA_DATA_DIR": str(run_dir / "data"),
        }
        server_log = run_dir / "server.log"
        with server_log.open("wb") as sink:
            proc = subprocess.Popen(
                [str(REPO / ".venv" / "bin" / "rca"), "serve", "--port", str(port)],
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        base = f"http://127.0.0.1:{port}"
        wait_until_serving(base, proc)
        with httpx.Client(base_url=base, timeout=30) as client:
            seeded = [
                client.post(corpus.WEBHOOK_PATH, json=seed, headers={"Authorization": f"Bearer {webhook_token}"})
                for seed in corpus.webhook_seeds()
            ]
            if any(r.status_code != 200 for r in seeded):
                raise SystemExit(f"a seed was refused: {[(r.status_code, r.text[:200]) for r in seeded]}")
            statuses = documented_statuses(client.get("/openapi.json").json())
        ctx = make_context(
            webhook_token,
            api_token,
            sorted({r.json()["incident_id"] for r in seeded}),
            slow=args.slow,
            asgi_headers=False,
        )
        cases = generate(args.seed, args.requests, ctx)

        counts = "SELECT " + ", ".join(f"(SELECT count(*) FROM {t}) AS {t}" for t in INTAKE_TABLES)
        counter = psycopg.connect(dsn, autocommit=True)

        def count_rows() -> dict[str, int]:
            row = counter.execute(counts).fetchone()
            assert row is not None
            return dict(zip(INTAKE_TABLES, row, strict=True))

        rss_start, _ = rss_kib(proc.pid)
        samples: list[tuple[int, int]] = [(0, rss_start)]
        sent = 0

        def send(case: Case) -> Reply:
            nonlocal sent
            sent += 1
            if sent % 1000 == 0 and proc is not None:
                samples.append((sent, rss_kib(proc.pid)[0]))
                print(f"  {sent:>6} requests, server RSS {samples[-1][1] / 1024:.1f} MiB", flush=True)
            return send_raw("127.0.0.1", port, case, timeout=BODY_TIMEOUT + 20)

        def on_failure(failure: Failure) -> None:
            stem = save(failure, run_dir / "failures")
            print(f"  #{failure.case.index} [{failure.case.kind}]: {'; '.join(failure.problems)[:300]} -> {stem}")

        print(f"rca serve pid {proc.pid} on port {port}, database {db}; {len(cases)} fuzzed requests, seed {args.seed}")
        tally = run(cases, send, count_rows, statuses, on_failure)
        time.sleep(1)  # investigations of the last notifications finish in the server's threads
        rss_end, rss_peak = rss_kib(proc.pid)
        counter.close()
        alive = proc.poll() is None
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=15)
        get_engine(url).dispose()
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

    log_text = server_log.read_text(errors="replace")
    unhandled = log_text.count("Exception in ASGI application")
    error_lines = sum(1 for line in log_text.splitlines() if line.startswith("ERROR"))
    print()
    print(tally.summary())
    print(f"  5xx and dropped answers: {tally.server_errors}  (saved under {run_dir / 'failures'})")
    print(f"  rows stored from refused requests: {tally.stored_on_refusal}")
    print(f"  other rules broken: {len(tally.failures) - tally.server_errors}")
    print(f"  throughput: {sum(tally.by_status.values()) / tally.seconds:.0f} requests/s (sequential, one socket each)")
    print(
        f"  server RSS: start {rss_start / 1024:.1f} MiB, end {rss_end / 1024:.1f} MiB, "
        f"peak {rss_peak / 1024:.1f} MiB; every 1,000: {', '.join(f'{kib / 1024:.0f}' for _, kib in samples)} MiB"
    )
    print(f"  server log: {unhandled} unhandled exceptions, {error_lines} ERROR lines ({server_log}); alive: {alive}")
    if tally.server_errors or tally.stored_on_refusal or not alive:
        sys.exit(1)


if __name__ == "__main__":
    main()
