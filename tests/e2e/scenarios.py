"""Synthetic LLM-serving fleets with injected faults, as real Prometheus data.

Each host runs vLLM (instance `host:8000`), the DCGM exporter (instance `host:9400`, host name in
`Hostname`) and node_exporter relabelled to a bare `instance="host"`, the mix of spellings the
service must relate. A host with a `pod` also runs in Kubernetes: its serving series carry
`namespace`/`pod`, and with the `cadvisor` exporter it exposes that pod's container CPU series
(usage, quota, CFS periods). A host is healthy until its fault's onset, then ramps to the fault's values
over two minutes. The same model produces the backfilled history (OpenMetrics for `promtool tsdb
create-blocks-from openmetrics`) and the live values the exporter serves, so the two join up.
"""

from __future__ import annotations

import math
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler

from tests.e2e.lora import LABEL_NAMES, LORA_OFF, LastSet, label_sets
from tests.helpers.loopback import LoopbackServer

GRID_SECONDS = 5.0  # counters integrate their rates on this grid
RAMP_SECONDS = 120.0
MODEL = "llama-3-8b"
CPUS = 8
PINNED = range(4, 8)
NAMESPACE = "llm-serving"
CFS_PERIODS_PER_SECOND = 10.0  # the default 100 ms CFS period
THROTTLED_STALL = 0.3  # a throttled period holds each of the container's cores back for 30 % of it

BASELINE: dict[str, float] = {
    "arrival_rate": 8.0,  # requests per second
    "waiting": 1.0,
    "running": 12.0,
    "kv_usage": 0.55,
    "hit_rate": 0.78,
    "preempt_rate": 0.0,
    "prompt_len": 600.0,  # median tokens
    "ttft": 0.12,  # median seconds
    "queue_time": 0.02,  # median seconds in the waiting queue
    "itl": 0.018,  # median seconds
    "deferred": 0.0,
    "gpu_util": 85.0,
    "tensor_active": 0.45,
    "dram_active": 0.35,
    "sm_clock": 1980.0,
    "gpu_temp": 62.0,
    "xid": 0.0,
    "throttle": 0.0,  # clocks event reasons bitmask
    "pcie_bytes": 2.0e8,
    "pinned_busy": 0.55,
    "other_busy": 0.2,
    "ctx_switches": 12000.0,
    "numa_miss": 50.0,
    "throttled": 0.02,  # share of CFS periods in which the container was throttled
    "aborted": 0.0,  # requests per second the engine aborts (clients gave up waiting)
    "max_loras": 0.0,  # LoRA adapters that run at once (--max-loras); 0: LoRA off
    "adapters": 0.0,  # distinct LoRA adapters the traffic asks for (see tests/e2e/lora.py)
    "kv_capacity": 11_000.0,  # tokens the KV cache holds: the running requests' tokens at kv_usage
}

# What each fault changes, after onset. Values follow DOMAIN.md's descriptions of each cause.
FAULTS: dict[str, dict[str, float]] = {
    "prefix_cache_miss": {"hit_rate": 0.30, "ttft": 0.35, "waiting": 2.0},
    "arrival_surge": {
        "arrival_rate": 18.0,
        "waiting": 14.0,
        "running": 30.0,
        "kv_usage": 0.8,
        "ttft": 0.6,
        "queue_time": 1.5,
    },
    "kv_memory_pressure": {"kv_usage": 0.985, "preempt_rate": 0.8, "waiting": 9.0, "hit_rate": 0.7, "queue_time": 0.6},
    "cpu_launch_overhead": {"pinned_busy": 0.95, "gpu_util": 50.0, "itl": 0.035},
    "cpu_affinity_numa": {"pinned_busy": 0.9, "ctx_switches": 30000.0, "numa_miss": 2000.0, "itl": 0.03},
    "host_device_sync": {"pcie_bytes": 1.2e9, "pinned_busy": 0.88, "gpu_util": 55.0},
    "batching_misconfig": {"waiting": 9.0, "gpu_util": 45.0, "running": 4.0, "ttft": 0.5, "queue_time": 0.9},
    "prefill_blocking": {"prompt_len": 4000.0, "itl": 0.045, "ttft": 0.9, "waiting": 7.0, "queue_time": 0.5},
    # More adapters than the budget (LORA_HOST's 4) holds: the others' requests wait for a slot.
    "lora_adapter_loading": {"deferred": 6.0, "waiting": 8.0, "ttft": 0.7, "queue_time": 0.8, "adapters": 7.0},
    "memory_bandwidth_bound": {"tensor_active": 0.2, "dram_active": 0.75, "itl": 0.03},
    "gpu_degraded": {"sm_clock": 1400.0, "gpu_temp": 92.0, "itl": 0.03, "throttle": 0x40},
    "cpu_quota_throttling": {"throttled": 0.6, "pinned_busy": 0.9, "itl": 0.03},
}
# Also: "cadvisor" (with a pod), "process" (process-exporter), "dcgm_basic" (DCGM without profiling fields).
EXPORTERS = frozenset({"serving", "dcgm", "node"})
# A vLLM host serving LoRA adapters: a budget of 4 (--max-loras), 3 adapters in use (`Host.normal`).
LORA_HOST = (("max_loras", 4.0), ("adapters", 3.0))
LORA_STACKS = frozenset({"vllm_v1", "vllm_v08", "vllm_v0"})  # engines that export vllm:lora_requests_info

PROMPT_BUCKETS = [
    1,
    8,
    16,
    32,
    64,
    128,
    256,
    512,
    1024,
    2048,
    4096,
    8192,
    16384,
    32768,
    65536,
    131072,
]  # to max-model-len
INFERENCE_BUCKETS = [0.5, 1, 2, 5, 10, 20, 30, 60, 120]
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]


@dataclass(frozen=True)
class Host:
    name: str
    fault: str | None
    onset: float  # unix seconds
    stack: str = "vllm_v1"  # which serving engine's metric names it exports (see SERVING)
    port: int | None = None  # serving port; default per stack
    exporters: frozenset[str] = EXPORTERS  # drop one to simulate missing data
    extra: tuple[tuple[str, float], ...] = ()  # red herrings: other values that move at onset
    normal: tuple[tuple[str, float], ...] = ()  # this host's own healthy levels, where they differ from BASELINE
    gpus: int = 1  # GPUs on the host; a fault shows on GPU 0 only, the others stay healthy
    pod: str | None = None  # Kubernetes pod (in NAMESPACE) the engine runs in
    isolcpus: bool = True  # False: PINNED cores are pinned by affinity only, node_cpu_isolated is absent
    # True: exporters are scraped by address, as in Kubernetes: node_exporter as `<node IP>:9100`
    # (its name only in node_uname_info), DCGM as `<exporter pod IP>:9400`, the engine pod (if
    # any) as `<pod IP>:port`, with kube_pod_info relating pod, pod IP, node and node IP.
    addresses: bool = False
    severity: float = 1.0  # share of the fault's change that is reached (0.5: half-way to FAULTS' values)
    ramp: float = RAMP_SECONDS  # seconds from onset to full effect
    # Metric names (or histogram families) a keep-list in the operator's scrape config drops.
    dropped: frozenset[str] = frozenset()
    # kube-state-metrics for its pod (with `pod`): the engine container's image, the pod's node
    # (the host) and its labels (`kube_node_labels`' label_* names), the pod's start (unix seconds).
    image: str | None = None
    node_labels: tuple[tuple[str, str], ...] = ()
    started: float | None = None  # also the engine's process_start_time_seconds
    engine_flags: tuple[tuple[str, str], ...] = ()  # vllm:cache_config_info's labels, when set

    def params(self, t: float) -> dict[str, float]:
        values = dict(BASELINE) | dict(self.normal)
        if t <= self.onset:
            return values
        blend = min(1.0, (t - self.onset) / self.ramp)
        if self.fault:
            for key, target in FAULTS[self.fault].items():
                values[key] = values[key] + (target - values[key]) * blend * self.severity
        for key, target in self.extra:
            values[key] = values[key] + (target - values[key]) * blend
        return values


def _noise(key: str, t: float, amplitude: float) -> float:
    """Deterministic jitter in [-amplitude, amplitude], constant over each 15 s."""
    h = zlib.crc32(f"{key}:{int(t // 15)}".encode())
    return ((h % 10000) / 10000 - 0.5) * 2 * amplitude


def _exp_cdf(le: float, median: float) -> float:
    return 1 - 2 ** (-le / median)


@dataclass
class Series:
    """One time series; `gauge` gives its value at t, `rate` its per-second increase (counters),
    `stamp` the wall-clock time it was last set at (None: not exported yet)."""

    name: str
    labels: dict[str, str]
    gauge: Callable[[dict[str, float], float], float] | None = None
    rate: Callable[[dict[str, float], float], float] | None = None
    stamp: Callable[[float, float], float | None] | None = None  # (t, start) -> time last set
    host: Host | None = None
    _cursor: tuple[float, float] | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        return self.name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(self.labels.items())) + "}"

    def sample(self, t: float, start: float) -> str | None:
        """The value as the exporter writes it at t; None while the series does not exist."""
        if self.stamp is None:
            return f"{self.value(t, start):.6g}"
        at = self.stamp(t, start)
        return None if at is None else f"{at:.3f}"  # a time: to the millisecond, as prometheus_client

    def value(self, t: float, start: float) -> float:
        assert self.host is not None
        if self.gauge is not None:
            return self.gauge(self.host.params(t), t)
        assert self.rate is not None
        # Left Riemann sum on a fixed grid from `start`; resumable so the live exporter is cheap.
        grid_t, total = self._cursor if self._cursor and self._cursor[0] <= t else (start, 0.0)
        while grid_t + GRID_SECONDS <= t:
            total += self.rate(self.host.params(grid_t), grid_t) * GRID_SECONDS
            grid_t += GRID_SECONDS
        self._cursor = (grid_t, total)
        return total + self.rate(self.host.params(grid_t), grid_t) * (t - grid_t)


def _histogram(
    name: str,
    labels: dict[str, str],
    buckets: list[float],
    median_key: str,
    rate_key: str = "arrival_rate",
    scale: float = 1.0,
) -> list[Series]:
    """Cumulative buckets of an exponential distribution with the given median (times `scale`)."""
    out = []
    for le in buckets:
        out.append(
            Series(
                f"{name}_bucket",
                labels | {"le": str(le)},
                rate=lambda p, t, le=le: p[rate_key] * _exp_cdf(le, p[median_key] * scale),
            )
        )
    out.append(Series(f"{name}_bucket", labels | {"le": "+Inf"}, rate=lambda p, t: p[rate_key]))
    out.append(Series(f"{name}_count", labels, rate=lambda p, t: p[rate_key]))
    out.append(Series(f"{name}_sum", labels, rate=lambda p, t: p[rate_key] * p[median_key] * scale / math.log(2)))
    return out


def _pcie_throughput_counters(labels: dict[str, str], g: Callable) -> list[Series]:
    """DCGM's default-counter PCIe fields (NVML's, in KB), beside or instead of the profiling ones."""
    return [
        Series(f"DCGM_FI_DEV_PCIE_{way}_THROUGHPUT", labels, rate=lambda p, t: g("pcie_bytes", 0.05)(p, t) / 1024)
        for way in ("TX", "RX")
    ]


def _in_flight_histogram(name: str, labels: dict[str, str], buckets: list[float], in_flight_key: str) -> list[Series]:
    """A per-request duration histogram of a state (waiting, running) whose requests number
    `in_flight_key` on average: exponential with mean in_flight / arrival, so that the rate of its
    sum is the number in flight (Little's law), as a real engine's histogram is."""

    def mean(p: dict[str, float]) -> float:
        return p[in_flight_key] / max(p["arrival_rate"], 1e-3)

    out = [
        Series(
            f"{name}_bucket",
            labels | {"le": str(le)},
            rate=lambda p, t, le=le: p["arrival_rate"] * _exp_cdf(le, mean(p) * math.log(2)),
        )
        for le in buckets
    ]
    out.append(Series(f"{name}_bucket", labels | {"le": "+Inf"}, rate=lambda p, t: p["arrival_rate"]))
    out.append(Series(f"{name}_count", labels, rate=lambda p, t: p["arrival_rate"]))
    out.append(Series(f"{name}_sum", labels, rate=lambda p, t: p[in_flight_key]))
    return out


def _count_histogram(name: str, labels: dict[str, str], per_second_key: str) -> list[Series]:
    """A per-request count histogram (preemptions of each finished request): Poisson counts whose
    sum grows by `per_second_key` a second."""

    def cdf(p: dict[str, float], k: int) -> float:
        mean = p[per_second_key] / max(p["arrival_rate"], 1e-3)
        return math.exp(-mean) * sum(mean**i / math.factorial(i) for i in range(k + 1))

    out = [
        Series(f"{name}_bucket", labels | {"le": str(k)}, rate=lambda p, t, k=k: p["arrival_rate"] * cdf(p, k))
        for k in (0, 1, 2, 5, 10)
    ]
    out.append(Series(f"{name}_bucket", labels | {"le": "+Inf"}, rate=lambda p, t: p["arrival_rate"]))
    out.append(Series(f"{name}_count", labels, rate=lambda p, t: p["arrival_rate"]))
    out.append(Series(f"{name}_sum", labels, rate=lambda p, t: p[per_second_key]))
    return out


Gauge = Callable[..., Callable[[dict[str, float], float], float]]


def _vllm_v1(h: str, g: Gauge, port: int = 8000) -> list[Series]:
    """vLLM V1 names (vllm/v1/metrics/loggers.py), as 0.34 exports them."""
    vllm = {"job": "vllm", "instance": f"{h}:{port}", "model_name": MODEL, "engine": "0"}

    def cached(p: dict[str, float], t: float) -> float:
        return p["arrival_rate"] * p["prompt_len"] * min(1.0, p["hit_rate"] * (1 + _noise(f"{h}:hit", t, 0.02)))

    return [
        Series("vllm:num_requests_waiting", vllm, gauge=g("waiting", 0.2)),
        Series("vllm:num_requests_running", vllm, gauge=g("running", 0.05)),
        Series("vllm:kv_cache_usage_perc", vllm, gauge=g("kv_usage", 0.01, hi=1.0)),
        Series("vllm:num_requests_waiting_by_reason", vllm | {"reason": "deferred"}, gauge=g("deferred")),
        Series("vllm:num_requests_waiting_by_reason", vllm | {"reason": "capacity"}, gauge=g("waiting", 0.2)),
        Series("vllm:prefix_cache_queries_total", vllm, rate=lambda p, t: p["arrival_rate"] * p["prompt_len"]),
        Series("vllm:prefix_cache_hits_total", vllm, rate=cached),
        Series("vllm:num_preemptions_total", vllm, rate=lambda p, t: p["preempt_rate"]),
        Series("vllm:request_success_total", vllm | {"finished_reason": "stop"}, rate=lambda p, t: p["arrival_rate"]),
        # Requests whose client gave up in the queue finish too, as `abort`.
        Series("vllm:request_success_total", vllm | {"finished_reason": "abort"}, rate=lambda p, t: p["aborted"]),
        Series("vllm:prompt_tokens_total", vllm, rate=lambda p, t: p["arrival_rate"] * p["prompt_len"]),
        # The same cache hits counted per prompt token (vLLM 0.34: local and external caches, by source).
        Series("vllm:prompt_tokens_cached_total", vllm, rate=cached),
        Series("vllm:prompt_tokens_by_source_total", vllm | {"source": "local_cache_hit"}, rate=cached),
        Series(
            "vllm:prompt_tokens_by_source_total",
            vllm | {"source": "local_compute"},
            rate=lambda p, t: p["arrival_rate"] * p["prompt_len"] - cached(p, t),
        ),
        *_histogram("vllm:request_prompt_tokens", vllm, PROMPT_BUCKETS, "prompt_len"),
        *_histogram("vllm:time_to_first_token_seconds", vllm, TTFT_BUCKETS, "ttft"),
        *_histogram("vllm:inter_token_latency_seconds", vllm, ITL_BUCKETS, "itl"),
        *_histogram("vllm:request_queue_time_seconds", vllm, TTFT_BUCKETS, "queue_time"),
        *_in_flight_histogram("vllm:request_inference_time_seconds", vllm, INFERENCE_BUCKETS, "running"),
        *_count_histogram("vllm:request_num_preemptions", vllm, "preempt_rate"),
    ]


def _sglang(h: str, g: Gauge, port: int = 30000) -> list[Series]:
    """SGLang names (python/sglang/srt/observability/metrics_collector.py)."""
    labels = {
        "job": "sglang",
        "instance": f"{h}:{port}",
        "model_name": MODEL,
        "engine_type": "unified",
        "tp_rank": "0",
        "pp_rank": "0",
    }
    kv_usage = g("kv_usage", 0.01, hi=1.0)
    return [
        Series("sglang:num_queue_reqs", labels, gauge=g("waiting", 0.2)),
        Series("sglang:num_running_reqs", labels, gauge=g("running", 0.05)),
        Series("sglang:token_usage", labels, gauge=kv_usage),
        Series("sglang:full_token_usage", labels, gauge=kv_usage),
        # The pool in tokens: used and available (what is neither is evictable cache).
        Series("sglang:kv_used_tokens", labels, gauge=lambda p, t: p["kv_capacity"] * kv_usage(p, t)),
        Series("sglang:kv_available_tokens", labels, gauge=lambda p, t: p["kv_capacity"] * (1 - kv_usage(p, t))),
        Series(
            "sglang:prefill_effective_tokens_total",
            labels | {"mode": "input"},
            rate=lambda p, t: p["arrival_rate"] * p["prompt_len"] * (1 - p["hit_rate"]),
        ),
        Series(
            "sglang:prefill_effective_tokens_total",
            labels | {"mode": "device_hit"},
            rate=lambda p, t: p["arrival_rate"] * p["prompt_len"] * p["hit_rate"],
        ),
        Series("sglang:prompt_tokens_total", labels, rate=lambda p, t: p["arrival_rate"] * p["prompt_len"]),
        # The tokenizer's count of the same hits, per cache tier.
        Series(
            "sglang:cached_tokens_total",
            labels | {"cache_source": "device"},
            rate=lambda p, t: p["arrival_rate"] * p["prompt_len"] * p["hit_rate"],
        ),
        Series("sglang:cache_hit_rate", labels, gauge=g("hit_rate", 0.03, hi=1.0)),
        *_histogram("sglang:time_to_first_token_seconds", labels, TTFT_BUCKETS, "ttft"),
        *_histogram("sglang:inter_token_latency_seconds", labels, ITL_BUCKETS, "itl"),
        *_histogram("sglang:e2e_request_latency_seconds", labels, TTFT_BUCKETS, "ttft", scale=8.0),
        *_histogram("sglang:queue_time_seconds", labels, TTFT_BUCKETS, "queue_time"),
    ]


def _tgi(h: str, g: Gauge, port: int = 9000) -> list[Series]:
    """TGI names (router/src/server.rs); no model label, no prefix-cache metric."""
    labels = {"job": "tgi", "instance": f"{h}:{port}"}
    kv_usage = g("kv_usage", 0.01, hi=1.0)
    return [
        Series("tgi_queue_size", labels, gauge=g("waiting", 0.2)),
        Series("tgi_batch_current_size", labels, gauge=g("running", 0.05)),
        # The tokens the running batch holds and may grow to (each request's prompt and new tokens),
        # against the most the router will batch (its KV room): per running request, they grow with
        # the prompts.
        Series(
            "tgi_batch_current_max_tokens",
            labels,
            gauge=lambda p, t: p["kv_capacity"] * kv_usage(p, t),
        ),
        Series("tgi_batch_max_total_tokens", labels, gauge=lambda p, t: p["kv_capacity"]),
        # Every request the router received, served or not.
        Series("tgi_request_count_total", labels, rate=lambda p, t: p["arrival_rate"] + p["aborted"]),
        *_histogram("tgi_request_input_length", labels, PROMPT_BUCKETS, "prompt_len"),
        *_histogram("tgi_request_queue_duration", labels, TTFT_BUCKETS, "ttft", scale=0.5),
        *_histogram("tgi_batch_forward_duration", labels | {"method": "prefill"}, TTFT_BUCKETS, "ttft", scale=0.5),
        *_histogram("tgi_request_mean_time_per_token_duration", labels, ITL_BUCKETS, "itl"),
        *_in_flight_histogram("tgi_request_inference_duration", labels, INFERENCE_BUCKETS, "running"),
    ]


# Seconds a request the TRT-LLM in-flight batcher paused for KV blocks stays paused: its paused-requests
# gauge is the preemption rate times this (Little's law).
PAUSED_SECONDS = 2.0


def _paused(labels: dict[str, str]) -> Series:
    """TRT-LLM's paused-requests gauge (custom_metrics_reporter.cc, inflight_batcher_specific_metric)."""
    return Series(
        "nv_trt_llm_inflight_batcher_metrics",
        labels | {"inflight_batcher_specific_metric": "paused_requests"},
        gauge=lambda p, t: p["preempt_rate"] * PAUSED_SECONDS,
    )


def _triton(h: str, g: Gauge, port: int = 8002) -> list[Series]:
    """Triton core + TRT-LLM backend names (core/src/metrics.cc); counters carry no `_total`."""
    labels = {"job": "triton", "instance": f"{h}:{port}", "model": "llama", "version": "1"}
    return [
        Series("nv_inference_pending_request_count", labels, gauge=g("waiting", 0.2)),
        Series("nv_inference_request_success", labels, rate=lambda p, t: p["arrival_rate"]),
        Series("nv_inference_count", labels, rate=lambda p, t: p["arrival_rate"]),
        # Dynamic batching: `running / 4` requests per model execution (3 at the baseline).
        Series("nv_inference_exec_count", labels, rate=lambda p, t: p["arrival_rate"] / max(1.0, p["running"] / 4)),
        Series("nv_inference_queue_duration_us", labels, rate=lambda p, t: p["arrival_rate"] * p["queue_time"] * 1e6),
        Series(
            "nv_trt_llm_kv_cache_block_metrics",
            labels | {"kv_cache_block_type": "fraction"},
            gauge=g("kv_usage", 0.01, hi=1.0),
        ),
        _paused(labels),
        *_histogram(
            "nv_inference_first_response_histogram_ms", labels, [b * 1000 for b in TTFT_BUCKETS], "ttft", scale=1000.0
        ),
    ]


def _vllm_v0(h: str, g: Gauge, port: int = 8000) -> list[Series]:
    """vLLM V0 names (vllm/engine/metrics.py): only a model_name label, the GPU-cache gauges and
    TPOT instead of ITL; the prompt-token counter and the queue- and inference-time histograms as
    V1 has them. (The real V0 hit-rate gauge is lifetime; here it follows the window.)"""
    labels = {"job": "vllm", "instance": f"{h}:{port}", "model_name": MODEL}
    return [
        Series("vllm:num_requests_waiting", labels, gauge=g("waiting", 0.2)),
        Series("vllm:num_requests_running", labels, gauge=g("running", 0.05)),
        Series("vllm:gpu_cache_usage_perc", labels, gauge=g("kv_usage", 0.01, hi=1.0)),
        Series("vllm:gpu_prefix_cache_hit_rate", labels, gauge=g("hit_rate", 0.01, hi=1.0)),
        Series("vllm:num_preemptions_total", labels, rate=lambda p, t: p["preempt_rate"]),
        Series("vllm:request_success_total", labels | {"finished_reason": "stop"}, rate=lambda p, t: p["arrival_rate"]),
        Series("vllm:request_success_total", labels | {"finished_reason": "abort"}, rate=lambda p, t: p["aborted"]),
        Series("vllm:prompt_tokens_total", labels, rate=lambda p, t: p["arrival_rate"] * p["prompt_len"]),
        *_histogram("vllm:request_prompt_tokens", labels, PROMPT_BUCKETS, "prompt_len"),
        *_histogram("vllm:time_to_first_token_seconds", labels, TTFT_BUCKETS, "ttft"),
        *_histogram("vllm:time_per_output_token_seconds", labels, ITL_BUCKETS, "itl"),
        *_histogram("vllm:request_queue_time_seconds", labels, TTFT_BUCKETS, "queue_time"),
        *_in_flight_histogram("vllm:request_inference_time_seconds", labels, INFERENCE_BUCKETS, "running"),
    ]


def _vllm_v08(h: str, g: Gauge, port: int = 8000) -> list[Series]:
    """vLLM 0.8 (the V1 engine before the 0.9 renames): V0's gauges and histograms, but prefix-cache
    hits and queries as counters of KV blocks (`gpu_prefix_cache_*_total`) instead of a hit-rate gauge."""
    blocks_per_request = 40.0
    queries = lambda p, t: p["arrival_rate"] * blocks_per_request  # noqa: E731
    labels = {"job": "vllm", "instance": f"{h}:{port}", "model_name": MODEL}
    v0 = [s for s in _vllm_v0(h, g, port) if s.name != "vllm:gpu_prefix_cache_hit_rate"]
    return v0 + [
        Series("vllm:gpu_prefix_cache_queries_total", labels, rate=queries),
        Series(
            "vllm:gpu_prefix_cache_hits_total",
            labels,
            rate=lambda p, t: queries(p, t) * min(1.0, p["hit_rate"] * (1 + _noise(f"{h}:hits", t, 0.01))),
        ),
    ]


def _triton_trtllm(h: str, g: Gauge, port: int = 8002) -> list[Series]:
    """Triton with the TRT-LLM backend: decoupled, so requests queue inside the engine and the
    core pending-request gauge stays near zero; only `nv_trt_llm_request_metrics` sees them."""
    labels = {"job": "triton", "instance": f"{h}:{port}", "model": "tensorrt_llm", "version": "1"}
    return [
        Series("nv_inference_pending_request_count", labels, gauge=lambda p, t: 0.0),
        Series("nv_inference_request_success", labels, rate=lambda p, t: p["arrival_rate"]),
        Series("nv_inference_count", labels, rate=lambda p, t: p["arrival_rate"]),  # core metrics, every model
        Series("nv_trt_llm_request_metrics", labels | {"request_type": "waiting"}, gauge=g("waiting", 0.2)),
        Series("nv_trt_llm_request_metrics", labels | {"request_type": "active"}, gauge=g("running", 0.05)),
        Series(
            "nv_trt_llm_kv_cache_block_metrics",
            labels | {"kv_cache_block_type": "fraction"},
            gauge=g("kv_usage", 0.01, hi=1.0),
        ),
        _paused(labels),
    ]


SERVING = {
    "vllm_v1": _vllm_v1,
    "vllm_v0": _vllm_v0,
    "vllm_v08": _vllm_v08,
    "sglang": _sglang,
    "tgi": _tgi,
    "triton": _triton,
    "triton_trtllm": _triton_trtllm,
}


def address(kind: str, host: str) -> str:
    """A stable made-up IPv4 address for a host's node, exporter pod or engine pod."""
    subnet = {"node": 10, "exporter": 42, "pod": 244}[kind]
    n = zlib.crc32(f"{kind}:{host}".encode())
    return f"10.{subnet}.{n % 250 + 1}.{n // 250 % 250 + 1}"


def _dcgm_labels(host: Host, index: int) -> dict[str, str]:
    h = host.name
    return {
        "job": "dcgm",
        "instance": f"{address('exporter', h) if host.addresses else h}:9400",
        "Hostname": h,
        "gpu": str(index),
        "UUID": f"GPU-{zlib.crc32(h.encode()):08x}-{index:04d}",
        "modelName": "NVIDIA H100 80GB HBM3",
        "device": f"nvidia{index}",
    }


def _dcgm(dcgm: dict[str, str], g: Gauge, params: Callable[[dict[str, float], float], dict]) -> list[Series]:
    """One GPU's DCGM fields (default counters plus throttle reasons); `params` picks the values it sees."""

    def v(key: str, amp: float = 0.03, hi: float = math.inf) -> Callable[[dict[str, float], float], float]:
        inner = g(key, amp, hi=hi)
        return lambda p, t: inner(params(p, t), t)

    return [
        Series("DCGM_FI_DEV_GPU_UTIL", dcgm, gauge=v("gpu_util", 0.03, hi=100)),
        Series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", dcgm, gauge=lambda p, t: params(p, t)["gpu_util"] / 100),
        Series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", dcgm, gauge=v("tensor_active", 0.03, hi=1)),
        Series("DCGM_FI_PROF_DRAM_ACTIVE", dcgm, gauge=v("dram_active", 0.03, hi=1)),
        Series("DCGM_FI_DEV_MEM_COPY_UTIL", dcgm, gauge=lambda p, t: 100 * min(1.0, v("dram_active", 0.03)(p, t))),
        Series("DCGM_FI_PROF_PCIE_TX_BYTES", dcgm, gauge=v("pcie_bytes", 0.05)),
        Series("DCGM_FI_PROF_PCIE_RX_BYTES", dcgm, gauge=v("pcie_bytes", 0.05)),
        *_pcie_throughput_counters(dcgm, v),
        Series("DCGM_FI_DEV_SM_CLOCK", dcgm, gauge=v("sm_clock", 0.005)),
        Series("DCGM_FI_DEV_GPU_TEMP", dcgm, gauge=v("gpu_temp", 0.02)),
        Series("DCGM_FI_DEV_XID_ERRORS", dcgm, gauge=lambda p, t: params(p, t)["xid"]),
        Series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", dcgm, gauge=lambda p, t: round(params(p, t)["throttle"])),
    ]


def host_series(host: Host) -> list[Series]:
    """Every series one host exposes: its serving engine, DCGM, node_exporter and cAdvisor."""
    h = host.name
    dcgm = _dcgm_labels(host, 0)
    node = {"job": "node", "instance": f"{address('node', h)}:9100" if host.addresses else h}

    def g(key: str, amp: float = 0.03, lo: float = 0.0, hi: float = math.inf) -> Callable:
        return lambda p, t: min(hi, max(lo, p[key] * (1 + _noise(f"{h}:{key}", t, amp))))

    serving = SERVING[host.stack]
    series = serving(h, g, host.port) if host.port else serving(h, g)
    if "serving" not in host.exporters:
        series = []
    elif host.stack in LORA_STACKS:
        series += _lora_info(host, series[0].labels)
    if host.pod:
        for s in series:
            s.labels = s.labels | {"namespace": NAMESPACE, "pod": host.pod}
            if host.addresses:
                s.labels["instance"] = s.labels["instance"].replace(h, address("pod", h), 1)
    if host.addresses:
        series.append(Series("node_uname_info", node | {"nodename": h, "sysname": "Linux"}, gauge=lambda p, t: 1.0))
    if host.addresses and host.pod:
        series.append(
            Series(
                "kube_pod_info",
                {
                    "job": "kube-state-metrics",
                    "instance": "10.96.0.20:8080",
                    "namespace": NAMESPACE,
                    "pod": host.pod,
                    "node": h,
                    "host_ip": address("node", h),
                    "pod_ip": address("pod", h),
                },
                gauge=lambda p, t: 1.0,
            )
        )
    if host.image and host.pod:
        series += _kube_state(host)
    if series and (host.engine_flags or host.started is not None):
        series += _engine_info(host, series[0].labels)
    if "cadvisor" in host.exporters and host.pod:
        # The engine container has a quota of len(PINNED) cores and keeps them `pinned_busy` busy.
        # The pod-level cgroup (container="") repeats the usage, as cAdvisor does; queries drop it.
        pod = {"job": "cadvisor", "instance": f"{h}:10250", "namespace": NAMESPACE, "pod": host.pod}
        engine = pod | {"container": "vllm"}

        def usage(p: dict[str, float], t: float) -> float:
            return len(PINNED) * min(1.0, p["pinned_busy"] * (1 + _noise(f"{h}:cadvisor", t, 0.03)))

        def throttled(p: dict[str, float], t: float) -> float:
            return CFS_PERIODS_PER_SECOND * min(1.0, p["throttled"] * (1 + _noise(f"{h}:throttled", t, 0.05)))

        series += [
            Series("container_cpu_usage_seconds_total", engine | {"cpu": "total"}, rate=usage),
            Series("container_cpu_usage_seconds_total", pod | {"container": "", "cpu": "total"}, rate=usage),
            Series("container_spec_cpu_quota", engine, gauge=lambda p, t: 100000.0 * len(PINNED)),
            Series("container_spec_cpu_period", engine, gauge=lambda p, t: 100000.0),
            Series("container_cpu_cfs_periods_total", engine, rate=lambda p, t: CFS_PERIODS_PER_SECOND),
            Series("container_cpu_cfs_throttled_periods_total", engine, rate=throttled),
            Series(
                "container_cpu_cfs_throttled_seconds_total",
                engine,
                rate=lambda p, t: len(PINNED) * THROTTLED_STALL * throttled(p, t) / CFS_PERIODS_PER_SECOND,
            ),
        ]
    if "dcgm_basic" in host.exporters:
        # dcgm-exporter without profiling (DCP) fields, e.g. on GPUs without DCP support: only
        # device-level gauges, with memory-interface load as DCGM_FI_DEV_MEM_COPY_UTIL percent.
        series += [
            Series("DCGM_FI_DEV_GPU_UTIL", dcgm, gauge=g("gpu_util", 0.03, hi=100)),
            Series("DCGM_FI_DEV_MEM_COPY_UTIL", dcgm, gauge=lambda p, t: 100 * min(1.0, g("dram_active", 0.03)(p, t))),
            Series("DCGM_FI_DEV_SM_CLOCK", dcgm, gauge=g("sm_clock", 0.005)),
            Series("DCGM_FI_DEV_GPU_TEMP", dcgm, gauge=g("gpu_temp", 0.02)),
            Series("DCGM_FI_DEV_XID_ERRORS", dcgm, gauge=lambda p, t: p["xid"]),
            *_pcie_throughput_counters(dcgm, g),
        ]
    if "dcgm" in host.exporters:
        healthy = replace(host, fault=None, extra=())
        series += _dcgm(dcgm, g, lambda p, t: p)
        for index in range(1, host.gpus):
            series += _dcgm(_dcgm_labels(host, index), g, lambda p, t: healthy.params(t))
    if "process" in host.exporters:
        # process-exporter's group for the engine (the name is the operator's choice; matched by
        # engine name, case-insensitively): user + system CPU of the processes pinned to PINNED.
        proc = {"job": "process", "instance": f"{node['instance'].split(':')[0]}:9256", "groupname": "vLLM-engine"}
        busy = g("pinned_busy", 0.03, hi=1.0)
        for mode, share in (("user", 0.85), ("system", 0.15)):
            series.append(
                Series(
                    "namedprocess_namegroup_cpu_seconds_total",
                    proc | {"mode": mode},
                    rate=lambda p, t, share=share: share * len(PINNED) * busy(p, t),
                )
            )
    if "node" in host.exporters:
        numa_misses = g("numa_miss", 0.1)
        half_numa_misses = lambda p, t: numa_misses(p, t) / 2  # noqa: E731
        series += [
            Series("node_context_switches_total", node, rate=g("ctx_switches", 0.05)),
            # meminfo_numa per NUMA node: a miss on one node is a foreign allocation of the other.
            *(
                Series(f"node_memory_numa_numa_{kind}_total", node | {"node": numa}, rate=half_numa_misses)
                for numa in ("0", "1")
                for kind in ("miss", "foreign")
            ),
        ]
    for cpu in range(CPUS if "node" in host.exporters else 0):
        busy_key = "pinned_busy" if cpu in PINNED else "other_busy"
        busy = g(busy_key, 0.03, hi=1.0)
        labels = node | {"cpu": str(cpu)}
        idle = lambda p, t, b=busy: 1 - b(p, t)  # noqa: E731
        series.append(Series("node_cpu_seconds_total", labels | {"mode": "idle"}, rate=idle))
        series.append(Series("node_cpu_seconds_total", labels | {"mode": "user"}, rate=busy))
        if cpu in PINNED and host.isolcpus:
            series.append(Series("node_cpu_isolated", labels, gauge=lambda p, t: 1.0))
    series = [s for s in series if s.name not in host.dropped and metric_family(s.name) not in host.dropped]
    for s in series:
        s.host = host
    return series


def _engine_info(host: Host, engine: dict[str, str]) -> list[Series]:
    """The engine's own info series under its scrape labels: its cache flags
    (`vllm:cache_config_info`) and its process' start (prometheus_client's)."""
    labels = {"job": engine["job"], "instance": engine["instance"]}
    series = []
    if host.engine_flags:
        series.append(Series("vllm:cache_config_info", labels | dict(host.engine_flags), gauge=lambda p, t: 1.0))
    if host.started is not None:
        started = host.started
        series.append(Series("process_start_time_seconds", labels, stamp=lambda t, start: started))
    return series


def _kube_state(host: Host) -> list[Series]:
    """kube-state-metrics' series of the host's pod: its container's image, its node (unless
    `addresses` exports kube_pod_info already) and that node's labels, its start time."""
    assert host.image and host.pod
    ksm = {"job": "kube-state-metrics", "instance": "10.96.0.20:8080"}
    pod = ksm | {"namespace": NAMESPACE, "pod": host.pod}
    one = lambda p, t: 1.0  # noqa: E731 (an info series)
    container = pod | {"container": "vllm", "image": host.image, "image_id": f"docker-pullable://{host.image}"}
    series = [Series("kube_pod_container_info", container, gauge=one)]
    if not host.addresses:
        series.append(Series("kube_pod_info", pod | {"node": host.name}, gauge=one))
    labels = {f"label_{name}": value for name, value in host.node_labels}
    series.append(Series("kube_node_labels", ksm | {"node": host.name} | labels, gauge=one))
    if host.started is not None:
        started = host.started
        series.append(Series("kube_pod_start_time", pod, stamp=lambda t, start: started))
    return series


def _lora_info(host: Host, engine: dict[str, str]) -> list[Series]:
    """`vllm:lora_requests_info` (tests/e2e/lora.py) under the engine's scrape labels (it has no
    `model_name`): every label set the host's budget allows, each exported once first set."""
    labels = {"job": engine["job"], "instance": engine["instance"]}
    budget = round(host.params(host.onset)["max_loras"])
    if budget < 1:  # V0 sets its LoRA-off label set every iteration; V1 exports nothing without LoRA
        off = labels | dict(zip(LABEL_NAMES, LORA_OFF, strict=True))
        return [Series("vllm:lora_requests_info", off, stamp=lambda t, start: t)] if host.stack == "vllm_v0" else []
    clock = LastSet(host.params, GRID_SECONDS)
    return [
        Series(
            "vllm:lora_requests_info",
            labels | dict(zip(LABEL_NAMES, label_set, strict=True)),
            stamp=lambda t, start, label_set=label_set: clock.value(label_set, t, start),
        )
        for label_set in label_sets(budget)
    ]


def metric_family(name: str) -> str:
    """A histogram's family name (`x` of `x_bucket`, `x_count`, `x_sum`); other names unchanged."""
    for suffix in ("_bucket", "_count", "_sum"):
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


@dataclass
class Fleet:
    """A set of hosts sharing one Prometheus; `start` is where counters begin."""

    hosts: list[Host]
    start: float
    series: list[Series] = field(init=False)

    def __post_init__(self) -> None:
        self.series = [s for host in self.hosts for s in host_series(host)]

    def openmetrics(self, end: float, step: float = 15.0) -> Iterator[str]:
        """History [start, end) for backfilling; one series at a time, times ascending."""
        for s in self.series:
            t = self.start
            while t < end:
                if (value := s.sample(t, self.start)) is not None:
                    yield f"{s.key} {value} {t:.3f}\n"
                t += step
        yield "# EOF\n"

    def exposition(self, now: float) -> str:
        """The live scrape: current values in the Prometheus text format (labels included)."""
        return "".join(f"{s.key} {value}\n" for s in self.series if (value := s.sample(now, self.start)) is not None)


class Exporter(LoopbackServer):
    """Serve a fleet's live values on a loopback port (scraped with `honor_labels: true`)."""

    def __init__(self, fleet: Fleet, clock: Callable[[], float]) -> None:
        fleet_ref, lock = fleet, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                with lock:
                    body = fleet_ref.exposition(clock()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(Handler, name="fleet-exporter")
