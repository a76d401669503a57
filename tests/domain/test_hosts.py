"""Which hosts an incident's alerts name, and the round one queues (rca.domain.hosts)."""

from __future__ import annotations

import pytest

from rca.domain.hosts import Fleet, Round

FLEET = Fleet(("instance", "Hostname"))


def alert(**labels: str) -> dict[str, str]:
    return {"alertname": "QueueHigh", **labels}


def test_each_alert_counts_for_the_machine_it_names_in_any_spelling() -> None:
    alerts = [
        alert(instance="gpu-node-1:8000"),
        alert(instance="gpu-node-1.example.com:9100"),
        # DCGM scraped by its pod IP names its node in Hostname: one host with the engine's alert
        alert(instance="10.42.0.17:9400", Hostname="gpu-node-2"),
        alert(instance="gpu-node-2:8000"),
        alert(instance="10.0.0.5:9100"),  # node_exporter by address alone: that address
    ]
    assert FLEET.round(alerts) == Round(hosts=("10.0.0.5", "gpu-node-1", "gpu-node-2"), skipped=0)


def test_one_host_or_none_is_the_incident_as_one_target() -> None:
    assert FLEET.round([alert(instance="gpu-node-1:8000"), alert(Hostname="gpu-node-1")]) == Round()
    assert FLEET.round([alert(job="vllm")]) == Round() and not Round().fleet


def test_beyond_the_bound_the_same_sample_is_drawn_whatever_the_alerts_order() -> None:
    alerts = [alert(instance=f"gpu-node-{n}:8000") for n in range(1, 41)]
    bounded = Fleet(("instance",), max_hosts=8)
    first, again = bounded.round(alerts), bounded.round(list(reversed(alerts)))
    assert first == again and len(first.hosts) == 8 and first.skipped == 32
    assert first.hosts != tuple(f"gpu-node-{n}" for n in range(1, 9))  # a sample, not the first names


def test_a_bound_below_one_host_is_refused() -> None:
    with pytest.raises(ValueError, match="max_hosts must be at least 1, not 0"):
        Fleet(("instance",), max_hosts=0)
