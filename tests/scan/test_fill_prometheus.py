"""The scanner's windows filled in pieces, on a real Prometheus: at its start and for a target
that appears later, each scan reads at most RCA_SCAN_FILL_POINTS of the history it has never
read, newest first; the targets whose windows still lack history are warming (their early
signals held, TTFT still judged, counted in rca_scan_warming_total); once warm, every target is
assessed as a scanner that read it all at once assesses it, on the median of the same hour
yesterday that Prometheus computes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from rca.scan.fleet import assign, discover, machines
from rca.scan.scanner import (
    BASELINE_MOVE_SECONDS,
    BASELINE_MOVE_STEPS,
    RE_READ_STEPS,
    Scanner,
    baseline_window,
    prometheus_fleet_source,
)
from rca.scan.service import EarlyWarnings, policy_of
from rca.signals.slo import TTFT_SIGNAL
from tests.e2e import promstack
from tests.helpers.scan_fleet import write_history
from tests.helpers.service import make_settings

DAY = 86400
FILL_POINTS = 24  # 12 steps a scan for two targets, 8 for three


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, float]]:
    """Prometheus holding two hosts' last 40 minutes and a third's last 8, and the same hour
    around this time yesterday for all three; `now` is on a minute."""
    assert promstack.PROMETHEUS and promstack.PROMTOOL, "apt-get install -y prometheus"
    workdir = tmp_path_factory.mktemp("fill")
    now = time.time() // 60 * 60
    yesterday = (now - DAY - 65 * 60, now - DAY + 31 * 60)
    source = workdir / "history.om"
    write_history(
        source,
        {
            "gpu-a": [yesterday, (now - 40 * 60, now + 1)],
            "gpu-b": [yesterday, (now - 8 * 60, now + 1)],
            "gpu-c": [yesterday, (now - 40 * 60, now + 1)],
        },
    )
    promstack.blocks_from(source, workdir / "tsdb", timeout=300)
    proc, url = promstack.start_prometheus(workdir, promstack.free_port(), None)
    try:
        yield url, now
    finally:
        proc.stop()


def test_history_comes_in_pieces_within_the_budget_and_warming_targets_are_judged_on_ttft_only(
    history: tuple[str, float], pg_db: str, tmp_path: Path
) -> None:
    url, now = history
    settings = make_settings(
        pg_db,
        tmp_path,
        prometheus_url=url,
        scan_interval_seconds=30,
        scan_history_minutes=15,
        scan_trend_minutes=5,
        scan_fill_points=FILL_POINTS,
    )
    policy = policy_of(settings)
    reads: list[tuple[float, float, int]] = []
    source = prometheus_fleet_source(settings)
    ranged = source.range_query
    source.range_query = lambda promql, start, end, step: (
        reads.append((start.timestamp(), end.timestamp(), step)) or ranged(promql, start, end, step)
    )
    scanner = Scanner(settings, source)
    ticks = EarlyWarnings(settings, scanner)
    counted = REGISTRY.get_sample_value("rca_scan_warming_total") or 0.0
    warming: list[set[str]] = []
    held_signals = 0  # early signals of warming targets the states did not judge
    at = now - 20 * 60
    while at <= now:
        reads.clear()
        rules_read = scanner.rules.read_at
        report, _ = ticks.tick(datetime.fromtimestamp(at, UTC))
        rules_queries = int(scanner.rules.read_at != rules_read)  # the first scan, then every 10 minutes
        spans = set(reads)
        # The new steps (this hour's last RE_READ_STEPS again and its new one, yesterday's next
        # minutes), and at most the budget of missing history: FILL_POINTS over the targets.
        steps = sum(round((end - start) / step) + 1 for start, end, step in spans)
        usual = RE_READ_STEPS + 1 + BASELINE_MOVE_STEPS
        assert steps <= FILL_POINTS // len(report.targets) + usual, (at, sorted(spans))
        # Its cost counts every query it sent: discovery, identities, start times, the reads (this
        # hour's, at the scan's step, carry the headroom series too, yesterday's do not), and
        # Prometheus' rules when it read them again.
        per_span = [len(scanner.queries) + (len(scanner.headroom_queries) if step == 30 else 0) for *_, step in spans]
        assert report.queries == 2 + len(scanner.profile.identities) + sum(per_span) + rules_queries
        for instance in report.warming:
            assessment = report.assessments[instance]
            held = assessment.held(policy)
            assert assessment.warming and {s.limit.signal for s in held.signals} <= {TTFT_SIGNAL}
            held_signals += len(assessment.signals) - len(held.signals)
        warming.append(report.warming)
        at += 30

    assert warming[0] == {"gpu-a:8000", "gpu-c:8000"}  # the third one exports nothing yet
    assert held_signals > 0
    warm_at = next(n for n, found in enumerate(warming) if not found)
    assert 3 <= warm_at <= 8, warming  # in pieces: 31 steps of this hour and 60 of yesterday's, 12 a scan
    appeared = next(n for n, found in enumerate(warming) if "gpu-b:8000" in found)
    assert appeared > warm_at and warming[appeared] == {"gpu-b:8000"}  # the others stay warm
    assert not warming[-1], warming  # and it warms in pieces too, 8 steps a scan
    assert REGISTRY.get_sample_value("rca_scan_warming_total") - counted == sum(len(w) for w in warming)

    whole = Scanner(settings, prometheus_fleet_source(settings), whole_reads=True)
    final = whole.scan(datetime.fromtimestamp(now, UTC))
    assert not final.warming
    for instance, assessment in final.assessments.items():
        kept = report.assessments[instance]
        assert [s.figures() for s in kept.signals] == [s.figures() for s in assessment.signals], instance
        assert kept.slo == assessment.slo

    # The baseline is Prometheus' own median of yesterday's hour (the subquery the scan ran before).
    at_now = datetime.fromtimestamp(now, UTC)
    joined = machines(source, scanner.profile, at_now)
    targets = discover(source, scanner.profile, at_now, joined)
    offset = now - baseline_window(now)[1]
    assert 23.5 * 3600 <= offset < 23.5 * 3600 + BASELINE_MOVE_SECONDS  # the hour around this time yesterday
    compared = 0
    for query in scanner.queries:
        promql = f"quantile_over_time(0.5, ({query.promql})[1h:1m] offset {offset:.0f}s)"
        rows = [row | {"values": [row["value"]]} for row in source.instant(promql, at_now)]
        for instance, median in assign(query, rows, targets, joined).items():
            forecast = next(s for s in report.assessments[instance].signals if s.limit.signal == query.spec.id)
            assert forecast.baseline == pytest.approx(median.samples[-1][1], rel=1e-9), (instance, query.spec.id)
            compared += 1
    assert compared >= 3 * 3  # hit rate, queue and TTFT of every target
