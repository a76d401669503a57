"""PostgreSQL stopped (an immediate shutdown, as a crash looks to clients) in the middle of a burst
of webhooks while investigations run, and started again. Intake answers 503 with Retry-After
while it is down, and stores nothing half; the running investigations retry and finish; the
refused notifications are sent again, as Alertmanager does. Every accepted alert investigated
once, posted once, nothing half-stored, and no process restarted."""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.faults.stack import FaultStack
from tests.faults.workers import running
from tests.helpers.processes import Worker
from tests.helpers.waiting import wait_for

BURST, DOWN_AT, UP_AT = 18, 6, 12  # webhooks: all of them, the one before which PostgreSQL stops, and returns
OUTAGE = 5.0  # seconds PostgreSQL stays down, at least


def test_postgres_down_mid_burst_and_mid_investigation_loses_nothing(stack: FaultStack, worker: Worker) -> None:
    stack.prometheus.delay = 0.3  # the investigations are mid-run when the database goes
    stopped_at = 0.0

    def break_postgres(n: int) -> None:
        nonlocal stopped_at
        if n == DOWN_AT:
            wait_for(lambda: running(stack.db_url), 30, "investigations to run")
            stack.postgres.stop()
            stopped_at = time.monotonic()
        elif n == UP_AT:
            time.sleep(max(0.0, stopped_at + OUTAGE - time.monotonic()))
            stack.postgres.start()

    burst = stack.send("pg", BURST, before=break_postgres)
    assert burst.refused and set(burst.refused.values()) == {503}, burst.refused  # each 503 had a Retry-After
    stack.prometheus.delay = 0.05
    stack.resend_refused(burst)
    report = stack.settle(burst, 120, f"the alerts of the PostgreSQL outage\n{worker.output()}")
    assert report.clean, report.problems()
    assert stack.serve is not None and stack.serve.poll() is None  # rca serve recovered by itself
    assert worker.process.poll() is None


def test_postgres_lost_the_moment_slack_accepted_a_post_posts_it_once(stack: FaultStack, worker: Worker) -> None:
    """The duplicate the fault bench found: PostgreSQL stops right after Slack accepted a message and
    before the delivery recorded it. The send was committed with its key before the post, so the
    retried delivery finds the message in the channel's history and posts nothing new."""
    warm = stack.send("pg-slack-warm", 1)  # one post to the channel by name tells its ID
    stack.settle(warm, 60, f"the first post\n{worker.output()}")
    struck = threading.Event()

    def stop_postgres(method: str, answer: dict[str, Any]) -> None:
        if method == "chat.postMessage" and not answer["message"].get("thread_ts") and not struck.is_set():
            struck.set()
            stack.postgres.stop()  # before the sender hears Slack's answer

    stack.slack.on_accepted = stop_postgres
    burst = stack.send("pg-slack", 3)
    wait_for(struck.is_set, 60, f"a post to strike at\n{worker.output()}")
    time.sleep(OUTAGE)
    stack.postgres.start()
    stack.resend_refused(burst)
    report = stack.settle(burst, 120, f"the alerts of the outage at the post\n{worker.output()}")
    assert report.clean, report.problems()
    assert stack.slack.reads(), "the lost post was not looked for"
