"""The state machine on synthetic assessments: hysteresis, one warning, damped flapping."""

from __future__ import annotations

from dataclasses import replace

from rca.scan.forecast import Limit, SignalForecast, SloForecast
from rca.scan.states import Assessment, Policy, ScanState, TargetMemory, advance

QUEUE = Limit("queue_median", "Median waiting requests", "requests", ">", 4.7)
POLICY = Policy(horizon_seconds=600, sustain=3, calm_seconds=120, slo_probability=0.8)


def signal(current: float, cross_in: float | None = None, departed: bool = True) -> SignalForecast:
    return SignalForecast(
        limit=QUEUE,
        source="test",
        current=current,
        baseline=1.0,
        slope_per_minute=0.3,
        cross_in_seconds=cross_in,
        breached=current > QUEUE.threshold,
        departed=departed,
        moving_since=0.0,
    )


def run(values: list[SignalForecast], memory: TargetMemory | None = None, slo: float | None = None) -> list[ScanState]:
    """The state after each scan (30 s apart)."""
    memory = memory or TargetMemory()
    states = []
    for i, value in enumerate(values):
        assessment = Assessment(at=i * 30.0, signals=[value], slo=SloForecast(slo, None, "test"))
        memory, _ = advance(memory, assessment, POLICY)
        states.append(memory.state)
    return states


def test_a_developing_fault_goes_watch_then_warning_after_sustained_breach() -> None:
    states = run([signal(2.0, 400), signal(3.0, 200), signal(5.0), signal(5.5), signal(6.0)])
    assert states == [ScanState.WATCH, ScanState.WATCH, ScanState.WATCH, ScanState.WATCH, ScanState.WARNING]


def test_a_crossing_beyond_the_horizon_is_not_watched() -> None:
    assert run([signal(2.0, 1200)] * 3) == [ScanState.OK] * 3


def test_a_likely_slo_breach_warns_at_once() -> None:
    assert run([signal(3.0, 300)], slo=0.9) == [ScanState.WARNING]
    assert run([signal(3.0, 300)], slo=0.5) == [ScanState.WATCH]


def test_a_likely_slo_breach_at_the_targets_own_usual_depth_does_not_warn() -> None:
    """The busy host the fleet's model reads as breaking (its depth is where others broke their
    SLO) is not warned while its queue stays at its own normal depth; leaving it is."""
    usual = signal(3.0, 300, departed=False)
    assert run([usual] * 5, slo=0.95) == [ScanState.WATCH] * 5
    assert run([usual, usual, signal(3.5, 200)], slo=0.95) == [ScanState.WATCH, ScanState.WATCH, ScanState.WARNING]


def test_a_busy_but_steady_target_stays_ok() -> None:
    assert run([signal(6.0, departed=False)] * 10) == [ScanState.OK] * 10


def test_one_scan_back_below_does_not_clear_a_warning_and_a_calm_period_does() -> None:
    breach = [signal(6.0)] * 4
    calm = [signal(1.0)] * 6
    states = run([*breach, signal(1.0), signal(6.0), *calm])
    assert states[3] == ScanState.WARNING
    assert states[4] == ScanState.WARNING and states[5] == ScanState.WARNING  # flapping damped
    assert ScanState.CLEARED in states[6:]
    cleared_at = states.index(ScanState.CLEARED)
    assert cleared_at - 6 >= POLICY.calm_seconds / 30  # not before a full calm period


def test_a_warning_again_after_clearing_keeps_its_incident() -> None:
    memory = TargetMemory(state=ScanState.CLEARED, since=0.0, incident_id=7)
    after = memory
    for i in range(3):
        after, transition = advance(after, Assessment(at=30.0 * (i + 1), signals=[signal(6.0)]), POLICY)
    assert after.state == ScanState.WARNING and after.incident_id == 7
    assert transition is not None and transition.before == ScanState.CLEARED
    assert "queue_median" in transition.reason and transition.figures["signals"]


TTFT = Limit("ttft_p95", "TTFT p95 against its SLO", "s", ">", 2.0)
HIT = Limit("prefix_cache_hit_rate", "Prefix-cache hit rate", "ratio", "<", 0.61)


def forecast(limit: Limit, current: float, breached: bool, departed: bool = True) -> SignalForecast:
    return SignalForecast(limit, "test", current, None, 0.0, None, breached, departed, 0.0 if departed else None)


def states_of(assessments: list[Assessment], policy: Policy = POLICY) -> list[ScanState]:
    memory, states = TargetMemory(), []
    for assessment in assessments:
        memory, _ = advance(memory, assessment, policy)
        states.append(memory.state)
    return states


def test_ttft_beyond_its_slo_warns_at_the_first_scan_and_an_early_signal_only_when_sustained() -> None:
    breach = Assessment(at=0.0, signals=[forecast(TTFT, 3.1, True)])
    memory, transition = advance(TargetMemory(), breach, POLICY)
    assert memory.state == ScanState.WARNING and transition is not None
    assert "TTFT p95 3.10 s beyond its SLO (2 s)" in transition.reason
    cold = [Assessment(at=30.0 * i, signals=[forecast(HIT, 0.4, True)]) for i in range(3)]
    assert states_of(cold) == [ScanState.WATCH, ScanState.WATCH, ScanState.WARNING]
    held = Policy(horizon_seconds=600, sustain=3, calm_seconds=120, slo_sustain=2)
    assert states_of([breach, replace(breach, at=30.0)], held) == [ScanState.WATCH, ScanState.WARNING]


def test_a_restarted_target_holds_its_early_signals_through_the_warmup_but_not_its_ttft() -> None:
    started = 1000.0
    cold = [
        Assessment(at=started + 60 + 30.0 * i, signals=[forecast(HIT, 0.3, True)], started_at=started)
        for i in range(20)
    ]
    assert states_of(cold) == [ScanState.OK] * 20  # a cold prefix cache after a deploy is not a degradation
    later = [replace(a, at=a.at + POLICY.warmup_seconds) for a in cold[:3]]
    assert states_of(later)[-1] == ScanState.WARNING  # the same cache, still cold after the warm-up, is
    slo = Assessment(at=started + 60, signals=[forecast(HIT, 0.3, True), forecast(TTFT, 2.6, True)], started_at=started)
    memory, transition = advance(TargetMemory(), slo, POLICY)
    assert memory.state == ScanState.WARNING and transition is not None
    assert "prefix_cache_hit_rate" not in transition.reason  # held while it warms up
    assert transition.figures["started_at"] == started


def test_a_warming_target_is_judged_on_its_ttft_only_until_its_history_is_read() -> None:
    warming = [Assessment(at=30.0 * i, signals=[forecast(HIT, 0.3, True)], warming=True) for i in range(20)]
    assert states_of(warming) == [ScanState.OK] * 20  # every level looks new without the history
    warm = [replace(a, warming=False) for a in warming[:3]]
    assert states_of(warm)[-1] == ScanState.WARNING
    slo = Assessment(at=0.0, signals=[forecast(HIT, 0.3, True), forecast(TTFT, 2.6, True)], warming=True)
    memory, transition = advance(TargetMemory(), slo, POLICY)
    assert memory.state == ScanState.WARNING and transition is not None
    assert "prefix_cache_hit_rate" not in transition.reason and transition.figures["warming"] is True


def test_a_queue_off_its_own_normal_warns_without_waiting_for_ttft() -> None:
    def scans(normal: float, ttft_now: float) -> list[Assessment]:
        queue = replace(signal(6.0), baseline=normal)
        ttft = SignalForecast(TTFT, "test", ttft_now, 0.75, 0.0, None, False, ttft_now > 0.8, None)
        return [Assessment(at=30.0 * i, signals=[queue, ttft]) for i in range(6)]

    assert states_of(scans(1.0, 0.75))[2] == ScanState.WARNING  # 6 waiting where 1 is normal: TTFT has not moved yet
    assert ScanState.WARNING not in states_of(scans(5.0, 0.8))  # 6 instead of its usual 5: a busy host as usual
    assert ScanState.WARNING not in states_of(scans(5.0, 0.9))  # TTFT up, but by 0.15 s of its 1.25 s headroom
    assert ScanState.WARNING not in states_of(scans(5.0, 1.2))  # by a third of it: a busy host's wander
    assert states_of(scans(5.0, 1.5))[2] == ScanState.WARNING  # up by more than half of it


def test_a_host_living_beyond_a_threshold_warns_on_that_signal_only_once_ttft_feels_it() -> None:
    cpu = Limit("cpu_bound_ratio", "CPU-bound ratio", "ratio", ">", 0.82)
    busy = SignalForecast(cpu, "test", 0.93, 0.88, 0.0, None, True, True, 0.0)  # 0.88 is its normal
    crossing = SignalForecast(cpu, "test", 0.86, 0.55, 0.0, None, True, True, 0.0)  # 0.55 is its normal

    def scans(cpu_now: SignalForecast, ttft_now: float) -> list[Assessment]:
        ttft = SignalForecast(TTFT, "test", ttft_now, 0.4, 0.0, None, False, ttft_now > 0.45, None)
        return [Assessment(at=30.0 * i, signals=[cpu_now, ttft]) for i in range(3)]

    assert ScanState.WARNING not in states_of(scans(busy, 0.4))
    assert states_of(scans(busy, 1.3))[2] == ScanState.WARNING  # TTFT up by 0.9 s of its 1.6 s headroom
    assert states_of(scans(crossing, 0.4))[2] == ScanState.WARNING  # the threshold means something here


def test_a_host_whose_normal_life_reaches_beyond_a_threshold_lives_there() -> None:
    """A busy host's queue wanders between 2 and 7 over the day around 4.7: its median at this hour
    yesterday was 4, so 6 now is past the threshold and off that median, but its own history
    (this hour's level, or its noise) reaches past 4.7 too."""

    def scans(edge: float, ttft_now: float) -> list[Assessment]:
        queue = replace(signal(6.0), baseline=4.0, normal_edge=edge)
        ttft = SignalForecast(TTFT, "test", ttft_now, 0.9, 0.0, None, False, ttft_now > 1.0, None)
        return [Assessment(at=30.0 * i, signals=[queue, ttft]) for i in range(6)]

    assert ScanState.WARNING not in states_of(scans(7.0, 0.9))  # its normal reaches 7: 6 is normal for it
    assert states_of(scans(4.5, 0.9))[2] == ScanState.WARNING  # it reaches 4.5: 6 is news
    assert states_of(scans(7.0, 1.6))[2] == ScanState.WARNING  # within its range, but TTFT feels it


def test_ttft_is_felt_only_beyond_where_its_own_normal_life_reached() -> None:
    """A busy host's queue past its normal and its TTFT p95 at 1.6 s of a 2 s SLO, up from a median
    of 0.95 s: felt, unless its TTFT reached that high at this hour yesterday too (its normal
    edge, `NormalRange.edge`), where it is the busy host's usual wander."""

    def scans(ttft_edge: float | None) -> list[Assessment]:
        queue = replace(signal(7.0), baseline=4.0, normal_edge=6.5)  # lives beyond 4.7
        slo = Limit("ttft_p95", "TTFT p95", "s", ">", 2.0, latest=True)
        ttft = SignalForecast(slo, "test", 1.6, 0.95, 0.0, None, False, True, None, normal_edge=ttft_edge)
        return [Assessment(at=30.0 * i, signals=[queue, ttft]) for i in range(4)]

    assert states_of(scans(1.2))[2] == ScanState.WARNING  # this hour and yesterday's stayed under 1.2 s
    assert states_of(scans(None))[2] == ScanState.WARNING  # no history to tell
    assert ScanState.WARNING not in states_of(scans(1.7))  # yesterday it reached 1.7 s at this hour
