"""The corpus-driven fuzzer (tests/fuzz/) against the real app on the real PostgreSQL, with a fixed
seed: malformed JSON, NaN and 1e999, nesting, every documented limit at and over, encodings,
duplicate keys, extreme times, wrong types, bad search parameters and cursors, feedback bodies,
and HTTP framing (chunked, Content-Length mismatches) through a real uvicorn on a raw socket.

No answer may be a 5xx; every refusal has the documented shape and a documented status and stores
nothing; every accepted notification and feedback is stored. `bench/fuzz_intake.py` runs the same
engine for thousands of requests against `rca serve`."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from rca.api.app import create_app
from rca.store.db import get_engine
from tests.fuzz import corpus
from tests.fuzz.engine import (
    INTAKE_TABLES,
    Case,
    Context,
    Reply,
    documented_statuses,
    generate,
    make_context,
    run,
    send_asgi,
    send_raw,
)
from tests.helpers.service import API_TOKEN, WEBHOOK_AUTH, WEBHOOK_TOKEN, LiveServer, RecordingDispatcher, make_settings

SEED = int(os.environ.get("FUZZ_SEED", "20261206"))  # CI's; set FUZZ_SEED to explore others
REQUESTS = 1000
TABLES = (*INTAKE_TABLES, "investigations")  # the recorder runs nothing: only intake writes these


def fuzz_context(incident_ids: list[int]) -> Context:
    return make_context(WEBHOOK_TOKEN, API_TOKEN, incident_ids)


def test_the_same_seed_generates_the_same_requests() -> None:
    def fingerprint(cases: list[Case]) -> list[tuple[str, str, bytes, bytes | None]]:
        return [(c.kind, c.target, c.body, c.framing.wire if c.framing else None) for c in cases]

    first, again = generate(7, 300, fuzz_context([1, 2, 3])), generate(7, 300, fuzz_context([1, 2, 3]))
    assert fingerprint(first) == fingerprint(again)
    assert fingerprint(first) != fingerprint(generate(8, 300, fuzz_context([1, 2, 3])))


def test_fuzzing_the_webhook_and_the_api_finds_no_5xx_and_nothing_stored_from_a_refusal(
    pg_db: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(pg_db, tmp_path, request_body_timeout_seconds=1.0)
    app = create_app(settings, dispatcher=RecordingDispatcher())
    engine = get_engine(pg_db)
    counts = text("SELECT " + ", ".join(f"(SELECT count(*) FROM {t}) AS {t}" for t in TABLES))

    def count_rows() -> dict[str, int]:
        with engine.connect() as conn:
            return dict(conn.execute(counts).mappings().one())

    server = LiveServer(app)
    uvicorn_errors = logging.getLogger("uvicorn.error")  # after uvicorn's Config has set up its logging
    uvicorn_errors.addHandler(caplog.handler)
    with TestClient(app, raise_server_exceptions=False) as client, server:
        seeded = [client.post(corpus.WEBHOOK_PATH, json=seed, headers=WEBHOOK_AUTH) for seed in corpus.webhook_seeds()]
        assert [r.status_code for r in seeded] == [200] * len(seeded), [r.text for r in seeded]
        ctx = fuzz_context(sorted({r.json()["incident_id"] for r in seeded}))
        cases = generate(SEED, REQUESTS, ctx)

        def send(case: Case) -> Reply:
            return send_raw("127.0.0.1", server.port, case, timeout=10) if case.framing else send_asgi(client, case)

        tally = run(cases, send, count_rows, documented_statuses(client.get("/openapi.json").json()))

    uvicorn_errors.removeHandler(caplog.handler)
    print(tally.summary())
    report = "\n".join(
        f"#{f.case.index} {f.case.method} {f.case.target[:120]} [{f.case.kind}] body={f.case.body[:160]!r}: "
        + "; ".join(f.problems)
        for f in tally.failures[:25]
    )
    assert not tally.failures, f"{len(tally.failures)} failures:\n{report}"
    assert tally.server_errors == 0 and tally.stored_on_refusal == 0
    logged = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert not logged, logged  # no exception the app left to the server, no error of its own
    # The mix reaches both sides of every rule: accepted and refused, on every operation.
    assert tally.accepted > REQUESTS // 5 and tally.refused > REQUESTS // 3, tally.summary()
    assert {c.op for c in cases} == {"webhook", "feedback_post", "search", "incident", "similar", "feedback_get",
                                     "accuracy"}  # fmt: skip
    assert sum(1 for c in cases if c.framing) > 20
    assert tally.seconds < 60, tally.summary()
