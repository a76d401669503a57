"""Diagnose a generated world through the real pipeline without a Prometheus.

`WorldSource` is the pipeline's Prometheus source with its two HTTP calls answered from the world:
a probe finds data when one of its metric names is among the host's exported series
(tests/e2e/scenarios.host_series, so missing exporters and dropped series are honoured); a range
query is matched to the profile alternative it was rendered from, answers only when every metric
it names is exported, and returns what that signal measures of the engine, on the window's grid,
smoothed as a 5-minute rate (or a 10-minute median) smooths it, with the world's sample noise.
Everything from there on is the product's: scopes, stack detection, fallbacks between
alternatives, findings, the SLO model, the ranking. The sample of worlds that bench and e2e tests
also run through a real Prometheus is how this shortcut is kept honest.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from rca.collect.profile import load_profile
from rca.collect.prometheus import PrometheusSource, Samples, Series, Window
from rca.collect.target import target_from_alerts
from rca.config import Settings
from rca.pipeline import Analysis, analyse
from tests.e2e.lora import lora_labels
from tests.e2e.scenarios import (
    ITL_BUCKETS,
    PAUSED_SECONDS,
    PROMPT_BUCKETS,
    THROTTLED_STALL,
    TTFT_BUCKETS,
    host_series,
)
from tests.worlds.generate import World

Params = dict[str, float]


def bucket_quantile(q: float, buckets: list[float], median: float) -> float:
    """histogram_quantile over cumulative buckets of an exponential with this median, as
    Prometheus interpolates it (linearly inside the bucket; the top finite bound past the last)."""
    cdf = [1 - 2 ** (-le / max(median, 1e-9)) for le in buckets]
    rank = q
    previous_le, previous_cdf = 0.0, 0.0
    for le, share in zip(buckets, cdf, strict=True):
        if share >= rank:
            return previous_le + (le - previous_le) * (rank - previous_cdf) / max(share - previous_cdf, 1e-12)
        previous_le, previous_cdf = le, share
    return buckets[-1]


LORA_BUDGETS_READ = range(0, 9)  # the `max_lora` values the profile's lora_requests_info query enumerates


LORA_NAMES_READ = 8  # how many running and waiting adapter names the query compares


def adapter_wait(waiting: Callable[[Params], float]) -> Callable[[Params], float]:
    """What `requests_deferred`'s lora_requests_info alternatives read: the `waiting` requests while
    the engine's latest label set shows an adapter waiting outside the running ones at a full
    budget, else 0 (LoRA off on V0 included); NaN (no data) for a budget the query does not read."""

    def value(p: Params) -> float:
        labels = lora_labels(p)
        if labels is None:
            return 0.0
        budget, running, queued = labels
        if int(budget) not in LORA_BUDGETS_READ:
            return math.nan
        names = running.split(",")
        outside = set(queued.split(",")[:LORA_NAMES_READ]) - set(names[:LORA_NAMES_READ]) - {""}
        return waiting(p) if outside and len(names) == int(budget) else 0.0

    return value


def littles_law_waiting(p: Params) -> float:
    """Mean waiting requests from a queue-time histogram: arrivals times the mean wait (the
    exporters' exponential has its median at `queue_time`, its mean 1/ln 2 of it)."""
    return p["arrival_rate"] * p["queue_time"] / math.log(2)


VALUE: dict[str, Callable[[Params], float]] = {
    "cpu_bound_ratio": lambda p: p["pinned_busy"],
    "prefix_cache_hit_rate": lambda p: p["hit_rate"],
    "queue_median": lambda p: p["waiting"],
    "gpu_compute_to_memory": lambda p: p["tensor_active"] / p["dram_active"] if p["dram_active"] > 0.05 else math.nan,
    "kv_cache_usage": lambda p: p["kv_usage"],
    "preemption_rate": lambda p: p["preempt_rate"],
    "request_rate": lambda p: p["arrival_rate"],
    "prompt_tokens_p95": lambda p: bucket_quantile(0.95, PROMPT_BUCKETS, p["prompt_len"]),
    "ttft_p95": lambda p: bucket_quantile(0.95, TTFT_BUCKETS, p["ttft"]),
    "itl_p95": lambda p: bucket_quantile(0.95, ITL_BUCKETS, p["itl"]),
    "queue_time_p95": lambda p: bucket_quantile(0.95, TTFT_BUCKETS, p["queue_time"]),
    "running_batch": lambda p: p["running"],
    "requests_deferred": lambda p: p["deferred"],
    "gpu_utilization": lambda p: p["gpu_util"],
    "dram_active": lambda p: p["dram_active"],
    "pcie_traffic": lambda p: 2 * p["pcie_bytes"],
    "sm_clock": lambda p: p["sm_clock"],
    "xid_errors": lambda p: p["xid"],
    "gpu_throttle_reasons": lambda p: p["throttle"],
    "gpu_temperature": lambda p: p["gpu_temp"],
    "cpu_throttling": lambda p: p["throttled"],
    "context_switch_rate": lambda p: p["ctx_switches"],
    "numa_miss_rate": lambda p: p["numa_miss"],
}
# How far back the query's own window looks: a 5-minute rate lags by half of it, a 10-minute median by five.
LAG_SECONDS = {"queue_median": 300.0}
DEFAULT_LAG = 150.0
# Alternatives that measure their signal otherwise than VALUE does, by a name in their query:
# request counters that also count requests whose client gave up (the latency histograms do not),
# the graphics engine's active time (a stalled kernel counts), mean prompt lengths (the mean of
# the exporters' exponential), queue depths by Little's law over the exporters' queue-time
# histograms (whose median is the engine's mean: their mean is 1/ln 2 of it), throttled seconds and
# the requests waiting while an adapter waits for a full LoRA budget, the tokens TGI's running
# batch holds per running request, and the requests TRT-LLM holds paused for KV blocks.
BY_ALTERNATIVE: list[tuple[str, str, Callable[[Params], float]]] = [
    ("requests_deferred", "queue_time_seconds_sum", adapter_wait(littles_law_waiting)),
    ("requests_deferred", "lora_requests_info", adapter_wait(lambda p: p["waiting"])),
    ("queue_median", "queue_time_seconds_sum", littles_law_waiting),
    ("queue_median", "tgi_request_queue_duration_sum", lambda p: p["arrival_rate"] * p["ttft"] * 0.5 / math.log(2)),
    ("queue_median", "nv_inference_queue_duration_us", lambda p: p["arrival_rate"] * p["queue_time"]),
    ("cpu_throttling", "throttled_seconds_total", lambda p: THROTTLED_STALL * p["throttled"]),
    ("preemption_rate", "paused_requests", lambda p: p["preempt_rate"] * PAUSED_SECONDS),
    ("request_rate", "vllm:request_success_total", lambda p: p["arrival_rate"] + p["aborted"]),
    ("request_rate", "tgi_request_count", lambda p: p["arrival_rate"] + p["aborted"]),
    (
        "gpu_compute_to_memory",
        "GR_ENGINE_ACTIVE",
        lambda p: p["gpu_util"] / 100 / p["dram_active"] if p["dram_active"] > 0.05 else math.nan,
    ),
    ("prompt_tokens_p95", "tgi_batch_current_max_tokens", lambda p: p["kv_usage"] * p["kv_capacity"] / p["running"]),
    ("prompt_tokens_p95", "_sum", lambda p: p["prompt_len"] / math.log(2)),
    ("prompt_tokens_p95", "prompt_tokens_total", lambda p: p["prompt_len"] / math.log(2)),
]
GAUGES = {
    "xid_errors",
    "gpu_throttle_reasons",
    "gpu_temperature",
    "sm_clock",
    "running_batch",
    "kv_cache_usage",
    "requests_deferred",
}

METRIC_NAME = re.compile(
    r"(?<![\w:\"])((?:vllm|sglang):[\w:]+|(?:DCGM_|node_|nv_|tgi_|container_|namedprocess_|rca_gpu_)\w+)"
)
_NAME_REGEX = re.compile(r'__name__=~"([^"]+)"')
_PLACEHOLDER = re.compile(r"\\\$[a-z_]+")


Alternative = tuple[re.Pattern[str], str, list[str]]  # what its rendered PromQL looks like, signal id, metric names


@lru_cache(maxsize=1)
def _alternatives() -> list[Alternative]:
    """Every query alternative of the bundled profile, compiled once for all worlds."""
    out: list[Alternative] = []
    for spec in load_profile().signals:
        for alternative in spec.queries:
            # Placeholders match anything; `$$` is a literal `$` once rendered (a label_replace group).
            pattern = _PLACEHOLDER.sub(".*?", re.escape(alternative.promql)).replace(r"\$\$", r"\$")
            names = METRIC_NAME.findall(alternative.promql) + _NAME_REGEX.findall(alternative.promql)
            out.append((re.compile(pattern, re.S), spec.id, names))
    return out


class WorldSource(PrometheusSource):
    def __init__(self, world: World) -> None:  # no HTTP: `_instant` and `_range` answer
        self.url = "world://" + world.host.name
        self.concurrency = 1
        self.world = world
        self.exported = {s.name for s in host_series(world.host)}
        self.noise = random.Random(world.seed).uniform(0.01, 0.05)
        self.alternatives = _alternatives()

    def _has(self, name: str) -> bool:
        if any(ch in name for ch in "()|?*+"):
            return any(re.fullmatch(name, exported) for exported in self.exported)
        return name in self.exported

    def _instant(self, promql: str, at: datetime) -> list[dict[str, Any]]:
        names = _NAME_REGEX.findall(promql)
        if names and any(self._has(n) for n in names[0].split("|")):
            return [{"metric": {}, "value": [at.timestamp(), "1"]}]
        return []  # identity (alias) lookups: one host, nothing to join

    def _range(self, promql: str, window: Window) -> Series:
        for pattern, signal, names in self.alternatives:
            if pattern.fullmatch(promql):
                if not all(self._has(n) for n in names):
                    return []
                return [({}, self._values(signal, window, promql))]
        raise AssertionError(f"a query no profile alternative renders: {promql}")

    def _values(self, signal: str, window: Window, promql: str) -> Samples:
        host, value = self.world.host, VALUE[signal]
        value = next((v for s, marker, v in BY_ALTERNATIVE if s == signal and marker in promql), value)
        lag = 0.0 if signal in GAUGES else LAG_SECONDS.get(signal, DEFAULT_LAG)
        jitter = random.Random(f"{self.world.seed}:{signal}")
        out: Samples = []
        t = window.start.timestamp()
        end = window.end.timestamp()
        exact = signal in ("xid_errors", "gpu_throttle_reasons")  # codes, not measurements: no noise
        while t <= end + 1e-6:
            v = value(host.params(t - lag))
            if math.isfinite(v):
                noisy = v if exact else v * (1 + jitter.gauss(0, self.noise))
                out.append((t, max(0.0, noisy)))
            t += window.step_seconds
        return out


def diagnose(world: World, settings: Settings) -> Analysis:
    """The pipeline's analysis of the world's alert, at the world's `now`."""
    target = target_from_alerts(
        [world.alert], [datetime.fromtimestamp(world.alert_start, UTC)], settings.file_config().target
    )
    return analyse(settings, target, datetime.fromtimestamp(world.now, UTC), source=WorldSource(world))
