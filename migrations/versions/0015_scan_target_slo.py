"""scan_targets: the TTFT SLO each target is judged against, and where it came from

Revision ID: 0015
Revises: 0014
Create Date: 2027-01-25

The fleet scan reads the operator's SLO from their Prometheus alerting rules (rca/scan/slo_rules.py):
each target may have its own, from a rule, the config file or the default. The row keeps the one
it was last judged against and its source ("rule <alert> (group <group>, <file>)", "config file",
"default"), for `GET /api/v1/scan/targets`; rows stored before have none until the scan's next
pass writes it.
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scan_targets") as batch:
        batch.add_column(sa.Column("slo_ttft_seconds", sa.Float, nullable=True))
        batch.add_column(sa.Column("slo_source", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scan_targets") as batch:
        batch.drop_column("slo_source")
        batch.drop_column("slo_ttft_seconds")
