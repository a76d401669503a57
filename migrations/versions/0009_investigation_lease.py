"""investigations: the lease of a running investigation's claim, for a prompt takeover after a crash

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06

A worker that claims an investigation sets `lease_until` and renews it while the investigation
runs (rca/jobs/runner.py); the sweep hands a `running` investigation whose lease has lapsed to
another worker (rca/store/investigations.py `stranded`). Investigations claimed before this
revision have no lease and are judged by `started_at`, as before.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("investigations") as batch:
        batch.add_column(sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("investigations") as batch:
        batch.drop_column("lease_until")
