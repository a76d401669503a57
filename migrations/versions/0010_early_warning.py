"""early warning: incidents.origin, the fleet scan's target states and their transitions

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06

The fleet scan (rca/scan) opens incidents of its own (`origin = 'early_warning'`; every incident
before it came from Alertmanager), keeps each serving target's state (ok, watch, warning,
cleared) in `scan_targets` and every change of state, with its reason and figures, in
`scan_transitions`.
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("incidents") as batch:
        batch.add_column(sa.Column("origin", sa.String(16), nullable=False, server_default="alertmanager"))
    op.create_table(
        "scan_targets",
        sa.Column("instance", sa.String(255), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("incident_id", sa.Integer, sa.ForeignKey("incidents.id", ondelete="SET NULL"), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "scan_transitions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("instance", sa.String(255), nullable=False),
        sa.Column("before", sa.String(16), nullable=False),
        sa.Column("after", sa.String(16), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("figures", JSON, nullable=False),
        sa.Column("incident_id", sa.Integer, sa.ForeignKey("incidents.id", ondelete="SET NULL"), nullable=True),
    )
    op.create_index("ix_scan_transitions_instance", "scan_transitions", ["instance"])
    op.create_index("ix_scan_transitions_at", "scan_transitions", ["at"])
    op.create_index("ix_scan_transitions_incident_id", "scan_transitions", ["incident_id"])


def downgrade() -> None:
    op.drop_table("scan_transitions")
    op.drop_table("scan_targets")
    with op.batch_alter_table("incidents") as batch:
        batch.drop_column("origin")
