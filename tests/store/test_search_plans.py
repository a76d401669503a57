"""How a search finds the newest matches on Postgres (`rca.store.incidents._newest`): walking the
newest incidents in stages, then GIN bitmaps below the walk, with the GIN scan asked only for the
selective words (`rca.store.fts.prepare`). Whatever the path, the answer must be exactly what a
plain query gives, in the same order; these tests force each path on one data set and compare."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, text

from rca.store import fts, word_frequency
from rca.store import incidents as incident_store
from rca.store.db import get_engine, session_scope
from rca.store.incidents import IncidentFilter, Position
from rca.store.models import IncidentDigestRow, IncidentRow
from tests.helpers.databases import truncate

T0 = datetime(2026, 11, 1, tzinfo=UTC)
MODELS = ["llama", "qwen", "mixtral", "phi"]
COUNT = 600


def _load(url: str) -> None:
    """COUNT incidents, one a minute: every one on some gpu-node-NNNN, a few words common, some rare,
    and a breached signal that goes with its top cause (the correlation planners misjudge)."""
    with session_scope(url) as session:
        digests = []
        for n in range(1, COUNT + 1):
            node, model = f"gpu-node-{n % 40:04d}", MODELS[n % 4]
            kv = n % 3 == 0
            words = [node, model, "preemption kv cache" if kv else "queue surge", "xid" if n % 50 == 0 else ""]
            created = T0 + timedelta(minutes=n)
            session.add(
                IncidentRow(
                    id=n,
                    group_key=f"g{n}",
                    status="firing" if n % 7 == 0 else "resolved",
                    title=f"incident {n}",
                    alertname="A",
                    receiver="r",
                    group_labels={},
                    common_labels={},
                    common_annotations={},
                    created_at=created,
                    updated_at=created,
                )
            )
            digests.append(
                IncidentDigestRow(
                    incident_id=n,
                    created_at=created,
                    status="firing" if n % 7 == 0 else "resolved",
                    document=" ".join(words),
                    labels=[f"instance={node}:8000", f"model_name={model}"],
                    breached=["kv_cache_usage"] if kv else ["request_rate"],
                    onset_order=[],
                    categories=[],
                    top_category="kv_memory_pressure" if kv else "arrival_surge",
                )
            )
        session.flush()  # the incidents first: no relationship tells the flush that digests need them
        session.add_all(digests)
    with get_engine(url).connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE incident_digests"))


@pytest.fixture(scope="module")
def loaded(pg_url: str) -> Iterator[str]:
    truncate(pg_url)
    _load(pg_url)
    yield pg_url
    truncate(pg_url)


@pytest.fixture(autouse=True)
def fresh_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(word_frequency, "_statistics", {})


def _reference(url: str, filters: IncidentFilter, n: int, before: Position | None = None) -> list[int]:
    """The plain query: every condition in one WHERE, newest first."""
    with session_scope(url) as session:
        ordered, checked = incident_store._conditions(session, filters)
        if filters.q:
            checked.append(fts.prepare(session, filters.q).condition)
        d = IncidentDigestRow
        if before is not None:
            ordered.append(d.created_at < before.created_at)
        return list(
            session.scalars(
                select(d.incident_id)
                .where(*ordered, *checked)
                .order_by(d.created_at.desc(), d.incident_id.desc())
                .limit(n)
            )
        )


SEARCHES = {
    "common word": IncidentFilter(q="preemption"),
    "rare word": IncidentFilter(q="xid"),
    "a node: common and rare words": IncidentFilter(q="gpu-node-0007"),
    "words and filters": IncidentFilter(q="cache llama", status="resolved", labels=(("model_name", "llama"),)),
    "signal and the cause it implies": IncidentFilter(signals=("kv_cache_usage",), category="kv_memory_pressure"),
    "signal and a cause it excludes": IncidentFilter(signals=("kv_cache_usage",), category="arrival_surge"),
    "nothing matches": IncidentFilter(q="nonexistentword"),
    "only stop words": IncidentFilter(q="the and"),
}


@pytest.mark.parametrize("strategy", ["staged", "walk only", "bitmap only"])
@pytest.mark.parametrize("name", list(SEARCHES))
def test_every_path_gives_the_plain_query_answer(
    loaded: str, monkeypatch: pytest.MonkeyPatch, strategy: str, name: str
) -> None:
    monkeypatch.setattr(incident_store, "FIRST_STAGE", 7)  # several stages even on this small set
    if strategy != "staged":
        monkeypatch.setattr(incident_store, "_walk_pays", lambda *_: strategy == "walk only")
    filters = SEARCHES[name]
    for n in (1, 10, 60):
        with session_scope(loaded) as session:
            got = [incident_id for incident_id, _ in incident_store._newest(session, filters, n)]
        assert got == _reference(loaded, filters, n), (name, strategy, n)
    before = Position(created_at=T0 + timedelta(minutes=COUNT // 2), incident_id=COUNT // 2)
    with session_scope(loaded) as session:
        got = [incident_id for incident_id, _ in incident_store._newest(session, filters, 25, before=before)]
    assert got == _reference(loaded, filters, 25, before)


def test_a_bitmap_phase_restores_the_planner_for_the_rest_of_the_request(
    loaded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(incident_store, "_walk_pays", lambda *_: False)
    with session_scope(loaded) as session:
        incident_store._newest(session, IncidentFilter(q="xid"), 5)
        settings = session.execute(
            text("SELECT current_setting('enable_indexscan'), current_setting('enable_seqscan')")
        ).one()
    assert tuple(settings) == ("on", "on")


def test_scores_are_the_same_on_every_path(loaded: str, monkeypatch: pytest.MonkeyPatch) -> None:
    filters = IncidentFilter(q="cache preemption")
    answers = []
    for walk in (True, False):
        monkeypatch.setattr(incident_store, "_walk_pays", lambda *_, walk=walk: walk)
        with session_scope(loaded) as session:
            answers.append(incident_store._newest(session, filters, 40, scored=True))
    assert answers[0] == answers[1]
    assert all(score is not None and score > 0 for _, score in answers[0])


def test_word_frequencies_come_from_analyze_and_bound_the_matches(loaded: str) -> None:
    with session_scope(loaded) as session:
        stats = word_frequency.statistics(session)
        known = stats.words
        assert known is not None and stats.rows == COUNT
        assert known.of("gpu") == pytest.approx(1.0) and known.of("node") == pytest.approx(1.0)
        assert known.of("cach") == pytest.approx(1 / 3, abs=0.02)  # "cache", stemmed as Postgres indexes it
        assert known.of("0007") == pytest.approx(1 / 40, abs=0.01)  # a node's number is rare
        assert known.of("neverseen") == known.floor  # a word not listed is rarer than any listed
        node = fts.prepare(session, "gpu-node-0007")
        common = fts.prepare(session, "preemption")
    assert node.density < 0.1 and common.density == pytest.approx(1 / 3, abs=0.02)
    # The node search scans the index for its number only and checks "gpu" and "node" on the rows.
    assert "ts_match_vq" in str(node.indexed) and "ts_match_vq" not in str(common.indexed)


def test_without_statistics_search_still_answers(loaded: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the first ANALYZE (a new database) there are no word frequencies: no bound, no
    selective scan, the same answers."""
    monkeypatch.setattr(word_frequency, "statistics", lambda _session: word_frequency.Statistics(rows=0, words=None))
    with session_scope(loaded) as session:
        prepared = fts.prepare(session, "gpu-node-0007")
        got = [i for i, _ in incident_store._newest(session, IncidentFilter(q="gpu-node-0007"), 10)]
    assert prepared.density == 1.0 and "ts_match_vq" not in str(prepared.indexed)
    assert got == _reference(loaded, IncidentFilter(q="gpu-node-0007"), 10)
