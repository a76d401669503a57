"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# JSONB on Postgres (indexable), JSON text on SQLite.
JSON_T = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "incidents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("group_key", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("alertname", sa.String(length=255), nullable=True),
        sa.Column("receiver", sa.String(length=255), nullable=False),
        sa.Column("group_labels", JSON_T, nullable=False),
        sa.Column("common_labels", JSON_T, nullable=False),
        sa.Column("common_annotations", JSON_T, nullable=False),
        sa.Column("external_url", sa.Text(), nullable=True),
        sa.Column("notification_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_incidents_alertname"), "incidents", ["alertname"], unique=False)
    op.create_index(op.f("ix_incidents_created_at"), "incidents", ["created_at"], unique=False)
    op.create_index(
        "uq_incidents_open_group_key",
        "incidents",
        ["group_key"],
        unique=True,
        postgresql_where=sa.text("status = 'firing'"),
        sqlite_where=sa.text("status = 'firing'"),
    )

    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("alertname", sa.String(length=255), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("labels", JSON_T, nullable=False),
        sa.Column("annotations", JSON_T, nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("generator_url", sa.Text(), nullable=True),
        sa.Column("raw", JSON_T, nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("incident_id", "fingerprint", name="uq_alerts_incident_fingerprint"),
    )
    op.create_index(op.f("ix_alerts_incident_id"), "alerts", ["incident_id"], unique=False)

    op.create_table(
        "investigations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("collect_seconds", sa.Float(), nullable=True),
        sa.Column("total_seconds", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("analyst", sa.String(length=64), nullable=True),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=True),
        sa.Column("window_end", sa.DateTime(timezone=True), nullable=True),
        sa.Column("step_seconds", sa.Integer(), nullable=True),
        sa.Column("target", JSON_T, nullable=True),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_investigations_incident_id"), "investigations", ["incident_id"], unique=False)
    op.create_index(op.f("ix_investigations_status"), "investigations", ["status"], unique=False)

    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("payload", JSON_T, nullable=False),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_notifications_incident_id"), "notifications", ["incident_id"], unique=False)

    op.create_table(
        "findings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("investigation_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("breached", sa.Boolean(), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("baseline", sa.Float(), nullable=True),
        sa.Column("threshold", sa.Float(), nullable=True),
        sa.Column("comparison", sa.String(length=2), nullable=False),
        sa.Column("unit", sa.String(length=16), nullable=False),
        sa.Column("onset", sa.DateTime(timezone=True), nullable=True),
        sa.Column("query", sa.Text(), nullable=True),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("series_labels", JSON_T, nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["investigation_id"], ["investigations.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("investigation_id", "key", name="uq_findings_investigation_key"),
    )
    op.create_index(op.f("ix_findings_investigation_id"), "findings", ["investigation_id"], unique=False)

    op.create_table(
        "hypotheses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("investigation_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("category", sa.String(length=64), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("evidence", JSON_T, nullable=False),
        sa.Column("contradicting", JSON_T, nullable=False),
        sa.Column("next_steps", JSON_T, nullable=False),
        sa.Column("explanation", sa.Text(), nullable=False),
        sa.Column("analyst", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["investigation_id"], ["investigations.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("investigation_id", "rank", name="uq_hypotheses_investigation_rank"),
    )
    op.create_index(op.f("ix_hypotheses_category"), "hypotheses", ["category"], unique=False)
    op.create_index(op.f("ix_hypotheses_investigation_id"), "hypotheses", ["investigation_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_hypotheses_investigation_id"), table_name="hypotheses")
    op.drop_index(op.f("ix_hypotheses_category"), table_name="hypotheses")

    op.drop_table("hypotheses")
    op.drop_index(op.f("ix_findings_investigation_id"), table_name="findings")

    op.drop_table("findings")
    op.drop_index(op.f("ix_notifications_incident_id"), table_name="notifications")

    op.drop_table("notifications")
    op.drop_index(op.f("ix_investigations_status"), table_name="investigations")
    op.drop_index(op.f("ix_investigations_incident_id"), table_name="investigations")

    op.drop_table("investigations")
    op.drop_index(op.f("ix_alerts_incident_id"), table_name="alerts")

    op.drop_table("alerts")
    op.drop_index(
        "uq_incidents_open_group_key",
        table_name="incidents",
        postgresql_where=sa.text("status = 'firing'"),
        sqlite_where=sa.text("status = 'firing'"),
    )
    op.drop_index(op.f("ix_incidents_created_at"), table_name="incidents")
    op.drop_index(op.f("ix_incidents_alertname"), table_name="incidents")

    op.drop_table("incidents")
