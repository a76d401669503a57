"""A fleet incident's hosts grouped by their top cause (rca.domain.fleet): a cause is fleet-wide
only when every host investigated shares it."""

from __future__ import annotations

import pytest

from rca.domain.fleet import CauseGroup, FleetSummary, HostAnswer, host_list, summarise
from rca.domain.status import InvestigationStatus

DONE, INCONCLUSIVE, FAILED, RUNNING = (
    InvestigationStatus.DONE,
    InvestigationStatus.INCONCLUSIVE,
    InvestigationStatus.FAILED,
    InvestigationStatus.RUNNING,
)


def done(host: str, category: str, confidence: float) -> HostAnswer:
    return HostAnswer(host, DONE, category, confidence)


def test_a_cause_every_host_shares_is_fleet_wide() -> None:
    summary = summarise(
        [done(f"gpu-node-{n}", "arrival_surge", c) for n, c in ((4, 0.94), (2, 0.92), (1, 0.91), (3, 0.93))]
    )
    assert summary.fleet_wide == "arrival_surge"
    assert summary.causes == [
        CauseGroup(
            "arrival_surge", [("gpu-node-1", 0.91), ("gpu-node-2", 0.92), ("gpu-node-3", 0.93), ("gpu-node-4", 0.94)]
        )
    ]
    assert summary.lines() == [
        "fleet-wide: arrival_surge on every host investigated (4)",
        "arrival_surge on 4 hosts (gpu-node-1..4), confidence 0.91-0.94",
    ]


def test_two_causes_are_both_named_with_their_hosts_and_none_is_fleet_wide() -> None:
    summary = summarise(
        [
            done("gpu-node-1", "kv_memory_pressure", 0.8),
            done("gpu-node-2", "arrival_surge", 0.99),
            done("gpu-node-3", "arrival_surge", 0.97),
        ]
    )
    assert summary.fleet_wide is None
    assert summary.lines() == [
        "arrival_surge on 2 hosts (gpu-node-2, gpu-node-3), confidence 0.97-0.99",
        "kv_memory_pressure on 1 host (gpu-node-1), confidence 0.80",
    ]


@pytest.mark.parametrize(
    "other",
    [
        HostAnswer("gpu-node-3", INCONCLUSIVE),  # a host that could not be read may not share it
        HostAnswer("gpu-node-3", FAILED),
        HostAnswer("gpu-node-3", RUNNING),  # not known yet
        done("gpu-node-3", "kv_memory_pressure", 0.6),
    ],
)
def test_no_fleet_wide_claim_unless_every_host_investigated_shares_the_cause(other: HostAnswer) -> None:
    summary = summarise([done("gpu-node-1", "arrival_surge", 0.9), done("gpu-node-2", "arrival_surge", 0.9), other])
    assert summary.fleet_wide is None
    assert summary.investigated == 3


def test_no_clear_cause_everywhere_is_not_a_fleet_wide_cause() -> None:
    summary = summarise([done("a", "no_clear_cause", 0.7), done("b", "no_clear_cause", 0.6)])
    assert summary.fleet_wide is None and summary.causes[0].category == "no_clear_cause"


def test_one_host_alone_is_never_fleet_wide() -> None:
    assert summarise([done("gpu-node-1", "arrival_surge", 0.99)]).fleet_wide is None


def test_hosts_counted_apart_and_not_investigated_are_said_in_a_line_each() -> None:
    summary = summarise(
        [
            done("gpu-node-1", "arrival_surge", 0.9),
            HostAnswer("gpu-node-2", INCONCLUSIVE),
            HostAnswer("gpu-node-3", FAILED),
            HostAnswer("gpu-node-4", RUNNING),
        ],
        skipped=12,
    )
    assert summary == FleetSummary(
        causes=[CauseGroup("arrival_surge", [("gpu-node-1", 0.9)])],
        inconclusive=["gpu-node-2"],
        failed=["gpu-node-3"],
        unfinished=["gpu-node-4"],
        skipped=12,
    )
    assert summary.lines()[1:] == [
        "no cause readable (inconclusive): 1 host (gpu-node-2)",
        "investigation failed: 1 host (gpu-node-3)",
        "still being investigated: 1 host (gpu-node-4)",
        "not investigated: 12 hosts beyond RCA_FLEET_MAX_HOSTS",
    ]


@pytest.mark.parametrize(
    ("hosts", "shown"),
    [
        (["gpu-node-2", "gpu-node-10", "gpu-node-1", "gpu-node-3"], "gpu-node-1..3, gpu-node-10"),
        (["a-1", "a-2"], "a-1, a-2"),
        (["db", "10.0.0.5", "web-7"], "10.0.0.5, db, web-7"),
        ([f"h{n}" for n in (1, 3, 5, 7, 9, 11)], "h1, h3, h5, h7 and 2 more"),
    ],
)
def test_host_lists_fold_numbered_runs_and_stay_short(hosts: list[str], shown: str) -> None:
    assert host_list(hosts) == shown
