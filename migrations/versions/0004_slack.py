"""slack deliveries and their attempts

Revision ID: 0004
Revises: 0001
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slack_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("channel", sa.String(length=255), nullable=True),
        sa.Column("ts", sa.String(length=32), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=True),
        sa.Column("thread_fingerprint", sa.String(length=64), nullable=True),
        sa.Column("messages", sa.Integer(), nullable=False),
        sa.Column("updates", sa.Integer(), nullable=False),
        sa.Column("resolved_notified_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        # One Slack message per incident: the row a delivery locks so that it never posts twice.
        sa.UniqueConstraint("incident_id", name="uq_slack_deliveries_incident"),
    )
    op.create_table(
        "slack_attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("delivery_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event", sa.String(length=16), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("retry_after", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["delivery_id"], ["slack_deliveries.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_slack_attempts_delivery_id"), "slack_attempts", ["delivery_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_slack_attempts_delivery_id"), table_name="slack_attempts")
    op.drop_table("slack_attempts")
    op.drop_table("slack_deliveries")
