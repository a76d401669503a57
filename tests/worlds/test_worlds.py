"""The generated worlds (tests/worlds): the engine's relations hold, worlds are reproducible from
their seed, and the diagnosis on a sample of the tuning seeds stays above its floor. The held-out
figures are the benchmark's (bench/diagnosis_worlds.py), never asserted here."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from rca.config import load_settings
from tests.worlds.engine import Given, simulate
from tests.worlds.fast import adapter_wait, bucket_quantile, diagnose
from tests.worlds.generate import ALERT_FACTOR, ALERT_RATE_LAG, CAUSES, HEALTHY, TUNING_SEEDS, World, draw
from tests.worlds.report import Outcome, summarise

NOW = 1_780_000_000.0
HEALTHY_ENGINE = Given(arrival_rate=10.0, prompt_len=800.0)


def settled(given: Given) -> dict[str, float]:
    return simulate([given] * 200, 0.0, 5.0).values[-1]


def test_a_surge_fills_the_cache_and_preempts_and_evicts_prefixes() -> None:
    before, after = settled(HEALTHY_ENGINE), settled(replace(HEALTHY_ENGINE, arrival_rate=25.0))
    assert after["arrival_rate"] > before["arrival_rate"] and after["waiting"] > 4.7
    assert after["kv_usage"] > 0.95 and after["preempt_rate"] > 0.05
    assert after["hit_rate"] < before["hit_rate"]


def test_a_small_cache_preempts_without_any_change_in_demand() -> None:
    before, after = settled(HEALTHY_ENGINE), settled(replace(HEALTHY_ENGINE, kv_capacity=30_000.0))
    assert after["kv_usage"] > before["kv_usage"]
    assert after["arrival_rate"] == pytest.approx(before["arrival_rate"], rel=0.05)


def test_a_batching_delay_holds_requests_while_the_gpu_idles() -> None:
    before, after = settled(HEALTHY_ENGINE), settled(replace(HEALTHY_ENGINE, batch_delay=0.3))
    assert after["queue_time"] > 5 * before["queue_time"]
    assert after["gpu_util"] < 0.5 * before["gpu_util"]


def test_eager_launches_saturate_the_pinned_cores_and_idle_the_gpu() -> None:
    before, after = settled(HEALTHY_ENGINE), settled(replace(HEALTHY_ENGINE, cpu_overhead=4.0))
    assert before["pinned_busy"] < 0.82 < after["pinned_busy"]
    assert after["gpu_util"] < before["gpu_util"] and after["itl"] > before["itl"]


def test_long_prompts_stall_decode() -> None:
    before, after = settled(HEALTHY_ENGINE), settled(replace(HEALTHY_ENGINE, prompt_len=3200.0, hit_rate=0.4))
    assert after["itl"] > 1.3 * before["itl"] and after["ttft"] > before["ttft"]


def test_host_side_sync_stalls_each_step_and_slows_tokens() -> None:
    before, after = settled(HEALTHY_ENGINE), settled(replace(HEALTHY_ENGINE, host_copies=5.0))
    assert after["pcie_bytes"] > 2 * before["pcie_bytes"] and after["itl"] > 1.3 * before["itl"]
    assert after["gpu_util"] < before["gpu_util"]


def test_adapters_beyond_a_full_budget_wait_and_lora_requests_info_shows_them() -> None:
    """What the profile's lora_requests_info reading of requests_deferred gives (tests/e2e/lora.py)."""
    waiting = adapter_wait(lambda p: p["waiting"])
    lora = replace(HEALTHY_ENGINE, max_loras=4.0, adapters=3.0)
    assert waiting(settled(lora)) == 0  # room in the budget
    over = settled(replace(lora, adapters=7.0, deferred=5.0))
    assert waiting(over) == over["waiting"] > 5  # every waiting request, not only the deferred
    # A capacity queue while the adapters in use fill the budget exactly: no adapter waits for it.
    queued = settled(replace(lora, adapters=4.0, arrival_rate=18.0))
    assert queued["waiting"] > 1 and waiting(queued) == 0
    assert math.isnan(waiting(settled(replace(lora, max_loras=16.0))))  # a budget the query does not read


@pytest.mark.parametrize("seed", range(20))
def test_a_fault_world_is_investigated_after_its_sla_alert_fired_on_a_latency(seed: int) -> None:
    world = draw(seed, NOW)
    if world.cause == HEALTHY:
        return
    host = world.host
    assert host.faulty is not None and host.healthy is not None
    # What the alert rule saw when it fired: the engine a rate window's lag earlier.
    seen = world.alert_start - ALERT_RATE_LAG
    faulty, healthy = host.faulty.at(seen), host.healthy.at(seen)
    assert any(faulty[key] >= factor * healthy[key] * 0.999 for key, factor in ALERT_FACTOR.items()), world.notes
    assert host.onset < world.alert_start < world.now


def test_bucket_quantile_interpolates_inside_the_bucket_as_prometheus_does() -> None:
    # An exponential with median 1 has its 95th percentile at log2(20) = 4.32, inside (2.5, 5].
    value = bucket_quantile(0.95, [0.5, 1.0, 2.5, 5.0, 10.0], 1.0)
    assert 2.5 < value < 5.0


@pytest.mark.parametrize("seed", [0, 7, 123])
def test_a_world_is_reproducible_from_its_seed(seed: int) -> None:
    a, b = draw(seed, NOW), draw(seed, NOW)
    assert (a.cause, a.notes, a.host.stack, a.alert_start) == (b.cause, b.notes, b.host.stack, b.alert_start)
    assert a.host.params(NOW - 60) == b.host.params(NOW - 60)


@pytest.fixture(scope="module")
def tuning_worlds() -> list[World]:
    """The first 400 tuning worlds, drawn once for the tests below (a draw takes about 0.2 s)."""
    return [draw(seed, NOW) for seed in range(TUNING_SEEDS.start, TUNING_SEEDS.start + 400)]


def test_every_cause_and_the_healthy_control_are_drawn(tuning_worlds: list[World]) -> None:
    assert {world.cause for world in tuning_worlds} == set(CAUSES) | {HEALTHY}


def test_the_diagnosis_of_tuning_worlds_stays_above_its_floor(tuning_worlds: list[World], tmp_path: Path) -> None:
    """A regression floor on 300 tuning seeds (about 30 s); the held-out figures are the bench's."""
    settings = load_settings(data_dir=tmp_path)
    outcomes = [Outcome(world, diagnose(world, settings).hypotheses) for world in tuning_worlds[:300]]
    report = summarise(outcomes)
    assert report["faults"]["AC@1"] >= 0.92, report["per_cause"]
    assert report["faults"]["AC@3"] >= 0.96
    assert report["healthy"]["top_is_no_clear_cause"] >= 0.95
    assert report["confident_wrong"] <= 0.06
    assert report["ece"] <= 0.08
