"""investigations: one per host of a fleet incident, queued together as a round

Revision ID: 0018
Revises: 0017
Create Date: 2027-02-15

An incident whose alerts name several hosts is investigated host by host (`host`), the
investigations queued together sharing `round_id` (the id of the round's first); `round_skipped`
counts the hosts beyond RCA_FLEET_MAX_HOSTS left out. Existing rows keep NULLs: the incident as
one target, as before.
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("investigations") as batch:
        batch.add_column(sa.Column("host", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("round_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("round_skipped", sa.Integer(), nullable=True))
        batch.create_index("ix_investigations_round_id", ["round_id"])


def downgrade() -> None:
    with op.batch_alter_table("investigations") as batch:
        batch.drop_index("ix_investigations_round_id")
        batch.drop_column("round_skipped")
        batch.drop_column("round_id")
        batch.drop_column("host")
