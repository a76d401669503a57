"""investigations: who asked for one (re-investigate)

Revision ID: 0017
Revises: 0016
Create Date: 2027-02-08

An investigation an engineer asked for (`POST /api/v1/incidents/{id}/investigations`, the incident
page's button, `rca investigate-again`) is queued with reason `requested` and the asking token's
name in `requested_by`; those intake or the scan queued have none.
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("investigations") as batch:
        batch.add_column(sa.Column("requested_by", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("investigations") as batch:
        batch.drop_column("requested_by")
