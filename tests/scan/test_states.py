"""The state machine on synthetic assessments: hysteresis, one warning, damped flapping."""

from __future__ import annotations

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
