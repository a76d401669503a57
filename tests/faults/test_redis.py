"""Redis killed (-9) in the middle of a burst of webhooks and started again empty: its queues, the
messages waiting and those unacknowledged, are lost. Intake stores every alert while the broker
is down (200, the enqueue fails fast), the investigations running meanwhile finish, and the
sweep enqueues what the lost queue held and delivers the Slack notices whose enqueue failed:
every accepted alert investigated once, posted once, nothing half-stored."""

from __future__ import annotations

import time

from tests.faults.stack import FaultStack
from tests.faults.workers import running
from tests.helpers.processes import Worker
from tests.helpers.waiting import wait_for

BURST, DOWN_AT, UP_AT = 24, 8, 16  # webhooks: all of them, the one before which Redis dies, and returns
OUTAGE = 3.0  # seconds Redis stays down, at least


def test_redis_lost_mid_burst_loses_no_alert_and_no_slack_post(stack: FaultStack, worker: Worker) -> None:
    stack.prometheus.delay = 0.1
    killed_at = 0.0

    def break_redis(n: int) -> None:
        nonlocal killed_at
        if n == DOWN_AT:
            wait_for(lambda: running(stack.db_url), 30, "investigations to run")
            stack.redis.kill()
            killed_at = time.monotonic()
        elif n == UP_AT:
            time.sleep(max(0.0, killed_at + OUTAGE - time.monotonic()))
            stack.redis.start()  # empty: the queues are gone

    burst = stack.send("redis", BURST, before=break_redis)
    assert not burst.refused, f"a broker outage refused alerts: {burst.refused}"
    report = stack.settle(burst, 90, f"the alerts of the Redis outage\n{worker.output()}")
    assert report.clean, report.problems()
