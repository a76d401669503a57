"""What an investigation could not see, in the words every output uses (Slack, the terminal, the
demo): a result with nothing measured must never read as a healthy one, and one with signals
missing says which were not checked.

Only `unavailable` findings count as missing when some were measured: `not_measurable` is a
property of the serving stack (it exports nothing the signal could use), the same every time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rca.domain.status import MEASURED, FindingStatus

NO_PROMETHEUS = "no Prometheus configured (set RCA_PROMETHEUS_URL)"  # the collection's error then
NOT_A_VERDICT = "this is not a healthy verdict"
SHOWN_IDS = 5


@dataclass(frozen=True)
class DataGap:
    blind: bool  # nothing at all was measured: no cause can be judged
    text: str  # one sentence, plain text


def data_gap(statuses: Mapping[str, str], prometheus_error: str | None = None) -> DataGap | None:
    """What was missing, from each finding's status (by key) and the collection's error; None
    when every signal that the stack exports was measured."""
    if prometheus_error:
        if prometheus_error == NO_PROMETHEUS:
            return DataGap(True, f"No Prometheus configured: no metrics were read; {NOT_A_VERDICT}")
        return DataGap(True, f"Prometheus unreachable: no metrics were read ({prometheus_error}); {NOT_A_VERDICT}")
    if not any(status in MEASURED for status in statuses.values()):
        return DataGap(True, f"No signal could be measured ({len(statuses)} without data); {NOT_A_VERDICT}")
    missing = sorted(key for key, status in statuses.items() if status == FindingStatus.UNAVAILABLE)
    if not missing:
        return None
    shown = ", ".join(missing[:SHOWN_IDS]) + (
        f" and {len(missing) - SHOWN_IDS} more" if len(missing) > SHOWN_IDS else ""
    )
    return DataGap(False, f"{len(missing)} of {len(statuses)} signals had no data and were not checked: {shown}")
