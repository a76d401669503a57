"""incidents: the Slack notices owed, for the sweeper to deliver what a lost enqueue dropped

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05

`slack_owed` counts the transactions that gave Slack something new to say about the incident (an
investigation finished, the incident resolved); `slack_owed_since` is set while Slack is behind
that count and cleared by the delivery that brings it up to date (rca/store/notices.py). The
marker is on the incident, not on `slack_deliveries`, because a delivery keeps its row locked
during its Slack calls: the investigation's commit and the webhook must not wait for those.
Incidents stored before this revision owe nothing.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("incidents") as batch:
        batch.add_column(sa.Column("slack_owed", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(sa.Column("slack_owed_since", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("incidents") as batch:
        batch.create_index(op.f("ix_incidents_slack_owed_since"), ["slack_owed_since"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("incidents") as batch:
        batch.drop_index(op.f("ix_incidents_slack_owed_since"))
        batch.drop_column("slack_owed_since")
        batch.drop_column("slack_owed")
