"""alerts.fingerprint and incidents.group_key indexed: two intake questions no longer read a whole table

Revision ID: 0013
Revises: 0012
Create Date: 2027-01-04

Every notification asks whether one of its alert fingerprints already belongs to an early-warning
incident (rca/store/early_warnings.py). The only index with the fingerprint in it led with
`incident_id`, so that question was a sequential scan of `alerts`: 12.8 ms per webhook at 100,000
alerts, growing with the table (and the intake rate shrinking with it). With this index it is one
probe (0.02 ms at any size). Likewise a resolve notice for a group with no open incident looks
for the group's latest incident, and the only index on `group_key` held open incidents alone: a
sequential scan of `incidents` (8 ms at 100,000).
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(op.f("ix_alerts_fingerprint"), "alerts", ["fingerprint"], unique=False)
    op.create_index(op.f("ix_incidents_group_key"), "incidents", ["group_key"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_incidents_group_key"), table_name="incidents")
    op.drop_index(op.f("ix_alerts_fingerprint"), table_name="alerts")
