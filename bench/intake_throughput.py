"""Benchmark: webhook intake throughput of the real `rca serve` on PostgreSQL and Redis.

Starts `rca serve` (bench/intake_load.py: a fresh database, a private Redis as the broker, no
worker consuming it) and drives it open-loop at a series of rates, each for `--seconds`: first
notifications of distinct new groups (each a new incident, an investigation and an enqueue), then
re-sends of `--groups` known firing groups (each a notification row and an incident update). A
series stops at the first rate the server cannot hold. Every accepted notification is checked to be
stored. The database and Redis are removed at the end.

    .venv/bin/python bench/intake_throughput.py                 # workers: the server's default
    .venv/bin/python bench/intake_throughput.py --workers 1 --rates 50,100,200

Prints, per rate: what was offered and achieved, answers other than 200, latency from the moment
each request was due (p50, p99, max), the CPU of the server's processes, of the database's
backends, of Redis and of the load generator (percent of one core), the whole machine's busy share
and its load average, and what one webhook cost the server, the database and Redis together
(CPU ms per request: the figure that a busy machine distorts least); and per series the highest
rate held with p99 <= 100 ms and no errors. A warm-up of 200 notifications comes first.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

from intake_load import (
    Service,
    count_rows,
    cpu_by_pid,
    cpu_used,
    distinct_group,
    drive,
    load_average,
    machine_busy,
    percentile,
    request_bytes,
    resent_group,
    service,
    split,
)

P99_TARGET = 0.100
WARM_UP = 200  # notifications sent in 5 s before measuring: a fresh process compiles its SQL, fills its pools


def _phase(svc: Service, bodies: list[bytes], rate: float, clients: int) -> dict[str, float | str]:
    """Send the bodies at `rate` and measure what it cost whom."""
    requests = [request_bytes(svc.base_port, svc.token, body) for body in bodies]
    server_before = cpu_by_pid(svc.server_pids())
    postgres_before = cpu_by_pid(svc.postgres_pids())
    redis_before = cpu_by_pid([svc.redis.pid])
    busy = machine_busy()
    tally, seconds = drive(svc.base_port, split(requests, clients), rate)
    machine = busy()
    server = cpu_used(server_before, cpu_by_pid(svc.server_pids()))
    postgres = cpu_used(postgres_before, cpu_by_pid(list(postgres_before) + svc.postgres_pids()))
    redis = cpu_used(redis_before, cpu_by_pid([svc.redis.pid]))
    ok = len(tally.latencies)
    return {
        "offered": rate,
        "achieved": ok / seconds,
        "ok": ok,
        "errors": sum(tally.statuses.values()),
        "error_kinds": ",".join(f"{k}:{v}" for k, v in sorted(tally.statuses.items())) or "-",
        "p50": percentile(tally.latencies, 0.50) * 1000,
        "p99": percentile(tally.latencies, 0.99) * 1000,
        "max": max(tally.latencies, default=float("nan")) * 1000,
        "server": 100 * server / seconds,
        "postgres": 100 * postgres / seconds,
        "redis": 100 * redis / seconds,
        "client": 100 * tally.cpu_seconds / seconds,
        "cost": 1000 * (server + postgres + redis) / max(1, ok),
        "machine": 100 * machine,
        "load": load_average(),
    }


HEADER = (
    f"{'kind':<9}{'offered/s':>10}{'achieved/s':>11}{'ok':>7}{'errors':>7}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}"
    f"{'server%':>8}{'pg%':>6}{'redis%':>7}{'client%':>8}{'cpu ms/req':>11}{'machine%':>9}  load avg"
)


def _row(kind: str, r: dict[str, float | str]) -> str:
    return (
        f"{kind:<9}{r['offered']:>10.0f}{r['achieved']:>11.0f}{r['ok']:>7}{r['errors']:>7}{r['p50']:>8.1f}"
        f"{r['p99']:>8.1f}{r['max']:>8.0f}{r['server']:>8.0f}{r['postgres']:>6.0f}{r['redis']:>7.0f}"
        f"{r['client']:>8.0f}{r['cost']:>11.1f}{r['machine']:>9.0f}  {r['load']}"
        + (f"  [{r['error_kinds']}]" if r["errors"] else "")
    )


def _held(r: dict[str, float | str]) -> bool:
    return (
        r["errors"] == 0 and float(r["p99"]) <= P99_TARGET * 1000 and float(r["achieved"]) >= 0.95 * float(r["offered"])
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, help="rca serve --workers (default: the server's own default)")
    parser.add_argument("--rates", default="50,100,200,300,400,600,800,1000,1200", help="requests per second, in order")
    parser.add_argument("--seconds", type=float, default=10, help="length of each rate's run")
    parser.add_argument("--clients", type=int, default=2, help="load-generator processes")
    parser.add_argument("--groups", type=int, default=200, help="distinct groups the re-sends cycle through")
    parser.add_argument("--kinds", default="distinct,resend", help="which series to run")
    parser.add_argument("--out", type=Path, default=Path("/tmp/rca-intake-bench"), help="the server's log goes here")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    run = uuid.uuid4().hex[:6]
    accepted = 0
    held: dict[str, float] = {}
    with service(args.workers, args.out / run) as svc:
        print(f"rca serve pid {svc.server.pid} ({len(svc.server_pids())} processes), database {svc.database}")
        print(f"load average at start: {load_average()}  (2 cores shared with other work: see the machine column)")
        warm = [request_bytes(svc.base_port, svc.token, distinct_group(f"{run}-warm", i)) for i in range(WARM_UP)]
        accepted += len(drive(svc.base_port, split(warm, args.clients), WARM_UP / 5)[0].latencies)
        print(HEADER)
        for kind in args.kinds.split(","):
            if kind == "resend":  # the groups exist and fire before they are re-sent
                warm, _ = drive(
                    svc.base_port,
                    [[request_bytes(svc.base_port, svc.token, resent_group(run, g)) for g in range(args.groups)]],
                    100,
                )
                accepted += len(warm.latencies)
            held[kind] = 0
            for rate in rates:
                count = int(rate * args.seconds)
                if kind == "distinct":
                    bodies = [distinct_group(f"{run}-{rate:g}", i) for i in range(count)]
                else:
                    bodies = [resent_group(run, i % args.groups) for i in range(count)]
                result = _phase(svc, bodies, rate, args.clients)
                accepted += int(result["ok"])
                print(_row(kind, result), flush=True)
                if _held(result):
                    held[kind] = rate
                if float(result["achieved"]) < 0.9 * rate or float(result["p99"]) > 10 * P99_TARGET * 1000:
                    break  # saturated: higher rates only queue up
                time.sleep(2)  # let the database's background writers catch up between rates
        stored = count_rows(svc.dsn)
    print()
    for kind, rate in held.items():
        print(f"{kind}: held {rate:g}/s with p99 <= {P99_TARGET * 1000:.0f} ms and no errors")
    lost = accepted - stored["notifications"]
    print(f"accepted {accepted} notifications, stored {stored['notifications']} ({stored}); lost: {lost}")
    if lost:
        sys.exit(1)


if __name__ == "__main__":
    main()
