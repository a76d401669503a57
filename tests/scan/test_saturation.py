"""Saturation forecasts on synthetic series: the batch ceiling learnt from when requests waited, the
utilisation's trend and P(full within the horizon), and the states they move."""

from __future__ import annotations

import numpy as np
import pytest

from rca.scan.fleet import ServingInstance, SignalSeries
from rca.scan.saturation import FULL_LEVEL, Ceiling, ceilings, headrooms, slot_ceiling
from rca.scan.states import Assessment, Policy, ScanState, TargetMemory, advance

NOW = 1_800_000_000.0
STEP = 30.0
IDS = ("kv", "running", "waiting")
HORIZON = 600.0
TREND = 300.0  # the long window (LONG_WINDOWS of it) is 10 minutes


def series(values: list[float] | np.ndarray, end: float = NOW) -> SignalSeries:
    start = end - (len(values) - 1) * STEP
    return SignalSeries([(start + i * STEP, float(v)) for i, v in enumerate(values)], "test")


def serving(instance: str, job: str | None = "vllm", stack: str | None = "vllm_v1") -> ServingInstance:
    return ServingInstance(instance, instance.split(":")[0], instance.split(":")[0], job, stack)


def test_the_ceiling_is_the_most_it_ran_while_others_waited_with_kv_room_left() -> None:
    running = [(t, r) for t, r in enumerate([100, 180, 256, 256, 255, 256, 200])]
    waiting = [(t, w) for t, w in enumerate([0, 0, 3, 5, 2, 1, 0])]
    kv = [(t, 0.6) for t in range(7)]
    assert slot_ceiling(running, waiting, kv) == 256
    # Too few sightings: a passing queue at a busy moment is no ceiling.
    assert slot_ceiling(running, [(t, 1.0 if t == 3 else 0.0) for t in range(7)], kv) is None
    # A queue while the KV cache was full says nothing of the slots.
    assert slot_ceiling(running, waiting, [(t, 0.95) for t in range(7)]) is None
    # A queue at every batch size is no plateau: the gauge's noise, not a full batch.
    assert slot_ceiling([(t, 100.0 + 10 * t) for t in range(7)], [(t, 1.0) for t in range(7)], kv) is None
    # Exceeded later: it was not the ceiling.
    assert slot_ceiling([*running, (7, 300.0)], [*waiting, (7, 0.0)], [*kv, (7, 0.6)]) is None


def test_a_target_without_its_own_ceiling_takes_its_jobs_on_the_same_stack() -> None:
    busy, quiet, other_job, other_stack = (
        serving("busy:8000"),
        serving("quiet:8000"),
        serving("other:8000", job="batch"),
        serving("sgl:8000", stack="sglang"),
    )
    flat = series([100.0] * 10)
    found = ceilings(
        [busy, quiet, other_job, other_stack],
        {
            "running": {
                "busy:8000": series([256.0] * 10),
                "quiet:8000": flat,
                "other:8000": flat,
                "sgl:8000": flat,
            },
            "waiting": {"busy:8000": series([4.0] * 10), "quiet:8000": series([0.0] * 10)},
            "kv": {},
        },
        "running",
        "waiting",
        "kv",
    )
    assert found == {"busy:8000": Ceiling(256.0, "own history"), "quiet:8000": Ceiling(256.0, "job vllm")}


def rooms(running: np.ndarray, kv: np.ndarray | None = None, ceiling_host: bool = True) -> dict:
    """Headrooms of `host` (these series) beside a busy host that shows the job's ceiling, 256."""
    hosts = [serving("host:8000"), serving("busy:8000")]
    data = {
        "running": {"host:8000": series(running), "busy:8000": series([256.0] * len(running))},
        "waiting": {"host:8000": series([0.0] * len(running)), "busy:8000": series([5.0] * len(running))},
        "kv": {"host:8000": series(kv)} if kv is not None else {},
    }
    if not ceiling_host:
        del data["running"]["busy:8000"]
    return headrooms(hosts, data, IDS, NOW, TREND, HORIZON)


def test_a_batch_filling_toward_its_ceiling_is_forecast_full_in_time() -> None:
    rng = np.random.default_rng(0)
    # 40 min flat at 130 of 256, then 10 min rising 8 requests a minute (noise of 4).
    flat, ramp = np.full(80, 130.0), 130 + 8.0 * np.arange(1, 21) * 0.5
    found = rooms(np.concatenate([flat, ramp]) + rng.normal(0, 4, 100))["host:8000"]
    assert found.binding == "batch_slots" and found.ceiling == Ceiling(256.0, "job vllm")
    assert found.utilisation == pytest.approx(210 / 256, abs=0.03)
    assert found.slope_per_minute == pytest.approx(8 / 256, rel=0.25)
    # (0.97 * 256 - 210) / 8 per minute: about 5 minutes, well within the 10-minute horizon.
    assert found.full_in_seconds == pytest.approx((FULL_LEVEL * 256 - 210) / 8 * 60, rel=0.5)
    assert found.probability is not None and found.probability > 0.9
    assert found.departed and not found.lives_full
    text = found.forecast()
    assert "the most it ran while others waited" in text
    # the count beside the share is the share's own count; the latest sample is named as such
    assert f"about {found.utilisation * 256:.0f} of ~256 running" in text
    assert f"{found.running:.0f} in the latest sample" in text


def test_a_flat_busy_batch_and_a_slow_morning_rise_are_not_forecast_full() -> None:
    rng = np.random.default_rng(1)
    steady = rooms(np.full(120, 200.0) + rng.normal(0, 5, 120))["host:8000"]
    assert steady.probability is not None and steady.probability < 0.05
    morning = rooms(np.linspace(100, 130, 120) + rng.normal(0, 5, 120))["host:8000"]  # +30 in an hour
    assert morning.probability is not None and morning.probability < 0.05
    busy = rooms(np.full(120, 200.0))["busy:8000"]  # always at its ceiling with a queue
    assert busy.lives_full and busy.full_in_seconds == 0 and not busy.filling(0.1)


def test_a_brief_burst_fills_the_short_window_not_the_long_one() -> None:
    rng = np.random.default_rng(2)
    # 50 min at 130, then 2 minutes that take the batch to 230 of 256: a burst, not a surge.
    burst = np.concatenate([np.full(96, 130.0), np.linspace(150, 230, 4)]) + rng.normal(0, 3, 100)
    found = rooms(burst)["host:8000"]
    assert found.departed and found.full_in_seconds is not None  # the short line heads for full...
    assert found.probability is not None and found.probability < 0.5  # ...the long one does not


def test_without_a_ceiling_the_kv_cache_is_the_room() -> None:
    kv = np.concatenate([np.full(60, 0.5), np.linspace(0.5, 0.8, 60)])
    found = rooms(np.full(120, 50.0), kv=kv, ceiling_host=False)["host:8000"]
    assert found.binding == "kv_cache" and found.ceiling is None
    assert found.utilisation == pytest.approx(0.8, abs=0.01)
    assert found.full_in_seconds == pytest.approx((FULL_LEVEL - 0.8) / (0.3 / 30) * 60, rel=0.05)
    assert "KV cache 80% full" in found.forecast()
    assert rooms(np.full(120, 50.0), ceiling_host=False) == {}  # neither room known


def test_a_filling_batch_warns_after_the_sustain_and_not_while_the_engine_warms_up() -> None:
    ramp = 130 + 8.0 * np.arange(1, 21) * 0.5
    policy = Policy(horizon_seconds=HORIZON, sustain=3, saturation_probability=0.8)
    room = rooms(np.concatenate([np.full(80, 130.0), ramp]))["host:8000"]
    assert room.filling(0.8)
    memory, states, reasons = TargetMemory(), [], []
    for i in range(4):
        memory, transition = advance(memory, Assessment(at=NOW + i * 30, signals=[], headroom=room), policy)
        states.append(memory.state)
        reasons.append(transition.reason if transition else None)
    assert states == [ScanState.WATCH, ScanState.WATCH, ScanState.WARNING, ScanState.WARNING]
    assert "full in" in (reasons[2] or "") and "for 3 scans" in (reasons[2] or "")
    restarted = Assessment(at=NOW, signals=[], headroom=room, started_at=NOW - 60)
    memory = TargetMemory()
    for i in range(5):
        memory, _ = advance(memory, Assessment(**{**restarted.__dict__, "at": NOW + i * 30}), policy)
    assert memory.state == ScanState.OK


def test_a_rise_whose_latest_samples_fell_off_its_line_has_turned_and_does_not_fill() -> None:
    rng = np.random.default_rng(3)
    # 45 min at 100, 4 minutes rising to 180 of 256, then falling back over a minute: a burst
    # that ended, whose 5-minute line still points at full.
    rise = np.linspace(100, 180, 8)
    ended = np.concatenate([np.full(90, 100.0), rise, [150.0, 130.0]]) + rng.normal(0, 2, 100)
    room = rooms(ended)["host:8000"]
    assert room.short_probability is not None and room.short_probability > 0.8  # the line heads for full...
    assert room.latest < room.utilisation - 0.05 and room.turned  # ...but the latest samples left it
    assert not room.filling_now(0.8) and not room.filling(0.8)
    # The same rise still going on (its latest samples on the line) fills.
    going = np.concatenate([np.full(90, 100.0), rise, [190.0, 200.0]]) + rng.normal(0, 2, 100)
    assert rooms(going)["host:8000"].filling_now(0.8) and not rooms(going)["host:8000"].turned


def test_a_fill_that_slows_as_it_nears_full_has_not_turned() -> None:
    """A KV share that rose fast and now creeps (0.80, 0.82, 0.83, 0.835) lies under a line drawn
    through its steeper start, but it has not fallen from where it stood: no turn, still filling."""
    kv = np.concatenate([np.full(90, 0.3), np.linspace(0.35, 0.8, 6), [0.82, 0.83, 0.833, 0.835]])
    room = rooms(np.full(100, 50.0), kv=kv, ceiling_host=False)["host:8000"]
    assert room.latest < room.utilisation - 0.02  # below its line...
    assert not room.turned and room.filling_now(0.8)  # ...but no lower than it stood


def test_the_streak_counts_the_short_window_and_the_long_one_confirms_at_the_warning() -> None:
    """A fill the short window has forecast for three scans warns at the first scan the long
    window agrees: the long window's lag and the sustain overlap, instead of adding up."""
    rng = np.random.default_rng(4)
    policy = Policy(horizon_seconds=HORIZON, sustain=3, saturation_probability=0.8)
    flat = np.full(80, 60.0) + rng.normal(0, 2, 80)
    memory, states = TargetMemory(), []
    confirmed_at = None
    for minute in range(1, 16):
        ramp = 60 + 14.0 * np.arange(1, 2 * minute + 1) * 0.5  # 14 requests a minute, from 60
        room = rooms(np.concatenate([flat, ramp]))["host:8000"]
        if confirmed_at is None and room.filling(0.8):
            confirmed_at = minute
        memory, _ = advance(memory, Assessment(at=NOW + minute * 60, signals=[], headroom=room), policy)
        states.append(memory.state)
        if memory.state == ScanState.WARNING:
            break
    assert confirmed_at is not None
    assert states[-1] == ScanState.WARNING and len(states) == confirmed_at  # warned when the long one agreed
