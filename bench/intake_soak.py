"""Benchmark: memory of the real `rca serve` under 10 minutes of steady webhook load.

Starts `rca serve` (bench/intake_load.py: a fresh database, a private Redis as the broker, no
worker consuming it) and sends `--rate` webhooks per second, open-loop, for `--minutes`: of every
ten, one opens a new group, one resolves a known group (whose next notification opens a new
incident) and eight re-send known firing groups. Every 10 s it samples the resident memory of the
server's processes, after a minute of the same load to warm the server up. The database and Redis
are removed at the end.

    .venv/bin/python bench/intake_soak.py                      # 1 + 10 minutes at 100/s
    .venv/bin/python bench/intake_soak.py --minutes 2 --rate 50

Prints one row per 10 s (answers, p99, errors, the server's RSS; the warm-up's rows marked), then
the RSS growth over the soak (from the end of the warm-up to the last sample), and exits 1 when it
is over 10 % or a notification was lost.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

from intake_load import (
    count_rows,
    distinct_group,
    drive,
    load_average,
    percentile,
    request_bytes,
    resent_group,
    rss_mib,
    service,
    split,
)

SAMPLE_SECONDS = 10
WARM_UP_SECONDS = 60  # a fresh process fills its caches first (compiled SQL, pooled connections, lazy imports)
GROWTH_LIMIT = 0.10


def _mixed(run: str, start: int, count: int, groups: int) -> list[bytes]:
    """Requests `start` .. `start + count` of the mix: new group, resolve, or re-send."""
    bodies = []
    for i in range(start, start + count):
        if i % 10 == 0:
            bodies.append(distinct_group(run, i))
        elif i % 10 == 9:
            bodies.append(resent_group(run, (i // 10) % groups, status="resolved"))
        else:
            bodies.append(resent_group(run, i % groups))
    return bodies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, help="rca serve --workers (default: the server's own default)")
    parser.add_argument("--rate", type=float, default=100, help="webhooks per second")
    parser.add_argument("--minutes", type=float, default=10, help="the soak, after a minute of warm-up")
    parser.add_argument("--clients", type=int, default=2, help="load-generator processes")
    parser.add_argument("--groups", type=int, default=500, help="known groups the re-sends and resolves cycle through")
    parser.add_argument("--out", type=Path, default=Path("/tmp/rca-intake-bench"), help="the server's log goes here")
    args = parser.parse_args()
    run = uuid.uuid4().hex[:6]
    per_sample = int(args.rate * SAMPLE_SECONDS)
    samples: list[float] = []
    before = 0.0  # RSS at the end of the warm-up
    accepted = 0
    errors: dict[str, int] = {}
    with service(args.workers, args.out / f"soak-{run}") as svc:
        pids = svc.server_pids()
        print(f"rca serve pid {svc.server.pid} ({len(pids)} processes), database {svc.database}, {args.rate:g}/s")
        print(f"{'elapsed s':>9}{'answered/s':>11}{'errors':>7}{'p99 ms':>8}{'RSS MiB':>9}  load avg")
        began = time.monotonic()
        sent = 0
        while time.monotonic() - began < WARM_UP_SECONDS + args.minutes * 60:
            bodies = _mixed(run, sent, per_sample, args.groups)
            requests = [request_bytes(svc.base_port, svc.token, body) for body in bodies]
            tally, seconds = drive(svc.base_port, split(requests, args.clients), args.rate)
            sent += per_sample
            accepted += len(tally.latencies)
            for kind, count in tally.statuses.items():
                errors[kind] = errors.get(kind, 0) + count
            rss = rss_mib(svc.server_pids())
            elapsed = time.monotonic() - began
            warming = elapsed < WARM_UP_SECONDS
            if warming:
                before = rss
            else:
                samples.append(rss)
            print(
                f"{elapsed:>9.0f}{len(tally.latencies) / seconds:>11.0f}{sum(tally.statuses.values()):>7}"
                f"{percentile(tally.latencies, 0.99) * 1000:>8.1f}{rss:>9.1f}  {load_average()}"
                + ("  (warm-up)" if warming else ""),
                flush=True,
            )
        stored = count_rows(svc.dsn)
    growth = samples[-1] / before - 1
    lost = accepted - stored["notifications"]
    print()
    print(
        f"RSS: {before:.1f} MiB after the warm-up, {samples[-1]:.1f} MiB at the end, peak {max(samples):.1f} MiB; "
        f"growth {growth:+.1%} over {args.minutes:g} minutes (limit {GROWTH_LIMIT:.0%})"
    )
    print(f"accepted {accepted}, errors {sum(errors.values())} {errors or ''}")
    print(f"stored {stored['notifications']} notifications ({stored}); lost: {lost}")
    if lost or growth > GROWTH_LIMIT:
        sys.exit(1)


if __name__ == "__main__":
    main()
