"""A sample of generated worlds through a real Prometheus (backfilled history, a live exporter):
the fast path of the diagnosis benchmark (tests/worlds/fast.py, Prometheus' answers computed from
the world) must reach the same answer as the real one, or the benchmark's figures would be about
the shortcut rather than the product."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rca.collect.target import target_from_alerts
from rca.config import ScopeConfig, Settings
from rca.pipeline import Analysis, analyse
from tests.e2e import promstack
from tests.e2e.scenarios import Exporter, Fleet
from tests.worlds.fast import diagnose
from tests.worlds.generate import HELD_OUT_SEEDS, World, draw

pytestmark = pytest.mark.e2e
SAMPLE = 10
MIN_TOP_AGREEMENT = 0.8


@pytest.fixture(scope="module")
def worlds_on_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[World]]]:
    promstack.require_binaries()
    workdir = tmp_path_factory.mktemp("worlds")
    now = time.time()
    # Held-out seeds: the check is of the shortcut, so nothing here is tuned on.
    worlds = [draw(seed, now) for seed in range(HELD_OUT_SEEDS.start, HELD_OUT_SEEDS.start + SAMPLE)]
    fleet = Fleet([w.host for w in worlds], start=now - 3 * 3600 - 15 * 60)
    promstack.backfill(fleet, now, workdir / "tsdb", workdir)
    with Exporter(fleet, time.time) as exporter:
        proc, url = promstack.start_prometheus(workdir, exporter.port, None)
        try:
            time.sleep(6)
            yield url, worlds
        finally:
            proc.stop()


def real(url: str, world: World) -> Analysis:
    target = target_from_alerts([world.alert], [datetime.fromtimestamp(world.alert_start, UTC)], ScopeConfig())
    return analyse(Settings(prometheus_url=url), target, datetime.fromtimestamp(world.now, UTC))


def test_the_fast_path_reaches_the_answer_a_real_prometheus_gives(
    worlds_on_prometheus: tuple[str, list[World]], tmp_path: Path
) -> None:
    url, worlds = worlds_on_prometheus
    settings = Settings(data_dir=tmp_path)
    rows = []
    for world in worlds:
        slow, fast = real(url, world), diagnose(world, settings)
        assert slow.collection.stack == fast.collection.stack, world.notes
        rows.append(
            (
                world,
                slow.hypotheses[0].category,
                fast.hypotheses[0].category,
                sorted(f.key for f in slow.findings if f.breached),
                sorted(f.key for f in fast.findings if f.breached),
            )
        )
    agree = sum(slow == fast for _, slow, fast, _, _ in rows) / len(rows)
    detail = "\n".join(
        f"{w.seed} {w.cause}: real {s} fast {f}\n  real {rb}\n  fast {fb}" for w, s, f, rb, fb in rows if s != f
    )
    assert agree >= MIN_TOP_AGREEMENT, detail
