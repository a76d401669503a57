"""Each finding's series is kept with its investigation, downsampled within the documented bound
(rca/domain/series.py), so that the incident page draws it without Prometheus."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from fastapi.testclient import TestClient

from rca.api.app import create_app
from rca.domain.series import MAX_POINTS, MAX_SERIES, downsample
from rca.store import evidence
from rca.store.db import session_scope
from tests.helpers.demo_incident import demo_payload, replayed_window
from tests.helpers.payloads import post_webhook
from tests.helpers.service import make_settings, wait_for_investigation


def test_downsampling_keeps_a_one_sample_breach_and_the_gaps_within_the_point_bound() -> None:
    start, step = 1_000_000.0, 15
    samples = [(start + i * step, 1.0) for i in range(11_000) if not 5000 <= i < 5400]
    samples[7000] = (samples[7000][0], 9.0)  # one scrape over the threshold
    width, values = downsample(samples, start, start + 10_999 * step, step, ">")
    assert len(values) <= MAX_POINTS and width % step == 0
    assert max(v for v in values if v is not None) == 9.0, "the short breach was averaged away"
    assert None in values, "a gap in the data became a value"
    _, low = downsample([(start, 5.0), (start + step, 0.5)], start, start + 3000 * step, step, "<")
    assert low[0] == 0.5, "a '<' breach keeps the bucket's smallest sample"


def test_an_investigation_keeps_a_bounded_series_for_each_finding_breached_first(pg_db: str, tmp_path: Path) -> None:
    with replayed_window() as (prometheus_url, alert_start):
        settings = make_settings(pg_db, tmp_path, prometheus_url=prometheus_url)
        with TestClient(create_app(settings)) as client:
            reply = post_webhook(client, demo_payload(alert_start, "evidence"))
            incident = wait_for_investigation(client, reply.json()["incident_id"], timeout=60)
    inv = incident["investigation"]
    assert inv["status"] == "done", inv["error"]
    with session_scope(pg_db) as session:
        kept = evidence.load(session, inv["id"])
    breached = [f for f in inv["findings"] if f["breached"]]
    assert breached, "the demo incident has breached findings"
    assert {f["id"] for f in breached} <= set(kept), "a breached finding has no series to draw"
    assert len(kept) <= MAX_SERIES
    assert len(json.dumps([s.values for s in kept.values()])) < 100_000
    window_start = datetime.fromisoformat(inv["window_start"])
    for finding in breached:
        series = kept[finding["id"]]
        assert 2 <= len(series.values) <= MAX_POINTS
        assert series.start == window_start and series.step_seconds >= inv["step_seconds"]
        assert series.labels == (finding["series_labels"] or {})
        assert series.baseline_end is not None and series.baseline_end < datetime.fromtimestamp(alert_start, UTC)
        recent = [v for v in series.values[-5:] if v is not None]
        sign = 1 if finding["comparison"] == ">" else -1
        assert recent and any((v - finding["threshold"]) * sign > 0 for v in recent), (
            f"{finding['id']}: the kept series does not show the breach"
        )
