"""incidents.group_key unique among backtest incidents: an episode is stored once, even by two runs at once

Revision ID: 0014
Revises: 0013
Create Date: 2027-01-18

`rca backtest --store` skips the episodes it finds stored, but two runs over the same history at
the same moment each found none and stored them all twice. With this index the later run's
transaction fails on the first episode the other stored, and the command stores again, skipping
them (rca.scan.stored.store_all). A database that already holds duplicates keeps its earliest
incident of each episode and drops the others (resolved, never posted: no one was told of them).
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

WHERE = "origin = 'backtest'"


def upgrade() -> None:
    bind = op.get_bind()
    duplicates = sa.text(
        "SELECT id FROM incidents i WHERE origin = 'backtest' AND EXISTS "
        "(SELECT 1 FROM incidents e WHERE e.origin = 'backtest' AND e.group_key = i.group_key AND e.id < i.id)"
    )
    ids = [row[0] for row in bind.execute(duplicates)]
    if ids:
        # Every row that names a duplicate (its alert, transitions, digest), then the duplicates.
        inspector = sa.inspect(bind)
        referring = [
            (table, fk["constrained_columns"][0])
            for table in inspector.get_table_names()
            for fk in inspector.get_foreign_keys(table)
            if fk["referred_table"] == "incidents"
        ]
        for table, column in [*referring, ("incidents", "id")]:
            delete = sa.text(f"DELETE FROM {table} WHERE {column} IN :ids")
            bind.execute(delete.bindparams(sa.bindparam("ids", expanding=True)), {"ids": ids})
    op.create_index(
        "uq_incidents_backtest_group_key",
        "incidents",
        ["group_key"],
        unique=True,
        postgresql_where=sa.text(WHERE),
        sqlite_where=sa.text(WHERE),
    )


def downgrade() -> None:
    op.drop_index("uq_incidents_backtest_group_key", table_name="incidents")
