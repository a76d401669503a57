"""search vector statistics: ten times the default sample and lexeme list

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03

Search bounds how many digests a query can match by its rarest word's frequency, read from
ANALYZE's most common lexemes (rca/store/word_frequency.py). With the default statistics target
the list ends at words in about 0.7 % of the digests, too coarse to tell a host name (0.03 % at a
million incidents) from a common word; 1,000 keeps up to 10,000 lexemes. Postgres only.
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

STATISTICS_TARGET = 1000


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE incident_digests ALTER COLUMN search_vector SET STATISTICS {STATISTICS_TARGET}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE incident_digests ALTER COLUMN search_vector SET STATISTICS -1")
