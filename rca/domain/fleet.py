"""A fleet incident's answer: its hosts grouped by their top cause (rca.domain.hosts queues one
investigation per host). Pure, so that the API, Slack and tests read one summary.

A cause is called fleet-wide only when every host investigated shares it (two or more hosts, each
finished with that cause first): one host blamed for a surge says nothing of the others. Hosts that
finished blind (inconclusive), failed or have not finished are counted apart, never folded into a
cause; those beyond RCA_FLEET_MAX_HOSTS are counted as not investigated.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rca.domain.factor import CommonFactor
from rca.domain.status import InvestigationStatus

NO_CLEAR_CAUSE = "no_clear_cause"  # the taxonomy's "nothing explains it" (rca.diagnosis.ranking)
SHOWN_HOSTS = 4  # host names written out in a line before "and N more"
_NUMBERED = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True)
class HostAnswer:
    """One host's investigation of the round: how it ended, and its top cause when it was done."""

    host: str
    status: str  # rca.domain.status.InvestigationStatus
    category: str | None = None
    confidence: float | None = None


@dataclass(frozen=True)
class CauseGroup:
    """The hosts whose top cause is `category`, each with its confidence, by host name."""

    category: str
    hosts: list[tuple[str, float]]

    def line(self) -> str:
        """`arrival_surge on 4 hosts (gpu-node-1..4), confidence 0.91-0.99`."""
        low, high = min(c for _, c in self.hosts), max(c for _, c in self.hosts)
        confidence = f"{low:.2f}" if low == high else f"{low:.2f}-{high:.2f}"
        hosts = host_list([host for host, _ in self.hosts])
        return f"{self.category} on {count(len(self.hosts))} ({hosts}), confidence {confidence}"


@dataclass(frozen=True)
class FleetSummary:
    """What the round says about the fleet (`summarise`)."""

    causes: list[CauseGroup] = field(default_factory=list)  # most hosts first
    inconclusive: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)  # queued or running still
    skipped: int = 0  # hosts the alerts named beyond RCA_FLEET_MAX_HOSTS, not investigated
    fleet_wide: str | None = None  # the cause every investigated host shares, if one does
    common_factor: CommonFactor | None = None  # what the affected hosts share that healthy peers lack, when judged

    @property
    def investigated(self) -> int:
        return sum(len(g.hosts) for g in self.causes) + len(self.inconclusive) + len(self.failed) + len(self.unfinished)

    def lines(self) -> list[str]:
        """The summary in a few lines (a line per cause, then the hosts counted apart, then the
        common factor when it was judged): short whatever the fleet's size, for Slack and logs."""
        head = (
            [f"fleet-wide: {self.fleet_wide} on every host investigated ({self.investigated})"]
            if self.fleet_wide
            else []
        )
        apart = [
            (words, hosts)
            for words, hosts in (
                ("no cause readable (inconclusive)", self.inconclusive),
                ("investigation failed", self.failed),
                ("still being investigated", self.unfinished),
            )
            if hosts
        ]
        skipped = [f"not investigated: {count(self.skipped)} beyond RCA_FLEET_MAX_HOSTS"] if self.skipped else []
        return (
            head
            + [group.line() for group in self.causes]
            + [f"{words}: {count(len(hosts))} ({host_list(hosts)})" for words, hosts in apart]
            + skipped
            + ([self.common_factor.line()] if self.common_factor else [])
        )


def count(hosts: int) -> str:
    return f"{hosts} host" if hosts == 1 else f"{hosts} hosts"


def host_list(hosts: Sequence[str], shown: int = SHOWN_HOSTS) -> str:
    """Hosts in a few words: numbered runs folded (`gpu-node-1..4`), at most `shown` items, then
    how many more."""
    items: list[str] = []
    run: list[tuple[str, int, str]] = []  # (prefix, number, name) of consecutive numbered hosts

    def close() -> None:
        if len(run) > 2:
            items.append(f"{run[0][2]}..{run[-1][1]}")
        else:
            items.extend(name for _, _, name in run)
        run.clear()

    for name in sorted(hosts, key=_natural):
        numbered = _NUMBERED.match(name)
        if numbered and run and run[-1][0] == numbered.group(1) and run[-1][1] + 1 == int(numbered.group(2)):
            run.append((numbered.group(1), int(numbered.group(2)), name))
            continue
        close()
        if numbered:
            run.append((numbered.group(1), int(numbered.group(2)), name))
        else:
            items.append(name)
    close()
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more} more" if more > 0 else "")


def _natural(name: str) -> tuple[str, int, str]:
    numbered = _NUMBERED.match(name)
    return (numbered.group(1), int(numbered.group(2)), name) if numbered else (name, -1, name)


def summarise(
    answers: Sequence[HostAnswer], skipped: int = 0, common_factor: CommonFactor | None = None
) -> FleetSummary:
    """Group the round's hosts by their top cause (most hosts first, then the cause's name), and
    name the cause fleet-wide only when every host investigated finished with it first."""
    by_cause: dict[str, list[tuple[str, float]]] = {}
    apart: dict[str, list[str]] = {}
    for answer in answers:
        if answer.status == InvestigationStatus.DONE and answer.category is not None:
            by_cause.setdefault(answer.category, []).append((answer.host, answer.confidence or 0.0))
        else:
            apart.setdefault(answer.status, []).append(answer.host)
    causes = [
        CauseGroup(category, sorted(hosts, key=lambda h: _natural(h[0])))
        for category, hosts in sorted(by_cause.items(), key=lambda item: (-len(item[1]), item[0]))
    ]
    shared = [group.category for group in causes if len(group.hosts) == len(answers) > 1]
    return FleetSummary(
        causes=causes,
        inconclusive=apart.get(InvestigationStatus.INCONCLUSIVE, []),
        failed=apart.get(InvestigationStatus.FAILED, []),
        unfinished=apart.get(InvestigationStatus.QUEUED, []) + apart.get(InvestigationStatus.RUNNING, []),
        skipped=skipped,
        fleet_wide=next((c for c in shared if c != NO_CLEAR_CAUSE), None),
        common_factor=common_factor,
    )
