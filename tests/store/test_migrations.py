"""Alembic migrations: up, down and up again on a fresh PostgreSQL database and on SQLite, the
migrated schema matches the models (what `alembic check` verifies), and `rca migrate` works."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, MetaData, create_engine, insert, inspect, pool, select
from sqlalchemy.exc import IntegrityError

from rca.domain.coverage import NO_PROMETHEUS
from rca.store.db import alembic_config, migrate
from rca.store.fts import include_name
from rca.store.models import Base, IncidentRow
from tests.helpers.databases import create_database, drop_database
from tests.helpers.paths import VENV_BIN
from tests.helpers.processes import subprocess_env

APP_TABLES = {
    "incidents",
    "alerts",
    "notifications",
    "investigations",
    "findings",
    "evidence_series",
    "hypotheses",
    "slack_deliveries",
    "slack_attempts",
    "slack_sends",
    "incident_digests",
    "feedback",
    "api_tokens",
    "scan_targets",
    "scan_transitions",
}


@pytest.fixture(params=["postgresql", "sqlite"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database that nothing has migrated yet."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    url = create_database()
    try:
        yield url
    finally:
        drop_database(url)


def inspect_db(url: str) -> tuple[set[str], str | None]:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            tables = {name for name in inspect(conn).get_table_names() if include_name(name, "table", {})}
            return tables, MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def schema_diff(url: str) -> list[object]:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "compare_server_default": True, "include_name": include_name}
            )
            return compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()


def head() -> str:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def test_upgrade_downgrade_and_upgrade_again(fresh_url: str) -> None:
    assert inspect_db(fresh_url) == (set(), None)

    migrate(fresh_url)
    tables, revision = inspect_db(fresh_url)
    assert tables == APP_TABLES | {"alembic_version"} and revision == head()

    command.downgrade(alembic_config(fresh_url), "base")
    assert inspect_db(fresh_url) == ({"alembic_version"}, None)

    migrate(fresh_url)
    assert inspect_db(fresh_url) == (APP_TABLES | {"alembic_version"}, head())
    assert schema_diff(fresh_url) == []


def test_migrating_twice_is_a_no_op(fresh_url: str) -> None:
    migrate(fresh_url)
    migrate(fresh_url)
    assert inspect_db(fresh_url) == (APP_TABLES | {"alembic_version"}, head())


def test_migrated_schema_matches_the_models(fresh_url: str) -> None:
    migrate(fresh_url)
    assert schema_diff(fresh_url) == []


def test_unmigrated_schema_differs_from_the_models(fresh_url: str) -> None:
    """The comparison above can fail: on an empty database it reports every table missing."""
    diff = schema_diff(fresh_url)
    added = {entry[1].name for entry in diff if isinstance(entry, tuple) and entry[0] == "add_table"}
    assert added == APP_TABLES


def test_migrated_schema_allows_one_open_incident_per_group(fresh_url: str) -> None:
    migrate(fresh_url)
    now = datetime.now(UTC)
    row = {
        "group_key": "g",
        "title": "t",
        "receiver": "r",
        "group_labels": {},
        "common_labels": {},
        "common_annotations": {},
        "notification_count": 1,
        "created_at": now,
        "updated_at": now,
    }
    engine = create_engine(fresh_url, poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(insert(IncidentRow).values(**row, status="resolved", resolved_at=now))
            conn.execute(insert(IncidentRow).values(**row, status="resolved", resolved_at=now))
            conn.execute(insert(IncidentRow).values(**row, status="firing"))
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(insert(IncidentRow).values(**row, status="firing"))
    finally:
        engine.dispose()


def test_backtest_duplicates_stored_before_0014_keep_the_earliest(fresh_url: str) -> None:
    """Two runs at once could store an episode twice before 0014; the migration keeps the first
    incident with its alert and transition, drops the copy with its own, and from then on the
    database refuses a second copy."""
    config = alembic_config(fresh_url)
    command.upgrade(config, "0013")
    now = datetime.now(UTC)
    incident = {
        "group_key": "backtest/a:8000/2027-01-15T08:03:00Z",
        "origin": "backtest",
        "status": "resolved",
        "title": "Backtest warning: a:8000",
        "receiver": "rca-backtest",
        "group_labels": {},
        "common_labels": {},
        "common_annotations": {},
        "notification_count": 0,
        "slack_owed": 0,
        "created_at": now,
        "updated_at": now,
        "resolved_at": now,
    }
    engine = create_engine(fresh_url, poolclass=pool.NullPool)
    try:
        # The tables as revision 0013 left them (the models describe head, which may have more columns).
        tables = MetaData()
        tables.reflect(engine, only=["incidents", "alerts", "scan_transitions"])
        incidents, alerts, transitions = (tables.tables[name] for name in ("incidents", "alerts", "scan_transitions"))
        with engine.begin() as conn:
            ids = [conn.execute(insert(incidents).values(**incident)).inserted_primary_key[0] for _ in range(2)]
            other = conn.execute(
                insert(incidents).values(**incident | {"group_key": "backtest/b"})
            ).inserted_primary_key[0]
            for incident_id in [*ids, other]:
                conn.execute(
                    insert(alerts).values(
                        incident_id=incident_id,
                        fingerprint=f"fp-{incident_id}",
                        status="resolved",
                        alertname="EarlyWarning",
                        labels={},
                        annotations={},
                        starts_at=now,
                        raw={},
                        first_seen_at=now,
                        last_seen_at=now,
                    )
                )
                conn.execute(
                    insert(transitions).values(
                        instance="a:8000",
                        before="ok",
                        after="watch",
                        at=now,
                        reason="r",
                        figures={},
                        incident_id=incident_id,
                    )
                )
        command.upgrade(config, "head")
        with engine.begin() as conn:
            assert sorted(conn.scalars(select(incidents.c.id))) == sorted([ids[0], other])
            assert sorted(conn.scalars(select(alerts.c.incident_id))) == sorted([ids[0], other])
            assert sorted(conn.scalars(select(transitions.c.incident_id))) == sorted([ids[0], other])
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(insert(incidents).values(**incident))
    finally:
        engine.dispose()


def test_scan_targets_keep_their_rows_and_gain_their_slo_with_0015(fresh_url: str) -> None:
    """A target stored before 0015 keeps its state and has no SLO until the scan writes one; the
    downgrade drops the SLO and keeps the row."""
    config = alembic_config(fresh_url)
    command.upgrade(config, "0014")
    now = datetime.now(UTC)
    row = {"instance": "gpu-a:8000", "host": "gpu-a", "state": "watch", "since": now, "updated_at": now}
    engine = create_engine(fresh_url, poolclass=pool.NullPool)
    try:
        before = MetaData()
        before.reflect(engine, only=["scan_targets"])
        with engine.begin() as conn:
            conn.execute(insert(before.tables["scan_targets"]).values(**row))
        command.upgrade(config, "head")
        after = MetaData()
        after.reflect(engine, only=["scan_targets"])
        targets = after.tables["scan_targets"]
        with engine.begin() as conn:
            kept = conn.execute(select(targets)).mappings().one()
            assert (kept["state"], kept["slo_ttft_seconds"], kept["slo_source"]) == ("watch", None, None)
            rule = "rule LLMTTFTSLOBreach (group llm-serving, rules.yml)"
            conn.execute(targets.update().values(slo_ttft_seconds=0.8, slo_source=rule))
            assert conn.execute(select(targets.c.slo_ttft_seconds, targets.c.slo_source)).one() == (0.8, rule)
        command.downgrade(config, "0014")
        columns = {column["name"] for column in inspect(engine).get_columns("scan_targets")}
        assert columns == {"instance", "host", "state", "since", "incident_id", "updated_at"}
        with engine.begin() as conn:
            assert conn.execute(select(before.tables["scan_targets"].c.state)).scalar_one() == "watch"
    finally:
        engine.dispose()


def test_rca_migrate_command_brings_a_fresh_database_to_head(fresh_url: str, tmp_path: Path) -> None:
    env = subprocess_env(database_url=fresh_url, data_dir=str(tmp_path / "rca-data"))
    result = subprocess.run(
        [str(VENV_BIN / "rca"), "migrate"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "database migrated to head"
    assert inspect_db(fresh_url) == (APP_TABLES | {"alembic_version"}, head())


def test_blind_investigations_stored_as_done_before_0016_become_inconclusive_without_causes(fresh_url: str) -> None:
    """Before 0016 an investigation that measured nothing was `done` with `no_clear_cause` and a
    confidence. The migration reclassifies it by the coverage rule (no metric finding measured),
    drops its causes, and gives its incident's digest the latest diagnosis still standing, or none:
    what the list shows and the accuracy figures count. The downgrade keeps it finished."""
    config = alembic_config(fresh_url)
    command.upgrade(config, "0015")
    now = datetime.now(UTC)
    engine = create_engine(fresh_url, poolclass=pool.NullPool)
    try:
        before = MetaData()
        before.reflect(engine, only=["incidents", "investigations", "findings", "hypotheses", "incident_digests"])
        incidents, investigations, findings, hypotheses, digests = (
            before.tables[name]
            for name in ("incidents", "investigations", "findings", "hypotheses", "incident_digests")
        )

        def incident(conn: Connection, key: str) -> int:
            row = {"group_key": key, "status": "firing", "title": key, "receiver": "r", "group_labels": {}}
            row |= {"common_labels": {}, "common_annotations": {}, "notification_count": 1, "slack_owed": 0}
            incident_id = conn.execute(
                insert(incidents).values(**row, created_at=now, updated_at=now)
            ).inserted_primary_key[0]
            conn.execute(
                insert(digests).values(
                    incident_id=incident_id,
                    created_at=now,
                    status="firing",
                    document=key,
                    labels=[],
                    breached=[],
                    onset_order=[],
                    stack="vllm",
                    categories=["no_clear_cause"],
                    top_category="no_clear_cause",
                    top_confidence=0.2,
                    analyst="rules",
                )
            )
            return int(incident_id)

        def investigation(
            conn: Connection, incident_id: int, statuses: dict[str, str], error: str | None = None
        ) -> int:
            inv_id = conn.execute(
                insert(investigations).values(
                    incident_id=incident_id,
                    status="done",
                    reason="new_incident",
                    attempts=1,
                    queued_at=now,
                    error=error,
                    analyst="rules",
                    target={"stack": "vllm"},
                )
            ).inserted_primary_key[0]
            for n, (key, status) in enumerate(statuses.items()):
                conn.execute(
                    insert(findings).values(
                        investigation_id=inv_id,
                        key=key,
                        kind="trace" if key.startswith("trace") else "signal",
                        title=key,
                        status=status,
                        breached=status == "breached",
                        comparison=">",
                        unit="ratio",
                        onset=now if status == "breached" else None,
                        detail="",
                    )
                )
                conn.execute(
                    insert(hypotheses).values(
                        investigation_id=inv_id,
                        rank=n + 1,
                        category="kv_memory_pressure" if n == 0 and status == "breached" else f"cause_{n}",
                        title="t",
                        confidence=0.5 - n * 0.1,
                        evidence=[],
                        contradicting=[],
                        next_steps=[],
                        explanation="",
                        analyst="rules",
                    )
                )
            return int(inv_id)

        with engine.begin() as conn:
            unconfigured = incident(conn, "unconfigured")
            blind = investigation(conn, unconfigured, {"queue_median": "unavailable", "trace_x": "ok"}, NO_PROMETHEUS)
            down = incident(conn, "down")
            diagnosed = investigation(conn, down, {"kv_cache_usage": "breached", "queue_median": "ok"})
            blind_after = investigation(conn, down, {"queue_median": "unavailable"}, "Prometheus at x is unavailable")
            healthy = incident(conn, "healthy")
            measured = investigation(conn, healthy, {"queue_median": "ok", "sm_clock": "not_measurable"})
            empty = investigation(conn, incident(conn, "no series"), {"queue_median": "not_measurable"})
        command.upgrade(config, "head")
        after = MetaData()
        after.reflect(engine, only=["investigations", "hypotheses", "incident_digests"])
        runs, causes, digest = (after.tables[name] for name in ("investigations", "hypotheses", "incident_digests"))
        with engine.begin() as conn:
            outcome = {row.id: (row.status, row.inconclusive_reason, row.analyst) for row in conn.execute(select(runs))}
            ranked = {row.investigation_id for row in conn.execute(select(causes))}
            shown = {row.incident_id: row for row in conn.execute(select(digest))}
        assert outcome == {
            blind: ("inconclusive", "no_prometheus", None),  # a trace alone judges nothing
            diagnosed: ("done", None, "rules"),
            blind_after: ("inconclusive", "prometheus_unreachable", None),
            measured: ("done", None, "rules"),
            empty: ("inconclusive", "no_data", None),
        }
        assert ranked == {diagnosed, measured}
        assert (shown[unconfigured].categories, shown[unconfigured].top_category, shown[unconfigured].analyst) == (
            [],
            None,
            None,
        )
        assert shown[down].categories == ["kv_memory_pressure", "cause_1"] and shown[down].analyst == "rules"
        assert (shown[down].breached, shown[down].onset_order) == (["kv_cache_usage"], ["kv_cache_usage"])
        assert shown[down].top_confidence == pytest.approx(0.5) and shown[down].breached_key is not None
        assert shown[healthy].top_category == "no_clear_cause"  # untouched: it measured something
        command.downgrade(config, "0015")
        assert "inconclusive_reason" not in {column["name"] for column in inspect(engine).get_columns("investigations")}
        with engine.begin() as conn:
            assert set(conn.scalars(select(investigations.c.status))) == {"done"}
    finally:
        engine.dispose()
