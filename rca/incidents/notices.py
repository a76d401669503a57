"""The Slack notice owed about an incident, as the room keeps it: owed by the transaction that gives
Slack something to say, settled or deferred by the delivery (rca.notify), claimed by the sweep
(rca.jobs.sweep). The bookkeeping itself lives in the store (rca/store/notices.py, which says why
it is kept on the incident's row); the other rooms reach it only through here, so that what an
incident owes changes in one place; `owed` counts them for the metrics. Sending to Slack is
rca.notify's."""

from __future__ import annotations

from rca.store.notices import claim_owed, defer, owe, owed, settle

__all__ = ["claim_owed", "defer", "owe", "owed", "settle"]
