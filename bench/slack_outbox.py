"""Benchmark: Slack posts lost or posted twice when PostgreSQL is cut at random moments.

    .venv/bin/python bench/slack_outbox.py --deliveries 1000 --mode webhook
    .venv/bin/python bench/slack_outbox.py --deliveries 1000 --mode bot

Real PostgreSQL (a fresh database on RCA_TEST_PG_URL's server) reached through a TCP proxy, the
fake Slack (tests/fakes/slack.py), and `rca.notify.service.deliver` as the worker calls it, one
incident after another, each retried until delivered. Runs twice: quiet, then with the proxy
stopping PostgreSQL as its clients see it (every connection reset, new ones refused for up to
50 ms) at random moments, about every `--gap` seconds. Counts, per 1,000 incidents, the
messages lost (none in Slack) and the duplicates (more than one), and the stops made.
docs/slack.md ("Exactly once") reports it.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rca.notify.service import deliver  # noqa: E402
from rca.store.db import get_engine, migrate  # noqa: E402
from tests.fakes.slack import FakeSlack  # noqa: E402
from tests.helpers.databases import create_database, drop_database  # noqa: E402
from tests.helpers.slack import of_incident, owe_slack, slack_settings, store_incident, store_investigation  # noqa: E402
from tests.helpers.tcpproxy import TcpProxy  # noqa: E402


def cutter(proxy: TcpProxy, gap: float, stop: threading.Event, cuts: list[float]) -> None:
    """Stop PostgreSQL, as its clients see it, at random moments `gap` seconds apart on average:
    every connection reset, new ones refused for up to 50 ms."""
    while not stop.wait(random.expovariate(1 / gap)):
        proxy.outage()
        cuts.append(time.monotonic())
        time.sleep(random.uniform(0, 0.05))
        proxy.restore()


def deliver_until_done(settings: object, incident_id: int) -> int:
    """Deliver as the worker does (an error: the sweep re-queues it; here: at once). Returns the errors."""
    errors, attempt = 0, 1
    while True:
        try:
            outcome = deliver(settings, incident_id, "investigation", attempt)  # type: ignore[arg-type]
        except Exception:
            errors += 1
            time.sleep(0.01)
            continue
        if outcome.retry_in is None:
            return errors
        time.sleep(min(outcome.retry_in, 0.5))
        attempt += 1


def run(mode: str, deliveries: int, gap: float | None) -> None:
    url = create_database()
    try:
        migrate(url)
        target = make_url(url)
        with (
            tempfile.TemporaryDirectory() as tmp,
            FakeSlack() as slack,
            TcpProxy(target.host or "127.0.0.1", target.port or 5432) as proxy,
        ):
            proxied = target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
            settings = slack_settings(
                proxied, Path(tmp), slack, mode=mode, slack_channel="C0BENCH001", slack_timeout_seconds=0.5
            )
            incidents = []
            for _ in range(deliveries):
                incident_id = store_incident(url)
                store_investigation(url, incident_id, ["queue_median"], ["arrival_surge"])
                owe_slack(url, incident_id)
                incidents.append(incident_id)
            stop, cuts = threading.Event(), []
            thread = threading.Thread(target=cutter, args=(proxy, gap, stop, cuts)) if gap else None
            started = time.monotonic()
            if thread:
                thread.start()
            errors = sum(deliver_until_done(settings, incident_id) for incident_id in incidents)
            stop.set()
            if thread:
                thread.join()
            elapsed = time.monotonic() - started
            posts = slack.webhook_posts() if mode == "webhook" else slack.posts()
            counts = [len(of_incident(posts, incident_id)) for incident_id in incidents]
            get_engine(proxied).dispose()
    finally:
        drop_database(url)
    lost, twice = counts.count(0), sum(max(0, n - 1) for n in counts)
    per = 1000 / deliveries
    figures = [
        f"{mode}, " + (f"stopped every ~{gap:.2f} s" if gap else "quiet"),
        f"{deliveries} deliveries in {elapsed:.1f} s",
        f"{len(cuts)} stops",
        f"{errors} failed attempts retried",
        f"lost {lost * per:g} per 1,000 posts",
        f"duplicated {twice * per:g} per 1,000 posts ({twice / len(cuts) if cuts else 0:.3f} per stop)",
    ]
    print("; ".join(figures), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=1000)
    parser.add_argument("--mode", choices=("webhook", "bot"), default="webhook")
    parser.add_argument("--gap", type=float, default=0.1, help="mean seconds between two cuts")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)  # the cuts make every layer complain, on purpose
    run(args.mode, args.deliveries, None)
    run(args.mode, args.deliveries, args.gap)


if __name__ == "__main__":
    main()
