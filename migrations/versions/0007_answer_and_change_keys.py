"""investigations: the LLM answer cache's key and Slack's change key, named apart

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04

`evidence_fingerprint` was the answer cache's key (model, endpoint, target and evidence); it is
now `answer_key`. `change_key` is new: the hash of what Slack's message shows (breached findings
and the rules' top causes), computed by the pipeline while the rules ranking is at hand, so that
notify only reads. Investigations finished before this revision have none; notify falls back to
their stored findings and hypotheses (rca.notify.message.change_key_of).
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("investigations") as batch:
        batch.drop_index(op.f("ix_investigations_evidence_fingerprint"))
        batch.alter_column("evidence_fingerprint", new_column_name="answer_key", existing_type=sa.String(length=64))
        batch.add_column(sa.Column("change_key", sa.String(length=64), nullable=True))
    with op.batch_alter_table("investigations") as batch:
        batch.create_index(op.f("ix_investigations_answer_key"), ["answer_key"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("investigations") as batch:
        batch.drop_index(op.f("ix_investigations_answer_key"))
        batch.drop_column("change_key")
        batch.alter_column("answer_key", new_column_name="evidence_fingerprint", existing_type=sa.String(length=64))
    with op.batch_alter_table("investigations") as batch:
        batch.create_index(op.f("ix_investigations_evidence_fingerprint"), ["evidence_fingerprint"], unique=False)
