"""The backtest's replay: states, warnings and leads from recorded scans, without Prometheus."""

from __future__ import annotations

from rca.scan.backtest import Frame, replay
from rca.scan.forecast import Limit, SignalForecast
from rca.scan.states import Assessment, Policy

CPU = Limit("cpu_bound_ratio", "CPU-bound ratio", "ratio", ">", 0.82)
TTFT = Limit("ttft_p95", "TTFT p95 against its SLO", "s", ">", 2.0)
POLICY = Policy(horizon_seconds=600, sustain=3, calm_seconds=120)


def signal(limit: Limit, current: float) -> SignalForecast:
    breached = current > limit.threshold
    return SignalForecast(limit, "test", current, None, 0.0, None, breached, breached, 0.0 if breached else None)


def frames(cpu: dict[str, list[float]], ttft: dict[str, list[float]]) -> list[Frame]:
    """One frame per 30 s; each target's CPU-bound ratio and TTFT p95 at that scan."""
    count = len(next(iter(cpu.values())))
    return [
        Frame(
            30.0 * i,
            {
                instance: Assessment(
                    at=30.0 * i, signals=[signal(CPU, cpu[instance][i]), signal(TTFT, ttft[instance][i])]
                )
                for instance in cpu
            },
        )
        for i in range(count)
    ]


def test_replay_times_the_warning_before_the_breach_and_flags_a_warning_no_breach_followed() -> None:
    creeping = [0.5] * 4 + [0.9] * 16  # the CPU-bound ratio crosses at scan 4, TTFT breaks at scan 12
    recorded = frames(
        {"a:8000": creeping, "b:8000": [0.5] * 4 + [0.9] * 4 + [0.5] * 12},
        {"a:8000": [0.3] * 12 + [3.0] * 8, "b:8000": [0.3] * 20},
    )
    result = replay(recorded, POLICY)
    assert [(w.instance, w.start) for w in result.warnings] == [("a:8000", 180.0), ("b:8000", 180.0)]
    assert [(b.instance, b.breach_at, b.lead_seconds) for b in result.breaches] == [("a:8000", 360.0, 180.0)]
    assert [w.instance for w in result.false_warnings] == ["b:8000"] and result.missed == []
    assert result.warnings[1].end is not None  # b's warning cleared after its calm period
    one = replay(recorded, POLICY, only="b:8000")
    assert one.targets == 1 and one.breaches == [] and len(one.warnings) == 1


def test_a_breach_without_a_warning_before_it_is_missed_when_the_slo_must_hold() -> None:
    sudden = frames({"a:8000": [0.5] * 10}, {"a:8000": [0.3] * 5 + [3.0] * 5})
    held = Policy(horizon_seconds=600, sustain=3, calm_seconds=120, slo_sustain=3)
    result = replay(sudden, held)
    assert [b.warned_at for b in result.breaches] == [None] and len(result.missed) == 1
    assert [w.start for w in result.warnings] == [210.0]  # the warning came two scans after the breach
