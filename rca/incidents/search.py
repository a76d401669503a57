"""An incident's search digest, kept in step with its rows by the room's write paths: written from
the rows in hand for incidents opened now (`index_new`, intake's hot path), recomputed after any
other change (`reindex`). How the digest is built lives in the store (rca/store/digests.py)."""

from __future__ import annotations

from rca.store.digests import refresh as reindex
from rca.store.digests import write_new as index_new

__all__ = ["index_new", "reindex"]
