"""The Prometheus replay behind `rca demo`: answers only what was recorded, shifted to the new
alert time, on the grid asked for; and the bundled recording still holds every query the
collection code makes (else it must be re-recorded with tools/record_demo_window.py)."""

from __future__ import annotations

import fnmatch
import json
import time
import tomllib
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path

import httpx
import pytest

from rca.analyst.summary import AlertText
from rca.cli.demo import DEMO_ALERT
from rca.collect.replay import FORMAT, Recording, ReplayServer, normalise_promql
from rca.collect.target import target_from_alerts
from rca.config import load_settings
from rca.pipeline import analyse
from tests.helpers.paths import REPO

ANCHOR = 1_900_000_000.0  # where the replayed alert starts (unix seconds)
WINDOW = 10_860
RANGE_Q = 'max(vllm:kv_cache_usage_perc{instance="h:8000"})'
PROBE_Q = 'count(last_over_time({__name__=~"vllm:num_requests_waiting",instance="h:8000"}[10860s]))'


def _recording() -> Recording:
    """Two recorded answers: a range query at a 15 s step from 60 s before the alert, with one
    gap, and an instant probe at 60 s after it."""
    return Recording.from_dict(
        {
            "format": FORMAT,
            "window_seconds": WINDOW,
            "meta": {"investigated_after_seconds": 60},
            "queries": [
                {
                    "kind": "range",
                    "promql": RANGE_Q,
                    "start": -60.0,
                    "end": 60.0,
                    "step": 15.0,
                    "result": [
                        {
                            "metric": {"instance": "h:8000"},
                            "start": -60.0,
                            "values": ["0.5", "0.5", "0.6", None, "0.9", "0.95", "0.97", "0.98", "0.99"],
                        }
                    ],
                },
                {"kind": "instant", "promql": PROBE_Q, "at": 60.0, "result": [{"metric": {}, "value": "1"}]},
            ],
        }
    )


@pytest.fixture
def replay() -> ReplayServer:
    with ReplayServer(_recording(), anchor=ANCHOR) as server:
        yield server


def _get(replay: ReplayServer, path: str, **params: object) -> httpx.Response:
    return httpx.get(f"{replay.url}{path}", params=params, timeout=5)


def test_range_answers_are_shifted_to_the_new_alert_time(replay: ReplayServer) -> None:
    body = _get(replay, "/api/v1/query_range", query=RANGE_Q, start=ANCHOR - 60, end=ANCHOR + 60, step="15s").json()
    assert body["status"] == "success" and body["data"]["resultType"] == "matrix"
    [series] = body["data"]["result"]
    assert series["metric"] == {"instance": "h:8000"}
    times = [t for t, _ in series["values"]]
    assert times[0] == ANCHOR - 60 and times[-1] == ANCHOR + 60
    assert ANCHOR - 15 not in times, "a point Prometheus did not return stays absent"
    assert [v for _, v in series["values"]] == ["0.5", "0.5", "0.6", "0.9", "0.95", "0.97", "0.98", "0.99"]


def test_range_step_and_bounds_follow_the_request(replay: ReplayServer) -> None:
    """A coarser step takes every other recorded point; grid points before or after the recording
    get none (nothing is extrapolated)."""
    body = _get(replay, "/api/v1/query_range", query=RANGE_Q, start=ANCHOR - 120, end=ANCHOR + 120, step=30).json()
    [series] = body["data"]["result"]
    assert series["values"] == [
        [ANCHOR - 60, "0.5"],
        [ANCHOR - 30, "0.6"],
        [ANCHOR, "0.9"],
        [ANCHOR + 30, "0.97"],
        [ANCHOR + 60, "0.99"],
    ]
    # A grid off the recorded one (the client rounds times to whole seconds) takes the nearest
    # recorded point, at most half a recorded step away.
    body = _get(replay, "/api/v1/query_range", query=RANGE_Q, start=ANCHOR - 60.6, end=ANCHOR - 29, step=15).json()
    [series] = body["data"]["result"]
    assert series["values"] == [[ANCHOR - 60.6, "0.5"], [ANCHOR - 45.6, "0.5"], [ANCHOR - 30.6, "0.6"]]
    body = _get(replay, "/api/v1/query_range", query=RANGE_Q, start=ANCHOR + 3, end=ANCHOR + 70, step=15).json()
    [series] = body["data"]["result"]
    assert series["values"] == [
        [ANCHOR + 3, "0.9"],
        [ANCHOR + 18, "0.95"],
        [ANCHOR + 33, "0.97"],
        [ANCHOR + 48, "0.98"],
        [ANCHOR + 63, "0.99"],
    ]
    # Entirely outside the recording: the series has no points, so it is not in the answer.
    body = _get(replay, "/api/v1/query_range", query=RANGE_Q, start=ANCHOR + 600, end=ANCHOR + 900, step=15).json()
    assert body["data"]["result"] == []


def _graph(replay: ReplayServer, promql: str, end: float, span: str = "1h") -> httpx.Response:
    """What a page's "Prometheus" link opens (the parameters `rca.pages.views.prometheus_graph` writes)."""
    end_input = datetime.fromtimestamp(end, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return _get(
        replay, "/graph", **{"g0.expr": promql, "g0.tab": "0", "g0.range_input": span, "g0.end_input": end_input}
    )


def test_graph_links_open_a_page_of_the_recorded_series(replay: ReplayServer) -> None:
    reply = _graph(replay, RANGE_Q, end=ANCHOR + 1800)
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/html")
    page = reply.text
    assert "max(vllm:kv_cache_usage_perc{instance=&quot;h:8000&quot;})" in page, "the query, escaped"
    assert '{instance="h:8000"}' not in page and "{instance=&quot;h:8000&quot;}" in page
    assert page.count("<polyline") == 1
    start = datetime.fromtimestamp(ANCHOR - 60, UTC).strftime("%Y-%m-%d %H:%M:%S")
    assert f"8 points from {start}" in page, "the recorded points, shifted to the alert; the gap stays a gap"
    assert "min 0.5, max 0.99, last 0.99" in page
    # Outside the recording, or a query it never held: said so, nothing drawn.
    empty = _graph(replay, RANGE_Q, end=ANCHOR + 90_000).text
    assert "No recorded points in this range" in empty and "<polyline" not in empty
    unknown = _graph(replay, "up", end=ANCHOR + 1800).text
    assert "not in the recording" in unknown and "<polyline" not in unknown
    assert replay.misses == [], "a page is not a query the investigation made"
    bad = _get(replay, "/graph", **{"g0.expr": "up", "g0.end_input": "<script>"})
    assert bad.status_code == 200 and "<script>" not in bad.text and "Cannot read the link's range" in bad.text


def test_unknown_queries_get_what_prometheus_says_of_a_missing_series(replay: ReplayServer) -> None:
    unknown = 'max(vllm:kv_cache_usage_perc{instance="other:8000"})'
    matrix = _get(replay, "/api/v1/query_range", query=unknown, start=ANCHOR - 60, end=ANCHOR, step=15).json()
    assert matrix == {"status": "success", "data": {"resultType": "matrix", "result": []}}
    vector = _get(replay, "/api/v1/query", query=unknown, time=ANCHOR).json()
    assert vector == {"status": "success", "data": {"resultType": "vector", "result": []}}
    assert _get(replay, "/api/v1/series", **{"match[]": "up"}).json() == {"status": "success", "data": []}
    assert replay.misses == [unknown, unknown]


def test_instant_probe_matches_across_window_widths_and_posted_forms(replay: ReplayServer) -> None:
    """The probe's `[Ns]` is the window's length, a second longer when the investigation starts a
    second later; the collection code POSTs its parameters."""
    later = PROBE_Q.replace("[10860s]", "[10861s]")
    reply = httpx.post(f"{replay.url}/api/v1/query", data={"query": later, "time": ANCHOR + 61}, timeout=5).json()
    assert reply["data"]["result"] == [{"metric": {}, "value": [ANCHOR + 61, "1"]}]
    # Far from the recorded instant there is nothing (beyond Prometheus' 5-minute lookback).
    far = _get(replay, "/api/v1/query", query=PROBE_Q, time=ANCHOR + 3600).json()
    assert far["data"]["result"] == []
    # A width that is not the window's is another query.
    other = PROBE_Q.replace("[10860s]", "[300s]")
    assert _get(replay, "/api/v1/query", query=other, time=ANCHOR + 60).json()["data"]["result"] == []
    assert normalise_promql("rate(x[300s])", WINDOW) == "rate(x[300s])"


def test_bad_requests_get_prometheus_errors(replay: ReplayServer) -> None:
    missing = _get(replay, "/api/v1/query")
    assert missing.status_code == 400 and missing.json()["errorType"] == "bad_data"
    too_many = _get(replay, "/api/v1/query_range", query=RANGE_Q, start=0, end=ANCHOR, step=1)
    assert too_many.status_code == 400 and "11,000 points" in too_many.json()["error"]
    assert _get(replay, "/api/v1/nothing").status_code == 404
    assert _get(replay, "/-/ready").status_code == 200


def test_the_bundled_recording_answers_every_query_the_collection_makes(tmp_path: Path) -> None:
    """Run the real collection and ranking on the replay, as the demo does. A miss means the
    profile's queries changed since recording: rerun tools/record_demo_window.py."""
    recording = Recording.load()
    assert recording.meta["recorded_by"] == "tools/record_demo_window.py"
    after = float(recording.meta["investigated_after_seconds"])
    alert_start = time.time() - after
    with ReplayServer(recording, anchor=alert_start) as replay:
        settings = load_settings(prometheus_url=replay.url, data_dir=tmp_path)
        labels = json.loads(resources.files("rca.samples").joinpath(DEMO_ALERT).read_text())["alerts"][0]["labels"]
        start = datetime.fromtimestamp(alert_start, UTC)
        target = target_from_alerts([labels], [start], settings.file_config().target)
        analysis = analyse(settings, target, now=start + timedelta(seconds=after), alerts=[AlertText(labels)])
    assert replay.misses == [], "the profile's queries changed: rerun tools/record_demo_window.py"
    findings = {f.key: f for f in analysis.findings}
    assert findings["kv_cache_usage"].breached and findings["preemption_rate"].breached
    assert not findings["request_rate"].breached  # demand did not rise: not a surge
    assert analysis.hypotheses[0].category == recording.meta["fault"] == "kv_memory_pressure"


def test_a_regular_install_carries_the_demo_files() -> None:
    """`pip install .` (not editable) ships only what package-data lists."""
    root = REPO
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["rca"]
    shipped = [
        p.relative_to(root / "rca").as_posix()
        for p in (root / "rca" / "samples").iterdir()
        if p.is_file() and p.suffix != ".py"
    ]
    assert {"samples/demo_alert.json", "samples/demo_fleet_window.json.gz"} <= set(shipped)
    for name in shipped:
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), f"{name} is not in package-data"
