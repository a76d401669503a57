"""investigations: the inconclusive outcome, with its reason

Revision ID: 0016
Revises: 0015
Create Date: 2027-02-01

An investigation that could read no evidence (no Prometheus configured, Prometheus unreachable, or
no series for the target) finishes `inconclusive` with the reason in `inconclusive_reason`, and no
ranked causes (rca/domain/coverage.py). Before, it finished `done` with `no_clear_cause` and a
confidence. Those stored before are reclassified by the same rule: a finished investigation with
findings of which no metric finding (any kind but `trace`) was measured (`breached` or `ok`). Their
hypotheses go, and so does the analyst; the digests of their incidents then read the latest
investigation still `done` for the causes shown and counted in the accuracy figures, or none.
(The search document keeps the old words until the incident's next change rewrites it.)
The downgrade keeps them finished, as `done` without causes.
"""

import hashlib

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

JSON_T = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
NO_PROMETHEUS = "no Prometheus configured (set RCA_PROMETHEUS_URL)"  # the collection's error then
TOP_CATEGORIES = 3

investigations = sa.table(
    "investigations",
    sa.column("id", sa.Integer),
    sa.column("incident_id", sa.Integer),
    sa.column("status", sa.String),
    sa.column("error", sa.Text),
    sa.column("analyst", sa.String),
    sa.column("target", JSON_T),
    sa.column("inconclusive_reason", sa.String),
)
findings = sa.table(
    "findings",
    sa.column("investigation_id", sa.Integer),
    sa.column("key", sa.String),
    sa.column("kind", sa.String),
    sa.column("status", sa.String),
    sa.column("breached", sa.Boolean),
    sa.column("onset", sa.DateTime(timezone=True)),
)
hypotheses = sa.table(
    "hypotheses",
    sa.column("investigation_id", sa.Integer),
    sa.column("rank", sa.Integer),
    sa.column("category", sa.String),
    sa.column("confidence", sa.Float),
)
digests = sa.table(
    "incident_digests",
    sa.column("incident_id", sa.Integer),
    sa.column("breached", JSON_T),
    sa.column("breached_key", sa.String),
    sa.column("onset_order", JSON_T),
    sa.column("stack", sa.String),
    sa.column("categories", JSON_T),
    sa.column("top_category", sa.String),
    sa.column("top_confidence", sa.Float),
    sa.column("analyst", sa.String),
)


def _reason(error: str | None) -> str:
    if error == NO_PROMETHEUS:
        return "no_prometheus"
    return "prometheus_unreachable" if error else "no_data"


def _evidence(bind: sa.Connection, incident_id: int) -> dict[str, object]:
    """The digest's evidence columns from the incident's latest investigation still done (as
    rca.store.digests computes them), or empty ones."""
    done = bind.execute(
        sa.select(investigations.c.id, investigations.c.analyst, investigations.c.target)
        .where(investigations.c.incident_id == incident_id, investigations.c.status == "done")
        .order_by(investigations.c.id.desc())
        .limit(1)
    ).first()
    if done is None:
        return {
            "breached": [],
            "breached_key": None,
            "onset_order": [],
            "stack": None,
            "categories": [],
            "top_category": None,
            "top_confidence": None,
            "analyst": None,
        }
    rows = bind.execute(
        sa.select(findings.c.key, findings.c.onset).where(findings.c.investigation_id == done.id, findings.c.breached)
    ).all()
    breached = sorted(row.key for row in rows)
    ranked = bind.execute(
        sa.select(hypotheses.c.category, hypotheses.c.confidence)
        .where(hypotheses.c.investigation_id == done.id)
        .order_by(hypotheses.c.rank)
    ).all()
    return {
        "breached": breached,
        "breached_key": hashlib.sha1(",".join(breached).encode()).hexdigest() if breached else None,
        "onset_order": [row.key for row in sorted((r for r in rows if r.onset), key=lambda r: r.onset)],
        "stack": (done.target or {}).get("stack"),
        "categories": [row.category for row in ranked[:TOP_CATEGORIES]],
        "top_category": ranked[0].category if ranked else None,
        "top_confidence": ranked[0].confidence if ranked else None,
        "analyst": done.analyst,
    }


def upgrade() -> None:
    with op.batch_alter_table("investigations") as batch:
        batch.add_column(sa.Column("inconclusive_reason", sa.String(length=32), nullable=True))
    bind = op.get_bind()
    measured = sa.exists().where(
        findings.c.investigation_id == investigations.c.id,
        findings.c.kind != "trace",
        findings.c.status.in_(("breached", "ok")),
    )
    judged = sa.exists().where(findings.c.investigation_id == investigations.c.id)
    blind = bind.execute(
        sa.select(investigations.c.id, investigations.c.incident_id, investigations.c.error).where(
            investigations.c.status == "done", judged, ~measured
        )
    ).all()
    for row in blind:
        bind.execute(
            investigations.update()
            .where(investigations.c.id == row.id)
            .values(status="inconclusive", inconclusive_reason=_reason(row.error), analyst=None)
        )
        bind.execute(hypotheses.delete().where(hypotheses.c.investigation_id == row.id))
    for incident_id in sorted({row.incident_id for row in blind}):
        bind.execute(
            digests.update().where(digests.c.incident_id == incident_id).values(**_evidence(bind, incident_id))
        )


def downgrade() -> None:
    op.execute(investigations.update().where(investigations.c.status == "inconclusive").values(status="done"))
    with op.batch_alter_table("investigations") as batch:
        batch.drop_column("inconclusive_reason")
