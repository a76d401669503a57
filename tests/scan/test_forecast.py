"""Forecasts on synthetic series: trend, time to cross, own baseline, and the SLO model."""

from __future__ import annotations

import math

import pytest

from rca.scan.forecast import Limit, forecast_signal, model_for, slo_forecast, slo_model, violation_depths
from rca.scan.window import HourLevel

QUEUE = Limit("queue_median", "Median waiting requests", "requests", ">", 4.7)
HIT_RATE = Limit("prefix_cache_hit_rate", "Prefix-cache hit rate", "ratio", "<", 0.61)
NOW = 1_000_000.0
STEP = 30.0
TREND = 15 * 60
AROUND_1 = HourLevel(1.0, 0.8, 1.2)  # the same hour yesterday: at 1, between 0.8 and 1.2


def series(value_at: object, minutes: int = 60) -> list[tuple[float, float]]:
    points = int(minutes * 60 / STEP)
    return [(NOW - (points - 1 - i) * STEP, value_at(NOW - (points - 1 - i) * STEP)) for i in range(points)]  # type: ignore[operator]


def wobble(t: float, amplitude: float) -> float:
    return amplitude * math.sin(t / 47.0)


def test_a_rising_queue_is_forecast_to_cross_when_its_trend_reaches_the_threshold() -> None:
    # Flat at 1 for 45 minutes, then +0.2 per minute: 4.0 now, and 3.8 as "current" (the median
    # of the last two minutes), so 0.9 to go at 0.2 a minute = 4.5 minutes.
    def queue(t: float) -> float:
        return 1.0 + max(0.0, (t - (NOW - 15 * 60)) / 60 * 0.2) + wobble(t, 0.05)

    forecast = forecast_signal(QUEUE, series(queue), "test", NOW, TREND)
    assert forecast is not None
    assert not forecast.breached and forecast.departed
    assert forecast.slope_per_minute == pytest.approx(0.2, rel=0.1)
    assert forecast.cross_in_seconds == pytest.approx(4.5 * 60, rel=0.15)
    assert forecast.moving_since is not None and forecast.moving_since <= NOW - 10 * 60


def test_a_falling_hit_rate_counts_downwards() -> None:
    def hit_rate(t: float) -> float:
        return 0.8 - max(0.0, (t - (NOW - 10 * 60)) / 60 * 0.015) + wobble(t, 0.005)

    forecast = forecast_signal(HIT_RATE, series(hit_rate), "test", NOW, TREND)
    assert forecast is not None and forecast.slope_per_minute is not None and forecast.slope_per_minute < 0
    assert forecast.cross_in_seconds is not None and 0 < forecast.cross_in_seconds < 10 * 60


def test_a_host_busy_as_always_is_breached_but_not_degrading() -> None:
    forecast = forecast_signal(QUEUE, series(lambda t: 6.0 + wobble(t, 0.3)), "test", NOW, TREND)
    assert forecast is not None
    assert forecast.breached and not forecast.departed and not forecast.degrading
    assert forecast.cross_in_seconds is None  # already beyond: nothing left to forecast


def test_noise_around_a_flat_level_forecasts_no_crossing() -> None:
    forecast = forecast_signal(QUEUE, series(lambda t: 2.0 + wobble(t, 0.4)), "test", NOW, TREND)
    assert forecast is not None and forecast.cross_in_seconds is None and not forecast.departed


def test_the_day_before_is_the_baseline_when_known() -> None:
    # Today's history sits at 5 all along; yesterday at this hour it was 1: today is a departure.
    forecast = forecast_signal(QUEUE, series(lambda t: 5.0 + wobble(t, 0.1)), "test", NOW, TREND, yesterday=AROUND_1)
    assert forecast is not None and forecast.baseline == 1.0 and forecast.degrading


def test_a_target_that_stopped_reporting_is_not_judged() -> None:
    old = [(t - 600, v) for t, v in series(lambda t: 9.0)]
    assert forecast_signal(QUEUE, old, "test", NOW, TREND) is None


def test_the_slo_forecast_uses_the_fleet_model_when_the_target_has_too_few_violations() -> None:
    rising = forecast_signal(QUEUE, series(lambda t: 1.0 + max(0.0, (t - (NOW - 900)) / 60 * 0.4)), "t", NOW, TREND)
    fleet = [4.0 + 0.25 * i for i in range(20)]
    slo = slo_forecast(model_for([5.0], slo_model(fleet, "fleet")), rising, horizon_seconds=600)
    assert slo.probability is not None and slo.model.startswith("fleet: 20 violations")
    assert slo.depth_at_horizon is not None and rising is not None and slo.depth_at_horizon > rising.current
    own = slo_forecast(model_for(fleet[:10], slo_model([], "fleet")), rising, horizon_seconds=600)
    assert own.probability is not None and own.model.startswith("own: 10 violations")
    none = slo_forecast(model_for([], slo_model([], "fleet")), rising, horizon_seconds=600)
    assert none.probability is None and "no SLO model" in none.model


def test_violation_depths_pair_ttft_above_the_slo_with_the_depth_at_that_time() -> None:
    depth = [(0.0, 1.0), (30.0, 6.0), (60.0, 8.0)]
    ttft = [(0.0, 0.5), (30.0, 2.5), (60.0, 3.0)]
    assert violation_depths(depth, ttft, slo_seconds=2.0, step_seconds=30) == [6.0, 8.0]


def test_a_level_held_all_this_hour_is_where_its_normal_reaches_even_off_yesterdays() -> None:
    """At 5 all this hour and 1 yesterday: departed from yesterday (the forecast says so), but its
    normal life now reaches past the 4.7 threshold (the states hold it until TTFT feels it)."""
    forecast = forecast_signal(QUEUE, series(lambda t: 5.0 + wobble(t, 0.1)), "test", NOW, TREND, yesterday=AROUND_1)
    assert forecast is not None and forecast.degrading
    assert forecast.normal_edge is not None and 5.5 < forecast.normal_edge < 6.5  # 5, and a request of resolution
    quiet = forecast_signal(QUEUE, series(lambda t: 1.0 + wobble(t, 0.1)), "test", NOW, TREND, yesterday=AROUND_1)
    assert quiet is not None and quiet.normal_edge is not None and quiet.normal_edge < 2.5


def test_a_count_one_request_off_its_normal_has_not_left_it() -> None:
    """The queue's median moves in whole requests: from its hour at 4 to 5 is within its resolution."""
    at_five = [(t, 4.0 if t < NOW - TREND else 5.0) for t, _ in series(lambda t: 0.0)]
    forecast = forecast_signal(QUEUE, at_five, "test", NOW, TREND)
    assert forecast is not None and forecast.breached and not forecast.departed
    at_six = [(t, 4.0 if t < NOW - TREND else 6.0) for t, _ in series(lambda t: 0.0)]
    assert (moved := forecast_signal(QUEUE, at_six, "test", NOW, TREND)) is not None and moved.departed
