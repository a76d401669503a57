"""investigations: a fleet round's common factor, judged once on the round's first

Revision ID: 0019
Revises: 0018
Create Date: 2027-02-16

What the affected hosts of a fleet incident share that their healthy peers lack (an image, a node
pool, a rollout), with its counts (rca.domain.factor), kept on the round's first investigation.
Existing rows keep NULL: no factor was judged for them.
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("investigations") as batch:
        batch.add_column(
            sa.Column("common_factor", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("investigations") as batch:
        batch.drop_column("common_factor")
