"""An investigation's result as the store keeps it: the pipeline builds it, the store persists it
without knowing how it was found."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rca.domain.analyst import AnalystRecord
from rca.domain.evidence import Dated, Finding, Hypothesis
from rca.domain.status import FindingStatus, InconclusiveReason


@dataclass
class InvestigationResult:
    findings: list[Finding]
    hypotheses: list[Hypothesis]
    analyst: AnalystRecord | None  # None: the rules wrote the hypotheses without an analyst stage
    window_start: datetime
    window_end: datetime
    step_seconds: int
    target: dict[str, Any]  # the target as investigated, with its selectors and serving stack
    error: str | None  # why Prometheus could not be read, when it could not
    collect_seconds: float
    total_seconds: float
    # What Slack's message shows, as a hash (`change_key` below): a new investigation with
    # the same key changes nothing worth a post.
    change_key: str
    # Set when no evidence could be read (rca.domain.coverage): stored as `inconclusive`, with no
    # hypotheses, instead of `done`.
    inconclusive: InconclusiveReason | None = None
    # A fleet round's first investigation: what its affected hosts share that their healthy peers
    # lack (rca.domain.factor.CommonFactor.to_dict); None for any other investigation.
    common_factor: dict[str, Any] | None = None


TOP_CATEGORIES = 3  # how many ranked causes count as "the ranking" for the change key


def change_key(findings: Sequence[Dated], ranked_categories: Sequence[str]) -> str:
    """A hash of what the evidence says, not how it is worded: the breached findings and the top
    categories of the rules' ranking. A re-investigation that only rewords an explanation or
    moves a confidence a little keeps the same key, so Slack is not told again. (The same hash
    notify computed before migration 0007, so upgrading re-posts nothing.)"""
    evidence = {
        "breached": sorted((f.key, FindingStatus.BREACHED.value) for f in findings if f.breached),
        "top": list(ranked_categories[:TOP_CATEGORIES]),
    }
    return hashlib.sha256(json.dumps(evidence, sort_keys=True).encode()).hexdigest()
