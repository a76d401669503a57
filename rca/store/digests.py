"""Keep each incident's digest (search document, labels, evidence signature, confirmed cause) in
step with its sources.

The application rewrites the digest, rather than database triggers, because the document is
assembled from five tables and JSON label maps: one Python function does that identically on
Postgres and SQLite, where triggers would need the flattening written twice in two SQL dialects.
Every write path calls `refresh` in its own transaction: the incidents room's (intake, the scan,
feedback: `rca.incidents.search`; a finished analysis: `rca.incidents.investigations.finish`).
Intake, the hot path, writes new incidents' digests from the rows in hand (`write_new`) and leaves
it alone when a notification changed nothing the digest is built from (a plain re-send).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from rca.domain.evidence import onset_order
from rca.domain.status import InvestigationStatus
from rca.store import fts
from rca.store.models import (
    AlertRow,
    Base,
    FeedbackRow,
    FindingRow,
    HypothesisRow,
    IncidentDigestRow,
    IncidentRow,
    InvestigationRow,
)

TOP_CATEGORIES = 3
DIGESTS = Base.metadata.tables["incident_digests"]
NEW_DIGESTS = insert(DIGESTS)  # built once: intake inserts them for every new incident
# The search document of one incident holds at most this many characters. Postgres refuses a
# tsvector over 1 MB, and one built from distinct short words (or CJK text) takes up to about six
# bytes per character; an incident's alerts accumulate over every notification, so without a cap a
# long alert storm would one day make its own digest unwritable (and the notification with it).
DOCUMENT_CHARS = 100_000


def breached_key(breached: list[str]) -> str | None:
    """A short, indexable key of the exact set of breached findings."""
    if not breached:
        return None
    return hashlib.sha1(",".join(sorted(breached)).encode()).hexdigest()


def _label_text(labels: dict[str, Any]) -> list[str]:
    return [f"{name}={value}" for name, value in sorted(labels.items())]


def _cut(parts: list[str], budget: int) -> list[str]:
    """The leading parts that fit in `budget` characters (one separator each), the last one cut."""
    kept: list[str] = []
    for part in parts:
        if budget <= 0:
            break
        kept.append(part[:budget])
        budget -= len(part) + 1
    return kept


def build_document(
    incident: IncidentRow,
    alerts: list[AlertRow],
    findings: list[FindingRow],
    hypotheses: list[HypothesisRow],
    feedback: FeedbackRow | None,
) -> str:
    """Everything one may search for, as plain text: titles, alert names, labels, annotations,
    findings and hypotheses (and the engineer's note), in at most `DOCUMENT_CHARS` characters. The
    alerts' text gives way first: the incident's own text and its evidence are always searchable."""
    head: list[str] = [incident.title, incident.alertname or ""]
    head += _label_text(incident.common_labels) + [str(v) for v in incident.common_annotations.values()]
    per_alert: list[str] = []
    for alert in alerts:
        per_alert += [alert.alertname or ""] + _label_text(alert.labels) + [str(v) for v in alert.annotations.values()]
    tail: list[str] = []
    for finding in findings:
        if finding.breached:
            tail += [finding.key, finding.title, finding.detail]
    for hypothesis in hypotheses:
        tail += [hypothesis.category, hypothesis.title]
    if feedback is not None:
        tail += [feedback.category, feedback.note]
    head, per_alert, tail = ([p for p in dict.fromkeys(part) if p] for part in (head, per_alert, tail))
    room = DOCUMENT_CHARS - len("\n".join(head + tail)) - 1
    parts = head + _cut([p for p in per_alert if p not in head], room) + tail
    return "\n".join(dict.fromkeys(parts))[:DOCUMENT_CHARS]


def refresh(session: Session, incident_id: int) -> IncidentDigestRow:
    """Recompute the digest of one incident from its current rows (inside the caller's transaction)."""
    session.flush()
    incident = session.get(IncidentRow, incident_id)
    if incident is None:
        raise LookupError(f"incident {incident_id} vanished")
    alerts = list(session.scalars(select(AlertRow).where(AlertRow.incident_id == incident_id).order_by(AlertRow.id)))
    done = session.scalar(
        select(InvestigationRow)
        .where(InvestigationRow.incident_id == incident_id, InvestigationRow.status == InvestigationStatus.DONE)
        .order_by(InvestigationRow.id.desc())
        .limit(1)
    )
    findings = list(session.scalars(select(FindingRow).where(FindingRow.investigation_id == done.id))) if done else []
    hypotheses = (
        list(
            session.scalars(
                select(HypothesisRow).where(HypothesisRow.investigation_id == done.id).order_by(HypothesisRow.rank)
            )
        )
        if done
        else []
    )
    feedback = session.scalar(
        select(FeedbackRow).where(FeedbackRow.incident_id == incident_id).order_by(FeedbackRow.id.desc()).limit(1)
    )
    digest = session.get(IncidentDigestRow, incident_id) or IncidentDigestRow(incident_id=incident_id)
    for name, value in _columns(incident, alerts, done, findings, hypotheses, feedback).items():
        setattr(digest, name, value)
    session.add(digest)
    fts.write(session, incident_id, digest.document)
    return digest


def write_new(session: Session, new: Sequence[tuple[IncidentRow, list[AlertRow]]]) -> None:
    """Insert the digests of incidents created in this transaction, from the rows in hand, in one
    statement: nothing of them has been analysed or confirmed yet, so there is nothing to read
    back (intake's hot path)."""
    rows = [{"incident_id": incident.id, **_columns(incident, alerts, None, [], [], None)} for incident, alerts in new]
    if not rows:
        return
    session.execute(NEW_DIGESTS, rows)
    for row in rows:
        fts.write(session, row["incident_id"], row["document"])


def _columns(
    incident: IncidentRow,
    alerts: list[AlertRow],
    done: InvestigationRow | None,
    findings: list[FindingRow],
    hypotheses: list[HypothesisRow],
    feedback: FeedbackRow | None,
) -> dict[str, Any]:
    """The digest's columns, computed from its sources."""
    breached = sorted(f.key for f in findings if f.breached)
    return {
        "created_at": incident.created_at,
        "status": incident.status,
        "document": build_document(incident, alerts, findings, hypotheses, feedback),
        "labels": sorted({pair for alert in alerts for pair in _label_text(alert.labels)}),
        "breached": breached,
        "breached_key": breached_key(breached),
        "onset_order": onset_order(findings),
        "stack": (done.target or {}).get("stack") if done else None,
        "categories": [h.category for h in hypotheses[:TOP_CATEGORIES]],
        "top_category": hypotheses[0].category if hypotheses else None,
        "top_confidence": hypotheses[0].confidence if hypotheses else None,
        "analyst": done.analyst if done else None,
        "confirmed_category": feedback.category if feedback else None,
    }
