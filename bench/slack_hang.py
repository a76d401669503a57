"""Benchmark: investigation throughput of `rca worker` with a hanging Slack against a healthy one.

    .venv/bin/python bench/slack_hang.py --investigations 20 --rounds 2

The real `rca worker` (investigations and Slack deliveries on pools of their own, the scheduler) on
a throwaway PostgreSQL database and a Redis database of its own; a stub Prometheus whose every
answer takes `--prometheus-delay` seconds (investigations wait on I/O, as real ones do) and a fake
Slack (tests/fakes/slack.py). Each round posts `--investigations` new incidents with Slack healthy,
then as many with every Slack call hanging past RCA_SLACK_TIMEOUT_SECONDS (`--slack-timeout`, the
default 10 s: each notice then holds a Slack process for its whole timeout, per attempt), and times
webhook to the last investigation `done`. Prints each batch, the medians and hanging / healthy
(the target: within 0.8 to 1.2), and the Slack posts made while it hung (none should be).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import select

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rca.api.app import create_app  # noqa: E402
from rca.jobs.celery_app import create_app as create_celery_app  # noqa: E402
from rca.store.db import migrate  # noqa: E402
from rca.store.models import InvestigationRow  # noqa: E402
from tests.fakes.prometheus import StubPrometheus  # noqa: E402
from tests.fakes.slack import TOKEN, FakeSlack  # noqa: E402
from tests.helpers.brokers import claim_redis_db  # noqa: E402
from tests.helpers.databases import create_database, drop_database, rows  # noqa: E402
from tests.helpers.payloads import make_alert, make_payload, post_webhook  # noqa: E402
from tests.helpers.processes import running_worker, subprocess_env  # noqa: E402
from tests.helpers.slack import CHANNEL, slack_settings  # noqa: E402


def done(db: str, ids: list[int]) -> bool:
    found = rows(db, select(InvestigationRow.status).where(InvestigationRow.id.in_(ids)))
    return len(found) == len(ids) and all(r.status == "done" for r in found)


def batch(api: TestClient, db: str, label: str, count: int) -> float:
    """Seconds from posting `count` new incidents to all their investigations done."""
    started = time.monotonic()
    ids = []
    for n in range(count):
        reply = post_webhook(api, make_payload(f"{label}-{n}", alerts=[make_alert(f"fp-{label}-{n}")]))
        reply.raise_for_status()
        ids.append(reply.json()["investigation_id"])
    while not done(db, ids):
        if time.monotonic() - started > 600:
            raise SystemExit(f"{label}: investigations not done after 600 s")
        time.sleep(0.05)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--investigations", type=int, default=20, help="per batch")
    parser.add_argument("--rounds", type=int, default=2, help="healthy + hanging batches")
    parser.add_argument("--slack-timeout", type=float, default=10.0, help="RCA_SLACK_TIMEOUT_SECONDS")
    parser.add_argument("--prometheus-delay", type=float, default=0.1, help="seconds per Prometheus answer")
    parser.add_argument("--concurrency", type=int, default=2, help="rca worker --concurrency")
    args = parser.parse_args()
    db = create_database()
    broker, redis_client = claim_redis_db()
    healthy: list[float] = []
    hanging: list[float] = []
    try:
        migrate(db)
        with tempfile.TemporaryDirectory() as tmp, FakeSlack() as slack, StubPrometheus() as prometheus:
            home = Path(tmp)
            # A hung call's answer finds its client gone (the service timed out): expected, not news.
            slack.server.handle_error = lambda request, address: None
            env = subprocess_env(
                broker_url=broker,
                database_url=db,
                prometheus_url=prometheus.url,
                scan_enabled="false",  # investigations only: the scan would add its own queries
                data_dir=str(home / "rca-data"),
                log_level="WARNING",
                slack_bot_token=TOKEN,
                slack_channel=CHANNEL,
                slack_api_url=slack.api_url,
                slack_timeout_seconds=str(args.slack_timeout),
            )
            settings = slack_settings(db, home, slack, broker_url=broker, prometheus_url=prometheus.url)
            options = ("--concurrency", str(args.concurrency), "--slack-concurrency", "2")
            with (
                running_worker(home, env, create_celery_app(settings), broker, "bench", options, ready_timeout=180),
                TestClient(create_app(settings)) as api,
            ):
                batch(api, db, "warm-up", args.investigations)  # the pools import and connect
                prometheus.delay = args.prometheus_delay
                for n in range(args.rounds):
                    slack.delay = 0.0
                    healthy.append(batch(api, db, f"healthy-{n}", args.investigations))
                    slack.delay = 3 * args.slack_timeout  # every call outlives the service's timeout
                    posts_before = len(slack.posts())
                    hanging.append(batch(api, db, f"hanging-{n}", args.investigations))
                    hung_posts = len(slack.posts()) - posts_before
                    print(
                        f"round {n + 1}: {args.investigations} investigations, healthy Slack {healthy[-1]:.2f} s, "
                        f"hanging Slack {hanging[-1]:.2f} s ({hung_posts} Slack posts while it hung)",
                        flush=True,
                    )
                slack.delay = 0.0
    finally:
        drop_database(db)
        redis_client.flushdb()
        redis_client.close()
    well, hung = statistics.median(healthy), statistics.median(hanging)
    print(
        f"median per {args.investigations} investigations: healthy Slack {well:.2f} s "
        f"({args.investigations / well:.2f}/s), hanging Slack {hung:.2f} s ({args.investigations / hung:.2f}/s); "
        f"hanging / healthy = {hung / well:.2f} (target 0.8 to 1.2)"
    )


if __name__ == "__main__":
    main()
