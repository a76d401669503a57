"""Scan cost benchmark: the fleet scan of N serving targets against a real Prometheus, from the
scanner's start through an hour of scans.

    PATH=/path/to/prometheus/bin:$PATH .venv/bin/python bench/scan_cost.py                 # 1,000 targets
    .venv/bin/python bench/scan_cost.py --targets 1000 --scans 10 --soak-scans 120

Backfills (promtool, `tests/helpers/scan_fleet.py`) a synthetic fleet: per target a vLLM V1
engine (waiting gauge, prefix-cache counters, TTFT histogram) and a node_exporter with pinned
(isolcpus) cores, over the stretches the scans read: this hour and the same hour yesterday (the
baseline's window), for as long as the scans run. Then it scans every 30 s of that history, as
the scheduler would, timing `Scanner.scan` (the queries, their answers and every target's
forecast) and counting its PromQL queries:

- the first scan, and the scans until no target is warming (the scanner reads the history it
  lacks in pieces of RCA_SCAN_FILL_POINTS points, newest first);
- `--scans` steady scans after that: the cost of every scan from then on;
- `--soak-scans` more, with the process's resident memory before and after (the issue asks for
  memory flat over a 1-hour soak: 120 scans are an hour at the default 30 s).

Targets: <= 2 s and <= 30 queries per scan at 1,000.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rca.config import Settings  # noqa: E402
from rca.scan.scanner import (  # noqa: E402
    BASELINE_SECONDS,
    BASELINE_STEP_SECONDS,
    Scanner,
    baseline_window,
    prometheus_fleet_source,
)
from tests.e2e import promstack  # noqa: E402
from tests.helpers.scan_fleet import write_history  # noqa: E402

STEP = 30
LEAD_IN = 15 * 60  # history before a window's start: rate()'s 5 minutes, the queue median's 10


def rss_mib() -> float:
    """The process's resident memory now (VmRSS), in MiB."""
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def warming_bound(settings: Settings, targets: int) -> int:
    """Twice the scans the fill needs at most: the margin of history the bench writes for them."""
    steps = settings.scan_history_minutes * 60 / STEP + BASELINE_SECONDS / BASELINE_STEP_SECONDS + 2
    return 2 * math.ceil(steps / max(1, settings.scan_fill_points // targets)) + 2


@dataclass(frozen=True)
class Cost:
    """What one scan cost (the bench keeps these, not the scans' reports, which it would soak in)."""

    seconds: float
    queries: int
    targets: int
    warming: int


def queries(costs: list[Cost]) -> str:
    low, high = min(c.queries for c in costs), max(c.queries for c in costs)
    return f"{low}" if low == high else f"{low}-{high}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--scans", type=int, default=5, help="timed steady scans once no target warms")
    parser.add_argument("--soak-scans", type=int, default=0, help="further scans for the memory figure")
    args = parser.parse_args()
    if not (promstack.PROMETHEUS and promstack.PROMTOOL):
        raise SystemExit("prometheus and promtool are needed: apt-get install -y prometheus")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # A generous query timeout: the figure is the scan's time, however long it is.
        settings = Settings(prometheus_timeout_seconds=300, scan_interval_seconds=STEP)
        scans = 1 + warming_bound(settings, args.targets) + args.scans + args.soak_scans
        end = time.time() // 60 * 60 - 60
        first_at = end - scans * STEP
        today = (first_at - settings.scan_history_minutes * 60 - LEAD_IN, end + 1)
        yesterday = (baseline_window(first_at)[0] - LEAD_IN, baseline_window(end)[1] + BASELINE_STEP_SECONDS)
        began = time.perf_counter()
        source = work / "history.om"
        hosts = {f"host-{n:04d}": [yesterday, today] for n in range(args.targets)}
        series = write_history(source, hosts, STEP)
        promstack.blocks_from(source, work / "tsdb", timeout=3600)
        print(
            f"backfilled {args.targets} targets, {series} series, today's {(today[1] - today[0]) / 60:.0f} min "
            f"and yesterday's {(yesterday[1] - yesterday[0]) / 60:.0f} min, in {time.perf_counter() - began:.0f} s"
        )
        proc, url = promstack.start_prometheus(work, promstack.free_port(), None)
        try:
            settings = settings.model_copy(update={"prometheus_url": url})
            scanner = Scanner(settings, prometheus_fleet_source(settings))
            at = first_at

            def scan() -> Cost:
                nonlocal at
                report = scanner.scan(datetime.fromtimestamp(at, UTC))
                at += STEP
                return Cost(report.seconds, report.queries, len(report.targets), len(report.warming))

            first = scan()
            print(
                f"first scan: {first.targets} targets, {first.warming} warming, "
                f"{first.queries} queries, {first.seconds:.2f} s"
            )
            warming = [first]
            while warming[-1].warming and at < end:
                warming.append(scan())
            if warming[-1].warming:
                raise SystemExit(f"still {warming[-1].warming} targets warming after {len(warming)} scans")
            minutes = (len(warming) - 1) * STEP / 60
            print(
                f"warming: no target warming after {len(warming) - 1} scans ({minutes:.1f} min); "
                f"those scans max {max(c.seconds for c in warming):.2f} s, {queries(warming)} queries"
            )
            timed = [scan() for _ in range(args.scans)]
            seconds = [c.seconds for c in timed]
            print(
                f"steady scans ({len(timed)}): {queries(timed)} queries, "
                f"median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s"
            )
            if args.soak_scans:
                before = rss_mib()
                soak = [scan() for _ in range(args.soak_scans)]
                print(
                    f"soak: {len(soak)} scans ({len(soak) * STEP / 60:.0f} min of history), "
                    f"max {max(c.seconds for c in soak):.2f} s, {queries(soak)} queries, "
                    f"median {statistics.median(c.seconds for c in soak):.2f} s; "
                    f"RSS {before:.0f} MiB before, {rss_mib():.0f} MiB after (peak {peak_mib():.0f} MiB)"
                )
        finally:
            proc.stop()
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
