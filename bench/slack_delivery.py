"""Benchmark: Slack delivery of the service against a local fake Slack (tests/fakes/slack.py).

    .venv/bin/python bench/slack_delivery.py --runs 20

Measures, with the real HTTP service in embedded mode (SQLite, in-process queue, stub Prometheus):
- webhook POST -> Slack message accepted (monotonic clock; this includes the investigation),
  with Slack answering at once, and with a 429 `Retry-After: 1` before the post;
- Retry-After adherence: the gap between the 429 and the accepted retry;
- the worst-case message (5 hypotheses and 400 breached signals of 300 characters): render time,
  blocks, largest section, payload bytes, and that it passes the Block Kit limits.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rca.api.app import create_app  # noqa: E402
from rca.notify.blocks import render  # noqa: E402
from rca.notify.message import BreachedLine, HypothesisLine, IncidentMessage  # noqa: E402
from rca.startup import checked_settings  # noqa: E402
from rca.store.db import migrate  # noqa: E402
from tests.fakes.prometheus import StubPrometheus  # noqa: E402
from tests.fakes.slack import TOKEN, Failure, FakeSlack, block_kit_problems  # noqa: E402
from tests.helpers.payloads import make_alert, make_payload  # noqa: E402
from tests.helpers.service import LiveServer  # noqa: E402


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def worst_case() -> None:
    long = "x" * 300 + " <!channel> & <http://evil|click>"
    message = IncidentMessage(
        incident_id=1,
        alertname="A" * 400,
        subject="t" * 200,
        status="firing",
        severity="critical",
        summary=long * 20,
        hypotheses=[HypothesisLine(f"category_{i}", 0.5, long * 10) for i in range(5)],
        breached=[BreachedLine(f"signal_{i}", long, 1.0, 2.0, "requests", ">", 1.5) for i in range(400)],
        incident_url="https://rca.example/api/v1/incidents/1",
        generator_url="http://p/" + "g" * 5000,
        external_url="http://alertmanager:9093",
        analyst="rules",
        seconds=1.0,
    )
    started = time.perf_counter()
    for _ in range(100):
        payload = render(message)
    per_render = (time.perf_counter() - started) / 100
    sections = [len(b["text"]["text"]) for b in payload["blocks"] if b["type"] == "section"]
    print(
        f"worst case: render {per_render * 1000:.2f} ms, {len(payload['blocks'])} blocks (limit 50), "
        f"largest section {max(sections)} chars (limit 3000), header {len(payload['blocks'][0]['text']['text'])} "
        f"chars (limit 150), {len(json.dumps(payload))} bytes, Block Kit problems: "
        f"{block_kit_problems(payload) or 'none'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    worst_case()
    logging.getLogger("rca.notify").setLevel(logging.ERROR)  # the 429s are on purpose
    clean: list[float] = []
    limited_runs: list[float] = []
    waits: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, FakeSlack() as slack, StubPrometheus() as prometheus:
        settings = checked_settings(
            data_dir=Path(tmp),
            webhook_token="bench",
            api_tokens="bench",
            prometheus_url=prometheus.url,
            slack_bot_token=TOKEN,
            slack_channel="#bench",
            slack_api_url=slack.api_url,
        )
        migrate(settings.effective_database_url)
        with LiveServer(create_app(settings)) as server, httpx.Client(base_url=server.url, timeout=30) as client:
            for run in range(2 * args.runs + 1):  # run 0 warms up; odd runs meet a 429 first
                slack.reset()
                if run % 2:
                    slack.fail_next(Failure(429, retry_after=1))
                sent = time.monotonic()
                reply = client.post(
                    "/api/v1/alertmanager",
                    headers={"Authorization": "Bearer bench"},
                    json=make_payload(f"bench-{run}", alerts=[make_alert(f"fp-{run}")]),
                )
                reply.raise_for_status()
                while not slack.posts():
                    if time.monotonic() - sent > 60:
                        raise SystemExit(f"run {run}: no Slack message after 60 s")
                    time.sleep(0.005)
                first, accepted = slack.received[0], slack.posts()[0]
                if run % 2:
                    limited_runs.append(accepted.at - sent)
                    waits.append(accepted.at - first.at)
                elif run:
                    clean.append(accepted.at - sent)
    for name, values in (("Slack answering at once", clean), ("one 429 Retry-After: 1 first", limited_runs)):
        print(
            f"webhook -> Slack message accepted, {len(values)} runs, {name}: "
            f"median {statistics.median(values):.3f} s, p95 {percentile(values, 95):.3f} s, max {max(values):.3f} s"
        )
    print(f"429 -> accepted retry: min {min(waits):.3f} s, median {statistics.median(waits):.3f} s (Retry-After 1 s)")


if __name__ == "__main__":
    main()
