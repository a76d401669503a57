"""Evidence and what it points at: a `Finding` is what one check concluded from one signal's data
(the unit of evidence in the ranking, the prompt, the database, Slack and the API); a `Hypothesis`
is one ranked root cause citing findings by key."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from rca.domain.status import FindingStatus


@dataclass
class Finding:
    key: str  # the signal id: hypotheses cite it, and an investigation holds each key once
    kind: str  # signal | supporting | trace
    title: str
    status: FindingStatus
    breached: bool
    value: float | None
    baseline: float | None
    threshold: float | None
    comparison: str  # ">" or "<": which side of the threshold is a breach
    unit: str
    onset: datetime | None
    query: str | None
    source: str | None
    series_labels: dict[str, str] | None
    detail: str

    @property
    def chronic(self) -> bool:
        return is_chronic(self)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["onset"] = self.onset.isoformat() if self.onset else None
        return data


@dataclass
class Hypothesis:
    rank: int
    category: str
    title: str
    confidence: float
    evidence: list[str]  # keys of the supporting findings
    contradicting: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    explanation: str = ""
    score: float = 0.0  # the rules' score; not stored
    analyst: str = "rules"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Dated(Protocol):
    """What `is_chronic` and `onset_order` read: a `Finding`, or a stored finding row."""

    @property
    def key(self) -> str: ...
    @property
    def breached(self) -> bool: ...
    @property
    def baseline(self) -> float | None: ...
    @property
    def onset(self) -> datetime | None: ...


def is_chronic(finding: Dated) -> bool:
    """Breached for the whole window: no healthy baseline to show that it changed. Only an
    absolute threshold can do this; a relative rule compares with the series' own past."""
    return bool(finding.breached) and finding.baseline is None


def onset_order(findings: Sequence[Dated]) -> list[str]:
    """Breached finding keys in the order they started (what moved first)."""
    dated = [f for f in findings if f.breached and f.onset]
    return [f.key for f in sorted(dated, key=lambda f: f.onset or datetime.max.replace(tzinfo=UTC))]
