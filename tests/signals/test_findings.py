"""Judging one signal's series into a finding (rca.signals.findings), on synthetic samples."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from rca.collect.profile import QueryAlternative, SignalSpec, load_profile
from rca.collect.prometheus import Collection, SeriesResult, Window, _samples
from rca.domain.evidence import Finding, onset_order
from rca.signals.findings import (
    BASELINE_GUARD_MINUTES,
    CURRENT_MINUTES,
    DEPARTURE_LOOKBACK_MINUTES,
    MIN_CURRENT_MINUTES,
    ONSET_GAP_SAMPLES,
    current_since,
    judge,
    judge_all,
)

END = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
ALERT = END - timedelta(minutes=20)
GUARD_MINUTES_BEFORE_END = 20 + BASELINE_GUARD_MINUTES  # the baseline ends here (alert start - guard)


def at(minutes_before_end: float) -> datetime:
    return END - timedelta(minutes=minutes_before_end)


def series(value: Callable[[int], float], first: int = 180, last: int = 0) -> list[tuple[float, float]]:
    """One sample a minute, `value(m)` at m minutes before END, from `first` down to `last`."""
    return [(at(m).timestamp(), value(m)) for m in range(first, last - 1, -1)]


def spec(
    comparison: str = ">",
    threshold: float | None = None,
    change: float | None = None,
    min_delta: float = 0.0,
    unit: str = "",
    **extra,
) -> SignalSpec:
    return SignalSpec(
        id="s",
        title="Test signal",
        kind="signal",
        scope="serving",
        comparison=comparison,
        threshold=threshold,
        change=change,
        min_delta=min_delta,
        unit=unit,
        queries=[QueryAlternative(source="test", promql="x")],
        **extra,
    )


def judged(
    signal: SignalSpec,
    *samples: list[tuple[float, float]],
    alert: datetime = ALERT,
    labels: list[dict[str, str]] | None = None,
) -> Finding:
    labels = labels or [{"series": str(i)} for i in range(len(samples))]
    result = SeriesResult(spec=signal, promql="x", source="test", series=list(zip(labels, samples, strict=True)))
    return judge(result, END, alert)


def step(before: float, after: float, onset_minutes: int) -> Callable[[int], float]:
    return lambda m: after if m <= onset_minutes else before


# ---- absolute thresholds ----


def test_value_above_a_greater_than_threshold_is_breached() -> None:
    finding = judged(spec(">", threshold=0.82), series(step(0.5, 0.9, 30)))
    assert finding.status == "breached" and finding.breached
    assert finding.value == pytest.approx(0.9)
    assert finding.threshold == 0.82
    assert finding.onset == at(30)
    assert finding.baseline == pytest.approx(0.5)


def test_value_below_a_less_than_threshold_is_breached() -> None:
    finding = judged(spec("<", threshold=0.61), series(step(0.8, 0.4, 25)))
    assert finding.breached
    assert finding.value == pytest.approx(0.4)
    assert finding.onset == at(25)
    assert finding.baseline == pytest.approx(0.8)


@pytest.mark.parametrize(("comparison", "value"), [(">", 0.5), ("<", 0.9), (">", 0.82), ("<", 0.82)])
def test_value_on_the_healthy_side_or_at_the_threshold_is_ok(comparison: str, value: float) -> None:
    finding = judged(spec(comparison, threshold=0.82), series(lambda m: value))
    assert finding.status == "ok" and not finding.breached
    assert finding.onset is None


def test_current_is_the_median_of_the_last_ten_minutes() -> None:
    # spikes in 5 of the 11 recent samples do not move the median; older samples do not count
    def value(m: int) -> float:
        if m > CURRENT_MINUTES:
            return 100.0
        return 9.0 if m % 2 else 3.0

    recent = [value(m) for m in range(CURRENT_MINUTES, -1, -1)]
    finding = judged(spec(">", threshold=4.7), series(value))
    assert finding.value == pytest.approx(statistics.median(recent))
    assert finding.value == pytest.approx(3.0)
    assert not finding.breached


def test_an_alert_a_few_minutes_old_is_judged_on_the_minutes_since_it_started() -> None:
    # Broken for the last 4 minutes, healthy before: the last ten minutes would vote it healthy.
    broken = series(step(2.0, 8.0, onset_minutes=4))
    assert not judged(spec(">", threshold=4.7), broken, alert=at(60)).breached
    early = judged(spec(">", threshold=4.7), broken, alert=at(4))
    assert early.breached and early.value == pytest.approx(8.0)


def test_the_current_window_never_shrinks_below_two_minutes() -> None:
    assert current_since(END.timestamp(), END.timestamp()) == at(MIN_CURRENT_MINUTES).timestamp()
    assert current_since(END.timestamp(), at(5).timestamp()) == at(5).timestamp()
    assert current_since(END.timestamp(), at(90).timestamp()) == at(CURRENT_MINUTES).timestamp()


def test_short_spike_in_the_recent_window_is_not_a_breach() -> None:
    finding = judged(spec(">", threshold=4.7), series(lambda m: 20.0 if m in (0, 1, 2) else 1.0))
    assert not finding.breached


# ---- onset ----


def healthy_at(minutes: set[int], onset: int = 30) -> Callable[[int], float]:
    return lambda m: 0.9 if m <= onset and m not in minutes else 0.5


@pytest.mark.parametrize("gap", range(1, ONSET_GAP_SAMPLES + 1))
def test_onset_survives_a_short_healthy_gap(gap: int) -> None:
    holes = set(range(15, 15 - gap, -1))
    finding = judged(spec(">", threshold=0.82), series(healthy_at(holes)))
    assert finding.onset == at(30)


def test_onset_restarts_after_a_gap_of_three_healthy_samples() -> None:
    holes = {15, 14, 13}
    assert len(holes) == ONSET_GAP_SAMPLES + 1
    finding = judged(spec(">", threshold=0.82), series(healthy_at(holes)))
    assert finding.onset == at(12)


def test_onset_tolerates_healthy_samples_at_the_very_end() -> None:
    finding = judged(spec(">", threshold=0.82), series(healthy_at({0, 1})))
    assert finding.breached
    assert finding.onset == at(30)


# ---- baselines ----


def test_threshold_baseline_is_the_median_before_onset_not_before_the_guard() -> None:
    # alert 100 min before END: guard at 130 min; 0.2 before it, 0.6 from there until the onset at 30
    alert = at(100)
    value = lambda m: 0.2 if m > 130 else (0.6 if m > 30 else 0.95)  # noqa: E731
    samples = series(value)
    before_onset = [v for ts, v in samples if ts < at(30).timestamp()]
    finding = judged(spec(">", threshold=0.82), samples, alert=alert)
    # The crossing was at 30; the series had already left its normal 0.2 at 130, so the onset is
    # dated where the move began, at most DEPARTURE_LOOKBACK_MINUTES before the crossing.
    assert finding.onset == at(30 + DEPARTURE_LOOKBACK_MINUTES)
    assert finding.baseline == pytest.approx(statistics.median(before_onset))
    assert finding.baseline == pytest.approx(0.6)


def test_threshold_series_that_starts_breached_has_no_baseline() -> None:
    finding = judged(spec(">", threshold=0.82), series(lambda m: 0.95))
    assert finding.breached
    assert finding.onset == at(180)
    assert finding.baseline is None
    assert "baseline n/a" in finding.detail


def test_a_series_beyond_its_threshold_that_dipped_under_it_has_no_baseline() -> None:
    # A host whose cores are always pegged near the limit: one sample under it starts a "breach"
    # whose samples before were mostly beyond the limit too. It was broken all along, not newly.
    value = lambda m: 0.80 if m == 120 else 0.87  # noqa: E731
    finding = judged(spec(">", threshold=0.82), series(value))
    assert finding.breached
    assert finding.onset is not None
    assert finding.baseline is None
    assert "no healthy baseline" in finding.detail


def test_healthy_threshold_series_reports_the_pre_guard_baseline() -> None:
    value = lambda m: 0.3 if m > GUARD_MINUTES_BEFORE_END else 0.7  # noqa: E731
    finding = judged(spec(">", threshold=0.82), series(value))
    assert not finding.breached
    assert finding.baseline == pytest.approx(0.3)


# ---- change-based rules ----


@pytest.mark.parametrize(
    ("comparison", "baseline", "change", "min_delta", "current", "breached"),
    [
        # limit = max(b * (1 + change), b + min_delta) for ">"
        (">", 100.0, 0.5, 20.0, 160.0, True),
        (">", 100.0, 0.5, 20.0, 140.0, False),  # +40 %: relative change not reached
        (">", 10.0, 0.5, 20.0, 25.0, False),  # +150 % but only +15: min_delta not reached
        (">", 10.0, 0.5, 20.0, 35.0, True),
        # limit = min(b * (1 - change), b - min_delta) for "<"
        ("<", 100.0, 0.4, 0.0, 50.0, True),
        ("<", 100.0, 0.4, 0.0, 70.0, False),
        ("<", 100.0, 0.1, 30.0, 80.0, False),  # -20 %: relative ok, delta 20 < 30
        ("<", 100.0, 0.1, 30.0, 65.0, True),
    ],
)
def test_change_signal_breaches_only_when_relative_change_and_min_delta_hold(
    comparison: str, baseline: float, change: float, min_delta: float, current: float, breached: bool
) -> None:
    value = step(baseline, current, GUARD_MINUTES_BEFORE_END - 1)
    finding = judged(spec(comparison, change=change, min_delta=min_delta), series(value))
    assert finding.breached is breached
    assert finding.baseline == pytest.approx(baseline)
    if comparison == ">":
        limit = max(baseline * (1 + change), baseline + min_delta)
    else:
        limit = min(baseline * (1 - change), baseline - min_delta)
    assert finding.threshold == pytest.approx(limit)  # a change rule reports its effective limit


def test_change_baseline_uses_only_samples_before_the_guard() -> None:
    # 100 until the guard, 140 between guard and alert, 200 since: the baseline is 100, not a blend
    def value(m: int) -> float:
        return 100.0 if m > GUARD_MINUTES_BEFORE_END else (140.0 if m > 20 else 200.0)

    finding = judged(spec(">", change=0.5), series(value))
    assert finding.baseline == pytest.approx(100.0)
    assert finding.breached
    assert finding.onset == at(20 + DEPARTURE_LOOKBACK_MINUTES)  # it had left 100 long before 200


@pytest.mark.parametrize("change", [0.2, 1.5])
def test_the_onset_is_where_the_series_left_its_normal_range_not_where_it_crossed(change: float) -> None:
    # Noisy around 100, then a ramp from 12 to 4 minutes before the end up to 300: a lenient and a
    # strict threshold cross it minutes apart, but both date the move to where the ramp began.
    def value(m: int) -> float:
        wobble = 1 + 0.02 * ((m * 7919) % 5 - 2) / 2
        return 100.0 * wobble if m > 12 else (300.0 if m <= 4 else 100.0 + 25.0 * (12 - m))

    finding = judged(spec(">", change=change), series(value))
    assert finding.breached
    assert at(12) <= finding.onset <= at(11)


def test_change_signal_without_baseline_is_not_breached_and_says_so() -> None:
    # the series starts after the guard: nothing to compare with, however high it is
    finding = judged(spec(">", change=0.5), series(lambda m: 1e6, first=GUARD_MINUTES_BEFORE_END - 1))
    assert finding.status == "ok" and not finding.breached
    assert finding.baseline is None and finding.threshold is None
    assert "no baseline" in finding.detail


# ---- unavailable data ----


def test_series_without_samples_in_the_last_ten_minutes_is_unavailable() -> None:
    finding = judged(spec(">", threshold=0.82), series(lambda m: 0.99, last=CURRENT_MINUTES + 1))
    assert finding.status == "unavailable" and not finding.breached
    assert finding.value is None and finding.onset is None
    assert f"last {CURRENT_MINUTES} minutes" in finding.detail


def test_query_error_is_carried_into_the_detail() -> None:
    result = SeriesResult(spec=spec(">", threshold=1), promql="x", error="query failed: timed out")
    finding = judge(result, END, ALERT)
    assert finding.status == "unavailable"
    assert "query failed: timed out" in finding.detail
    assert finding.query == "x"


def test_stale_series_is_ignored_next_to_a_fresh_one() -> None:
    stale = series(lambda m: 0.99, last=CURRENT_MINUTES + 1)
    fresh = series(lambda m: 0.5)
    finding = judged(spec(">", threshold=0.82), stale, fresh, labels=[{"gpu": "0"}, {"gpu": "1"}])
    assert not finding.breached
    assert finding.series_labels == {"gpu": "1"}
    assert "worst of" not in finding.detail


# ---- several series ----


@pytest.mark.parametrize("degraded_first", [True, False])
def test_worst_series_decides(degraded_first: bool) -> None:
    healthy = series(lambda m: 3.0)
    degraded = series(step(3.0, 1.0, 15))
    pairs = [({"gpu": "1"}, degraded), ({"gpu": "0"}, healthy)]
    if not degraded_first:
        pairs.reverse()
    signal = spec("<", change=0.4)
    finding = judged(signal, *[s for _, s in pairs], labels=[lbl for lbl, _ in pairs])
    assert finding.breached
    assert finding.series_labels == {"gpu": "1"}
    assert finding.value == pytest.approx(1.0)
    assert finding.onset == at(15)
    assert "[worst of 2 series]" in finding.detail


def test_proxy_note_is_part_of_the_detail() -> None:
    proxy = next(s for s in load_profile().signals if s.id == "gpu_compute_to_memory")
    assert proxy.proxy_note
    finding = judged(proxy, series(step(3.0, 1.0, 15)))
    assert finding.breached
    assert proxy.proxy_note in finding.detail


def test_a_finding_is_named_for_what_its_own_stack_measured() -> None:
    """The queue-time signal is a p95 where an engine exports the histogram, a mean on Triton:
    a finding on a vLLM host says p95 and nothing of Triton; one on Triton says mean."""
    queue_time = next(s for s in load_profile().signals if s.id == "queue_time_p95")
    by_stack = {q.source: (q.stacks or [])[0] for q in queue_time.queries}
    titles = {}
    for source, stack in by_stack.items():
        result = SeriesResult(spec=queue_time, promql="x", source=source, series=[({}, series(step(0.1, 2.0, 20)))])
        finding = judge(result, END, ALERT)
        assert finding.detail.startswith(f"{finding.title} is "), finding.detail
        titles.setdefault(stack, set()).add(finding.title)
    assert titles["vllm_v1"] == titles["sglang"] == titles["tgi"] == {"Time requests wait in the queue p95"}
    assert titles["triton"] == {"Mean time requests wait in the queue"}
    unmeasured = judge(SeriesResult(spec=queue_time, promql="x", error="no data from: any"), END, ALERT)
    assert unmeasured.title == "Time requests wait in the queue p95"


def test_detail_names_value_baseline_limit_and_onset() -> None:
    finding = judged(spec(">", threshold=0.82, unit="ratio"), series(step(0.5, 0.9, 30)))
    assert "90%" in finding.detail and "50%" in finding.detail and "> 82%" in finding.detail
    assert f"since {at(30):%H:%M} UTC" in finding.detail


def test_finding_serialises_onset_as_iso_text() -> None:
    finding = judged(spec(">", threshold=0.82), series(step(0.5, 0.9, 30)))
    assert finding.to_dict()["onset"] == at(30).isoformat()


# ---- collection-level helpers ----


def test_judge_all_judges_every_result_at_the_window_end() -> None:
    breach = SeriesResult(spec=spec(">", threshold=0.82), series=[({}, series(step(0.5, 0.9, 30)))])
    missing = SeriesResult(spec=spec(">", threshold=0.82), error="no data from: test")
    window = Window(start=at(180), end=END, step_seconds=60)
    findings = judge_all(Collection(window=window, selectors={}, results=[breach, missing]), ALERT)
    assert [f.status for f in findings] == ["breached", "unavailable"]


def test_onset_order_lists_breached_findings_by_onset() -> None:
    late = judged(spec(">", threshold=0.82), series(step(0.5, 0.9, 5)))
    early = judged(spec(">", threshold=0.82), series(step(0.5, 0.9, 40)))
    ok = judged(spec(">", threshold=0.82), series(lambda m: 0.1))
    late.key, early.key, ok.key = "late", "early", "ok"
    assert onset_order([late, ok, early]) == ["early", "late"]


# ---- prometheus._samples: NaN/Inf never reach the judge ----


def test_samples_drop_nan_and_infinities_and_parse_numbers() -> None:
    raw = [[1, "1.5"], [2, "NaN"], [3, "+Inf"], [4, "-Inf"], [5.5, "2e3"]]
    parsed = _samples(raw)
    assert parsed == [(1.0, 1.5), (5.5, 2000.0)]
    assert all(math.isfinite(v) for _, v in parsed)


def test_series_of_only_nan_becomes_unavailable() -> None:
    raw = [[at(m).timestamp(), "NaN"] for m in range(30, -1, -1)]
    finding = judged(spec(">", threshold=0.82), _samples(raw))
    assert finding.status == "unavailable"


def test_a_query_on_another_scale_is_judged_by_its_own_threshold() -> None:
    signal = spec(threshold=0.25).model_copy(
        update={
            "queries": [
                QueryAlternative(source="periods", promql="x"),
                QueryAlternative(source="seconds", promql="y", threshold=0.05),
            ]
        }
    )
    samples = series(step(0.006, 0.09, onset_minutes=20))
    by_seconds = judge(SeriesResult(spec=signal, promql="y", source="seconds", series=[({}, samples)]), END, ALERT)
    by_periods = judge(SeriesResult(spec=signal, promql="x", source="periods", series=[({}, samples)]), END, ALERT)
    assert by_seconds.breached and by_seconds.threshold == 0.05
    assert not by_periods.breached and by_periods.threshold == 0.25


# ---- readings: codes and stepped levels are never averaged ----


def profile_signal(signal_id: str) -> SignalSpec:
    return next(s for s in load_profile().signals if s.id == signal_id)


def test_throttle_reasons_are_the_latest_mask_decoded_never_a_median_of_masks() -> None:
    """Five minutes of 0 then five of 72 (0x48): the median of the ten minutes' samples is 36 =
    0x24, SW thermal + SW power cap, neither of which happened. The finding reads 72 and names its
    bits, and the 0 seen before it."""
    throttle = profile_signal("gpu_throttle_reasons")
    samples = series(step(0.0, 72.0, onset_minutes=5), last=1)
    recent = [v for ts, v in samples if ts >= current_since(END.timestamp(), ALERT.timestamp())]
    assert statistics.median(recent) == 36  # what a median (or mean of the two middle masks) gives
    finding = judged(throttle, samples)
    assert finding.value == 72
    assert finding.breached
    assert finding.baseline == 0
    assert "0x48 (HwSlowdown, HwThermalSlowdown) now" in finding.detail, finding.detail
    assert "also seen since 11:50 UTC: 0x0 (none)" in finding.detail
    assert "0x24" not in finding.detail and "SwThermalSlowdown" not in finding.detail


def test_a_mask_of_routine_reasons_only_is_not_a_breach_and_unnamed_bits_show_in_hex() -> None:
    throttle = profile_signal("gpu_throttle_reasons")
    routine = judged(throttle, series(lambda m: 0x5))
    assert not routine.breached
    assert "0x5 (GpuIdle, SwPowerCap) now" in routine.detail
    unknown = judged(throttle, series(lambda m: 0x1008))
    assert unknown.breached
    assert "0x1008 (HwSlowdown, 0x1000) now" in unknown.detail


def test_a_code_baseline_is_a_code_seen_never_one_between_codes() -> None:
    """XIDs 48 and 79 equally often before the guard: their median is 63.5, an XID that never
    happened; the baseline of a code is the most frequent one, the latest of those tied (79)."""
    alternating = series(lambda m: 48.0 if m % 2 == 0 else 79.0, first=180, last=1)
    assert statistics.median(v for ts, v in alternating if ts < at(GUARD_MINUTES_BEFORE_END).timestamp()) == 63.5
    finding = judged(spec(">", change=0.5, unit="xid", reading="code"), alternating)
    assert finding.baseline == 79.0
    assert finding.value == 79.0  # the latest sample (a minute before the end), not 63.5


def test_a_stepped_clock_reads_where_it_stands_now_beside_the_window_mean() -> None:
    """The SM clock stepped from 1,530 MHz to 990 MHz three minutes ago: the ten minutes' median is
    1,530, the clock is 990."""
    clock = profile_signal("sm_clock")
    samples = series(step(1530.0, 990.0, onset_minutes=3))
    assert statistics.median(v for ts, v in samples if ts >= at(10).timestamp()) == 1530
    finding = judged(clock, samples, alert=END - timedelta(minutes=15))
    assert finding.value == 990
    assert finding.breached
    assert finding.baseline == 1530
    assert finding.detail.startswith("GPU SM clock is 990 MHz now (1,334 MHz on average since 11:50 UTC)"), (
        finding.detail
    )


def test_a_measure_is_still_the_median_of_the_current_minutes() -> None:
    finding = judged(spec(">", threshold=100.0), series(step(10.0, 200.0, onset_minutes=3)))
    assert finding.value == 10.0  # 4 of the 11 samples are at 200: the median holds
