"""What an investigation could not see, in the words every output uses (the API, the pages, Slack,
the terminal, the demo), and the one rule that decides when it saw nothing: a result with nothing
measured must never read as a healthy one or carry a cause, and one with signals missing says
which were not checked.

Blind means no metric finding was measured: Prometheus is not configured, did not answer, or had
no series for the target. Trace findings do not count: they attribute latency within a cause the
metrics point at, and alone they judge nothing. The pipeline stores a blind investigation as
`inconclusive` with its reason (`InconclusiveReason`), never with ranked causes.

Only `unavailable` findings count as missing when some were measured: `not_measurable` is a
property of the serving stack (it exports nothing the signal could use), the same every time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from rca.domain.status import MEASURED, FindingStatus, InconclusiveReason

NO_PROMETHEUS = "no Prometheus configured (set RCA_PROMETHEUS_URL)"  # the collection's error then
NOT_A_VERDICT = "this is not a healthy verdict"
TRACE = "trace"  # the finding kind that is no metric evidence
SHOWN_IDS = 5
# The reason in a few words: the list, the incident page's timeline, Slack's notification line.
REASON_WORDS: dict[str, str] = {
    InconclusiveReason.NO_PROMETHEUS: "no Prometheus configured",
    InconclusiveReason.PROMETHEUS_UNREACHABLE: "Prometheus unreachable",
    InconclusiveReason.NO_DATA: "no data for this target",
}


class Judged(Protocol):
    """What the rule reads of a finding: a `Finding`, a stored finding row, or `judged(dict)`."""

    @property
    def key(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def status(self) -> str: ...


@dataclass(frozen=True)
class _Judged:
    key: str
    kind: str
    status: str


def judged(finding: Mapping[str, Any]) -> Judged:
    """A finding in the API's shape (`id`, `kind`, `status`), as the rule reads it."""
    return _Judged(finding["id"], finding["kind"], finding["status"])


@dataclass(frozen=True)
class DataGap:
    text: str  # one sentence, plain text
    reason: InconclusiveReason | None = None  # set when blind: why nothing could be judged

    @property
    def blind(self) -> bool:
        """Nothing was measured: no cause can be judged, and none is shown."""
        return self.reason is not None

    @property
    def headline(self) -> str | None:
        """`could not investigate: Prometheus unreachable`, for a blind result; else None."""
        return could_not_investigate(self.reason) if self.reason is not None else None


def could_not_investigate(reason: str) -> str:
    """The outcome in a few words, from a stored reason: `could not investigate: no data for this target`."""
    return f"could not investigate: {REASON_WORDS.get(reason, reason)}"


def _reason(prometheus_error: str | None) -> InconclusiveReason:
    """Why a blind investigation saw nothing, from the collection's error."""
    if prometheus_error == NO_PROMETHEUS:
        return InconclusiveReason.NO_PROMETHEUS
    if prometheus_error:
        return InconclusiveReason.PROMETHEUS_UNREACHABLE
    return InconclusiveReason.NO_DATA


def data_gap(findings: Iterable[Judged], prometheus_error: str | None = None) -> DataGap | None:
    """What was missing, from the findings and the collection's error; None when every signal
    that the stack exports was measured."""
    findings = list(findings)
    metrics = [f for f in findings if f.kind != TRACE]
    if not any(f.status in MEASURED for f in metrics):
        reason = _reason(prometheus_error)
        if reason == InconclusiveReason.NO_PROMETHEUS:
            cause = f"{NO_PROMETHEUS}, so no metrics were read"
        elif reason == InconclusiveReason.PROMETHEUS_UNREACHABLE:
            cause = f"Prometheus unreachable, so no metrics were read ({prometheus_error})"
        else:
            cause = (
                f"no data for this target, none of its {len(metrics)} signals could be measured "
                "(no series, or their queries failed)"
            )
        return DataGap(f"Could not investigate: {cause}; {NOT_A_VERDICT}", reason)
    missing = sorted(f.key for f in findings if f.status == FindingStatus.UNAVAILABLE)
    if not missing:
        return None
    shown = ", ".join(missing[:SHOWN_IDS]) + (
        f" and {len(missing) - SHOWN_IDS} more" if len(missing) > SHOWN_IDS else ""
    )
    return DataGap(f"{len(missing)} of {len(findings)} signals had no data and were not checked: {shown}")
