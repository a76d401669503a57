"""Restarts read from real Prometheus: each serving target's process start, in one query, and a
restarted target's early signals held by the states while a long-running one's are not."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from rca.config import Settings
from rca.scan.forecast import Limit, SignalForecast
from rca.scan.restarts import started, with_starts
from rca.scan.scanner import prometheus_fleet_source
from rca.scan.states import Assessment, Policy, ScanState, TargetMemory, advance
from tests.e2e import promstack

HIT = Limit("prefix_cache_hit_rate", "Prefix-cache hit rate", "ratio", "<", 0.61)


def test_a_restarted_target_is_told_apart_and_its_cold_cache_does_not_warn(tmp_path: Path) -> None:
    assert promstack.PROMETHEUS and promstack.PROMTOOL, "apt-get install -y prometheus"
    now = time.time() // 60 * 60
    restarted_at, long_ago = now - 300, now - 5 * 86400
    lines = []
    for ts in range(int(now - 1800), int(now) + 1, 15):
        lines.append(f'process_start_time_seconds{{instance="old:8000",job="vllm"}} {long_ago} {ts}')
    for ts in range(int(now - 1800), int(now) + 1, 15):
        start = restarted_at if ts >= restarted_at else long_ago
        lines.append(f'process_start_time_seconds{{instance="new:8000",job="vllm"}} {start} {ts}')
    source = tmp_path / "history.om"
    source.write_text("\n".join(lines) + "\n# EOF\n")
    promstack.blocks_from(source, tmp_path / "tsdb", timeout=120)
    proc, url = promstack.start_prometheus(tmp_path, promstack.free_port(), None)
    try:
        settings = Settings(prometheus_url=url)
        fleet = prometheus_fleet_source(settings)
        found = started(fleet, datetime.fromtimestamp(now, UTC))
        before = started(fleet, datetime.fromtimestamp(now - 600, UTC))
    finally:
        proc.stop()
    assert found == {"old:8000": long_ago, "new:8000": restarted_at}
    assert before["new:8000"] == long_ago and fleet.queries == 2  # one query a scan, whatever the fleet

    cold = SignalForecast(HIT, "test", 0.3, 0.78, -0.01, None, True, True, now - 240)
    assessments = {i: Assessment(at=now, signals=[cold]) for i in ("old:8000", "new:8000", "gone:8000")}
    marked = with_starts(assessments, found)
    assert marked["gone:8000"].started_at is None  # no process series: never taken for restarted
    policy = Policy(sustain=1)
    states = {i: advance(TargetMemory(), a, policy)[0].state for i, a in marked.items()}
    assert states == {"old:8000": ScanState.WARNING, "new:8000": ScanState.OK, "gone:8000": ScanState.WARNING}
