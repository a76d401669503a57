"""What a fault may not cost, counted from the database and the fake Slack after the fact: every
accepted alert (answered 2xx) investigated exactly once, every finished investigation posted to
Slack exactly once, nothing half-stored. Shared by the fault tests and `bench/faults.py`."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field

from sqlalchemy import text

from rca.store.db import get_engine
from tests.fakes.slack import FakeSlack

MESSAGE_OF = re.compile(r"Incident #(\d+)\*")  # an incident's message, as tests.helpers.slack.of_incident finds it

# Incidents stored without a part every accepted notification brings, and finished investigations
# without their results: what a transaction cut in half would leave.
HALF_STORED = {
    "incident without alerts": "SELECT id FROM incidents i WHERE NOT EXISTS "
    "(SELECT 1 FROM alerts a WHERE a.incident_id = i.id)",
    "incident without its notification": "SELECT id FROM incidents i WHERE NOT EXISTS "
    "(SELECT 1 FROM notifications n WHERE n.incident_id = i.id)",
    "incident without an investigation": "SELECT id FROM incidents i WHERE NOT EXISTS "
    "(SELECT 1 FROM investigations v WHERE v.incident_id = i.id)",
    "done investigation without findings": "SELECT incident_id FROM investigations v WHERE status = 'done' "
    "AND NOT EXISTS (SELECT 1 FROM findings f WHERE f.investigation_id = v.id)",
    "done investigation without hypotheses": "SELECT incident_id FROM investigations v WHERE status = 'done' "
    "AND NOT EXISTS (SELECT 1 FROM hypotheses h WHERE h.investigation_id = v.id)",
}


@dataclass
class Burst:
    """The webhooks a test sent: group key -> incident id of those answered 2xx, and the status of
    those refused (0: no answer at all)."""

    accepted: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)

    def merge(self, other: Burst) -> None:
        self.accepted |= other.accepted
        for key in other.accepted:
            self.refused.pop(key, None)
        self.refused |= {k: v for k, v in other.refused.items() if k not in self.accepted}


@dataclass
class Audit:
    accepted: int
    unfinished: list[int]  # accepted incidents with no finished investigation (yet)
    lost: list[int]  # accepted incidents not stored at all
    investigated_twice: list[int]  # incidents with more than one finished investigation
    failed: list[int]  # incidents whose investigation finished as failed
    missing_posts: list[int]  # finished, and no Slack message (yet)
    duplicate_posts: list[int]  # finished, and more than one Slack message
    half_stored: dict[str, list[int]]

    @property
    def settled(self) -> bool:
        """Everything accepted finished and was posted: what to wait for before judging."""
        return not (self.unfinished or self.lost or self.missing_posts)

    @property
    def clean(self) -> bool:
        return self.settled and not (
            self.investigated_twice or self.failed or self.duplicate_posts or any(self.half_stored.values())
        )

    def problems(self) -> dict[str, object]:
        found = {
            "unfinished": self.unfinished,
            "lost": self.lost,
            "investigated twice": self.investigated_twice,
            "failed": self.failed,
            "missing Slack posts": self.missing_posts,
            "duplicate Slack posts": self.duplicate_posts,
        } | self.half_stored
        return {name: ids for name, ids in found.items() if ids}


def audit(db_url: str, slack: FakeSlack, burst: Burst) -> Audit:
    """Count what happened to every accepted alert of `burst`."""
    incidents = set(burst.accepted.values())
    with get_engine(db_url).connect() as conn:
        stored = set(conn.execute(text("SELECT id FROM incidents")).scalars())
        finished = Counter(
            conn.execute(
                text("SELECT incident_id FROM investigations WHERE status IN ('done', 'inconclusive', 'failed')")
            ).scalars()
        )
        failed = set(conn.execute(text("SELECT incident_id FROM investigations WHERE status = 'failed'")).scalars())
        half = {name: sorted(conn.execute(text(query)).scalars()) for name, query in HALF_STORED.items()}
    per_incident = Counter(int(m) for post in slack.posts() for m in set(MESSAGE_OF.findall(json.dumps(post.payload))))
    posted = {incident: per_incident[incident] for incident in incidents if finished[incident]}
    return Audit(
        accepted=len(incidents),
        unfinished=sorted(i for i in incidents & stored if not finished[i]),
        lost=sorted(incidents - stored),
        investigated_twice=sorted(i for i in incidents if finished[i] > 1),
        failed=sorted(incidents & failed),
        missing_posts=sorted(i for i, n in posted.items() if n == 0),
        duplicate_posts=sorted(i for i, n in posted.items() if n > 1),
        half_stored=half,
    )
