"""evidence_series: each finding's series, downsampled and kept with its investigation

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06

The incident page draws these (rca/pages), so it renders after Prometheus' retention has dropped
the data and without access to Prometheus. Size per investigation is bounded by
rca/domain/series.py: at most 32 series of at most 300 values (about 100 KB of JSON).
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

JSON_T = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "evidence_series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("investigation_id", sa.Integer(), nullable=False),
        sa.Column("finding_key", sa.String(length=64), nullable=False),
        sa.Column("labels", JSON_T, nullable=False),
        sa.Column("start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("step_seconds", sa.Integer(), nullable=False),
        sa.Column("values", JSON_T, nullable=False),
        sa.Column("baseline_end", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["investigation_id"], ["investigations.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("investigation_id", "finding_key", name="uq_evidence_series_finding"),
    )
    op.create_index("ix_evidence_series_investigation_id", "evidence_series", ["investigation_id"])


def downgrade() -> None:
    op.drop_index("ix_evidence_series_investigation_id", table_name="evidence_series")
    op.drop_table("evidence_series")
