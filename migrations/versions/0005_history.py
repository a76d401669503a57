"""incident history: search digests, feedback, API tokens

Revision ID: 0005
Revises: 0001
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

JSON_T = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

# Full-text and containment indexes that only one backend has (see rca/store/fts.py, which
# excludes them from the model comparison). Postgres: a stored tsvector and GIN indexes.
POSTGRES_UP = (
    "ALTER TABLE incident_digests ADD COLUMN search_vector tsvector"
    " GENERATED ALWAYS AS (to_tsvector('english', document)) STORED",
    "CREATE INDEX ix_incident_digests_search ON incident_digests USING gin (search_vector)",
    "CREATE INDEX ix_incident_digests_labels ON incident_digests USING gin (labels jsonb_path_ops)",
    "CREATE INDEX ix_incident_digests_breached ON incident_digests USING gin (breached jsonb_path_ops)",
)
POSTGRES_DOWN = (
    "DROP INDEX ix_incident_digests_breached",
    "DROP INDEX ix_incident_digests_labels",
    "DROP INDEX ix_incident_digests_search",
    "ALTER TABLE incident_digests DROP COLUMN search_vector",
)
# SQLite: an FTS5 table whose rowid is the incident id, written by the application.
SQLITE_UP = ("CREATE VIRTUAL TABLE incident_fts USING fts5(document, tokenize='porter unicode61')",)
SQLITE_DOWN = ("DROP TABLE incident_fts",)


def _run(statements: dict[str, tuple[str, ...]]) -> None:
    for statement in statements.get(op.get_bind().dialect.name, ()):
        op.execute(statement)


def upgrade() -> None:
    op.create_table(
        "incident_digests",
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sa.Column("labels", JSON_T, nullable=False),
        sa.Column("breached", JSON_T, nullable=False),
        sa.Column("breached_key", sa.String(length=40), nullable=True),
        sa.Column("onset_order", JSON_T, nullable=False),
        sa.Column("stack", sa.String(length=64), nullable=True),
        sa.Column("categories", JSON_T, nullable=False),
        sa.Column("top_category", sa.String(length=64), nullable=True),
        sa.Column("top_confidence", sa.Float(), nullable=True),
        sa.Column("analyst", sa.String(length=64), nullable=True),
        sa.Column("confirmed_category", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("incident_id"),
    )
    op.create_index("ix_incident_digests_created", "incident_digests", ["created_at", "incident_id"])
    op.create_index("ix_incident_digests_status_created", "incident_digests", ["status", "created_at", "incident_id"])
    op.create_index("ix_incident_digests_top_category", "incident_digests", ["top_category", "created_at"])
    op.create_index("ix_incident_digests_breached_key", "incident_digests", ["breached_key", "created_at"])
    op.create_index("ix_incident_digests_confirmed", "incident_digests", ["confirmed_category", "created_at"])

    op.create_table(
        "feedback",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.Integer(), nullable=False),
        sa.Column("investigation_id", sa.Integer(), nullable=True),
        sa.Column("category", sa.String(length=64), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("verdicts", JSON_T, nullable=False),
        sa.Column("author", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["investigation_id"], ["investigations.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_feedback_incident_id"), "feedback", ["incident_id"], unique=False)

    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("scopes", JSON_T, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", name="uq_api_tokens_name"),
        sa.UniqueConstraint("token_hash", name="uq_api_tokens_token_hash"),
    )
    _run({"postgresql": POSTGRES_UP, "sqlite": SQLITE_UP})


def downgrade() -> None:
    _run({"postgresql": POSTGRES_DOWN, "sqlite": SQLITE_DOWN})
    op.drop_table("api_tokens")
    op.drop_index(op.f("ix_feedback_incident_id"), table_name="feedback")
    op.drop_table("feedback")
    for name in (
        "ix_incident_digests_confirmed",
        "ix_incident_digests_breached_key",
        "ix_incident_digests_top_category",
        "ix_incident_digests_status_created",
        "ix_incident_digests_created",
    ):
        op.drop_index(name, table_name="incident_digests")
    op.drop_table("incident_digests")
