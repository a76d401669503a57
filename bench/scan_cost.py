"""Scan cost benchmark: one fleet scan of N serving targets against a real Prometheus.

    PATH=/path/to/prometheus/bin:$PATH .venv/bin/python bench/scan_cost.py                 # 1,000 targets
    .venv/bin/python bench/scan_cost.py --targets 200 --soak-scans 120

Backfills (promtool) a synthetic fleet: per target a vLLM V1 engine (waiting gauge, prefix-cache
counters, TTFT histogram) and a node_exporter with pinned (isolcpus) cores, over the scan's
history, then times `Scanner.scan` (the queries, their answers and every target's forecast) and
counts its PromQL queries. The first scan also reads the day-before baselines; the figures of
the following scans are the steady cost. `--soak-scans` repeats the scan and reports the
process's resident memory before and after (the issue asks for memory flat over a 1-hour soak:
120 scans are an hour at the default 30 s). Targets: <= 2 s and <= 30 queries per scan at 1,000.
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rca.config import Settings  # noqa: E402
from rca.scan.scanner import Scanner, prometheus_fleet_source  # noqa: E402
from tests.e2e import promstack  # noqa: E402

STEP = 30
TTFT_BUCKETS = ("0.25", "0.5", "1", "2", "5", "+Inf")


def write_history(path: Path, targets: int, start: float, end: float) -> int:
    """OpenMetrics history of the fleet, one series at a time; returns the number of series."""
    rng = random.Random(7)
    series = 0
    with path.open("w") as out:
        for n in range(targets):
            host = f"host-{n:04d}"
            serving = f'instance="{host}:8000",job="vllm",model_name="m"'
            node = f'instance="{host}",job="node"'
            times = [start + i * STEP for i in range(int((end - start) // STEP))]
            waiting = 1 + rng.random() * 2
            counters = {
                f"vllm:prefix_cache_queries_total{{{serving}}}": 4000.0,
                f"vllm:prefix_cache_hits_total{{{serving}}}": 3000.0,
                **{f'node_cpu_seconds_total{{{node},cpu="{c}",mode="idle"}}': 0.5 for c in range(4)},
            }
            share = {"0.25": 0.3, "0.5": 0.6, "1": 0.85, "2": 0.97, "5": 0.995, "+Inf": 1.0}
            for le in TTFT_BUCKETS:
                counters[f'vllm:time_to_first_token_seconds_bucket{{{serving},le="{le}"}}'] = 8 * share[le]
            for name, per_second in counters.items():
                total = 0.0
                for t in times:
                    total += per_second * STEP * (0.9 + 0.2 * rng.random())
                    out.write(f"{name} {total:.6g} {t:.0f}\n")
                series += 1
            gauges = {  # name: (level, relative noise)
                f"vllm:num_requests_waiting{{{serving}}}": (waiting, 0.2),
                f"vllm:kv_cache_usage_perc{{{serving}}}": (0.55, 0.1),
                **{f'node_cpu_isolated{{{node},cpu="{c}"}}': (1.0, 0.0) for c in (2, 3)},
            }
            for name, (level, noise) in gauges.items():
                for t in times:
                    out.write(f"{name} {level * (1 + noise * (2 * rng.random() - 1)):.6g} {t:.0f}\n")
                series += 1
        out.write("# EOF\n")
    return series


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--scans", type=int, default=5, help="timed scans after the first")
    parser.add_argument("--soak-scans", type=int, default=0, help="further scans for the memory figure")
    args = parser.parse_args()
    if not (promstack.PROMETHEUS and promstack.PROMTOOL):
        raise SystemExit("prometheus and promtool are needed: apt-get install -y prometheus")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        end = time.time()
        start = end - 80 * 60  # the scan's hour, the 10-minute median's window and rate()'s 5 minutes
        began = time.perf_counter()
        source = work / "history.om"
        series = write_history(source, args.targets, start, end)
        (work / "tsdb").mkdir()
        subprocess.run(
            [promstack.PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source), str(work / "tsdb")],
            check=True,
            capture_output=True,
            timeout=1800,
        )
        source.unlink()
        print(f"backfilled {args.targets} targets, {series} series in {time.perf_counter() - began:.0f} s")
        proc, url = promstack.start_prometheus(work, promstack.free_port(), None)
        try:
            # A generous query timeout: the figure is the scan's time, however long it is.
            settings = Settings(prometheus_url=url, prometheus_timeout_seconds=300)
            scanner = Scanner(settings, prometheus_fleet_source(settings))
            at = datetime.fromtimestamp(end - 30, UTC)
            first = scanner.scan(at)
            print(f"first scan: {len(first.targets)} targets, {first.queries} queries, {first.seconds:.2f} s")
            timed = [scanner.scan(at) for _ in range(args.scans)]
            seconds = [r.seconds for r in timed]
            print(
                f"steady scans ({len(timed)}): {timed[0].queries} queries each, "
                f"median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s"
            )
            if args.soak_scans:
                before = rss_mib()
                for _ in range(args.soak_scans):
                    scanner.scan(at)
                print(f"soak: {args.soak_scans} scans, max RSS {before:.0f} MiB before, {rss_mib():.0f} MiB after")
        finally:
            proc.stop()


if __name__ == "__main__":
    main()
