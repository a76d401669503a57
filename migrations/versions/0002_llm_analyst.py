"""LLM analyst accounting on investigations

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

JSON_T = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _columns() -> list[sa.Column]:
    return [
        sa.Column("llm_model", sa.String(length=255), nullable=True),
        sa.Column("llm_output_mode", sa.String(length=16), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("prompt_tokens_estimate", sa.Integer(), nullable=True),
        sa.Column("llm_latency_seconds", sa.Float(), nullable=True),
        sa.Column("estimated_cost", sa.Float(), nullable=True),
        sa.Column("fallback_reason", sa.Text(), nullable=True),
        sa.Column("disagreement", JSON_T, nullable=True),
        sa.Column("evidence_fingerprint", sa.String(length=64), nullable=True),
        sa.Column("cached_from", sa.Integer(), nullable=True),
        sa.Column("prompt_trimmed", JSON_T, nullable=True),
        sa.Column("llm_dropped", JSON_T, nullable=True),
        sa.Column("llm_exchange", JSON_T, nullable=True),
    ]


def upgrade() -> None:
    # Batch mode, because SQLite can only drop columns by copying the table (env.py batches on SQLite).
    with op.batch_alter_table("investigations") as batch:
        for column in _columns():
            batch.add_column(column)
        batch.create_index(op.f("ix_investigations_evidence_fingerprint"), ["evidence_fingerprint"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("investigations") as batch:
        batch.drop_index(op.f("ix_investigations_evidence_fingerprint"))
        for column in reversed(_columns()):
            batch.drop_column(column.name)
