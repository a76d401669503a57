"""When each serving instance's engine process started, in one query for the whole fleet.

A restart (a deploy, a crash) empties the engine's caches and queue and resets its counters: for
a while its prefix-cache hit rate is cold, its rates straddle two processes and its trend window
compares the old process with the new one. The states (`rca.scan.states`) hold the early signals
of an instance that started less than the warm-up ago; its TTFT against the SLO still counts.
Read from `process_start_time_seconds`, which every Python engine (vLLM, SGLang) exports through
prometheus_client; an instance without it is never taken for restarted.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime

from rca.scan.fleet import FleetSource
from rca.scan.queries import GROUP_LABEL
from rca.scan.states import Assessment

START_QUERY = f'max by ({GROUP_LABEL}) (process_start_time_seconds{{{GROUP_LABEL}!=""}})'


def started(source: FleetSource, at: datetime) -> dict[str, float]:
    """Unix start time of each instance's process, as of `at`."""
    found: dict[str, float] = {}
    for row in source.instant(START_QUERY, at):
        instance = row.get("metric", {}).get(GROUP_LABEL)
        value = float(row.get("value", [0, "nan"])[1])
        if instance and math.isfinite(value):
            found[instance] = value
    return found


def with_starts(assessments: dict[str, Assessment], starts: dict[str, float]) -> dict[str, Assessment]:
    """The assessments, each with its instance's process start when known."""
    return {
        instance: replace(assessment, started_at=starts[instance]) if instance in starts else assessment
        for instance, assessment in assessments.items()
    }
