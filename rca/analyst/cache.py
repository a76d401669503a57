"""Reuse an LLM answer for the same evidence: an investigation whose answer key matches one the
LLM answered within `RCA_LLM_CACHE_SECONDS` takes that answer instead of calling the model.
An answer that failed validation is reused too (as the reason the rules answer): at temperature 0
the same prompt would fail the same way. Failures without an answer (timeouts, 429, 5xx) are not.

The analyst only knows this protocol; the answers live where investigations do (the database,
`rca.store.answers.DatabaseAnswerCache`), so every worker process and the embedded mode share them,
and a cached answer always points at the investigation it came from.
"""

from __future__ import annotations

from typing import Protocol

from rca.domain.analyst import CachedAnswer


class AnswerCache(Protocol):
    def lookup(self, answer_key: str) -> CachedAnswer | None: ...
