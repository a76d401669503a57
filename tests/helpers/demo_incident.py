"""The demo's recorded incident (a vLLM host under KV-cache pressure, rca/samples/) replayed at
loopback and posted to a real app: an investigation with breached findings and their series,
for the tests of what is kept and shown of the evidence."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from rca.cli.demo import DEMO_ALERT
from rca.collect.replay import Recording, ReplayServer


def demo_payload(alert_start: float, group: str, **annotations: str) -> dict[str, Any]:
    """The recorded incident's webhook as `rca demo` sends it, with annotations of one's own."""
    payload = json.loads(resources.files("rca.samples").joinpath(DEMO_ALERT).read_text())
    payload["groupKey"] += f"/{group}"
    payload["commonAnnotations"].update(annotations)
    for alert in payload["alerts"]:
        alert["startsAt"] = datetime.fromtimestamp(alert_start, UTC).isoformat()
        alert["annotations"].update(annotations)
    return payload


@contextmanager
def replayed_window() -> Iterator[tuple[str, float]]:
    """The recorded Prometheus window served at loopback: its URL and the alert start it is anchored to."""
    recording = Recording.load()
    alert_start = time.time() - float(recording.meta["investigated_after_seconds"])
    with ReplayServer(recording, anchor=alert_start) as replay:
        yield replay.url, alert_start
