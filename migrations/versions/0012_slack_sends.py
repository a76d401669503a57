"""slack_sends: each Slack message the service is about to post, keyed, recorded before the call

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07

A bot-token delivery commits a row here (a uuid `key`, the time) before it calls
chat.postMessage, and sends the key in the message's metadata. If Slack accepted the message but
recording it failed (the database went away, the worker died), the row stays without an
`outcome`, and the next delivery looks for the key in the channel (conversations.history, or
conversations.replies for a thread reply) and adopts that message instead of posting it again
(rca/notify/once.py). `channel` is where it was asked to go (a name or an ID), `channel_id` and
`ts` what Slack answered or what the search found.
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slack_sends",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=36), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("channel", sa.String(length=255), nullable=False),
        sa.Column("thread_ts", sa.String(length=32), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("channel_id", sa.String(length=255), nullable=True),
        sa.Column("ts", sa.String(length=32), nullable=True),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key", name="uq_slack_sends_key"),
    )
    op.create_index(op.f("ix_slack_sends_incident_id"), "slack_sends", ["incident_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_slack_sends_incident_id"), table_name="slack_sends")
    op.drop_table("slack_sends")
