"""A serving engine as a small physical model: what it is given (demand, prompts, cache, batch
limits, GPU and CPU health) determines everything its exporters show, through the relations below.
A cause changes what the engine is given; its consequences are never written in by hand, so a
surge fills the KV cache because more requests run at once, not because a table says so.

Relations (per moment; the queue is integrated over time, everything else is quasi-static):

- Prefill work per request: `prompt_len * (1 - hit_rate)` tokens at `PREFILL_TOKENS_PER_SECOND * speed`.
- Decode step time: `STEP_SECONDS * (1 + BATCH_COST * running)` on the GPU, stretched by memory
  stalls (`1 + bandwidth_stall`) and divided by `speed`, plus the CPU's launch time per step
  (`CPU_STEP_SECONDS * cpu_overhead`, more when the CPU is throttled or threads migrate), plus
  the step's host synchronisation (`SYNC_SECONDS * host_copies`: the GPU waits on host-side copies)
  and, for threads that migrate, `MIGRATION_SECONDS * unpinned` of descheduling (a migrated thread
  waits for a core and refills its caches from remote memory).
- Prefills interrupt decode (no chunked prefill): ITL = step / (1 - prefill share of GPU time).
- Requests that fit: `kv_capacity / tokens per request` (the prompt, its cached share counted
  half as it is shared, plus half the output on average), and never more than `max_batch`.
- Capacity = requests that fit / time per request; offered load = arrival rate / capacity.
- Below capacity the queue is short (`QUEUE_BASE + ρ^4 / (1 - ρ)`); above it, it grows by the
  excess arrivals, up to `MAX_WAITING` (clients time out). A batching delay holds arrivals for it
  (Little's law: `arrival rate * delay` more waiting), while the GPU idles for it.
- Queue time = waiting / throughput (Little's law), the requests held for a LoRA budget included:
  they wait in the same queue, and vLLM's queue time runs from arrival to first scheduling;
  TTFT = queue time + prefill + one step.
- A queue at `MAX_WAITING` loses the excess arrivals: their clients give up, and the engine
  finishes them as aborted (vLLM counts them in `request_success_total{finished_reason="abort"}`,
  TGI's router counts every request it received); latency histograms see only the served ones.
- KV usage = running requests' tokens / capacity; demand beyond `PREEMPT_AT` preempts requests and
  evicts cached prefixes (the hit rate falls with the overflow).
- GPU utilisation = busy share of time (load, less CPU launch gaps and batching holds); tensor
  activity follows it, DRAM activity follows it times the memory-boundness.
- LoRA: the traffic asks for `adapters` distinct adapters, at most `max_loras` run at once; the
  requests of adapters beyond a full budget wait for a slot (`deferred`, among the waiting). What
  vLLM's `lora_requests_info` then shows is in tests/e2e/lora.py.
- The pinned cores are busy with scheduling (more with load) and with launching each step's
  kernels (the CPU share of a step, which eager mode makes most of it), and with host-side copies;
  context switches and NUMA misses follow load, far more when threads are unpinned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

PREFILL_TOKENS_PER_SECOND = 20_000.0
STEP_SECONDS = 0.012
BATCH_COST = 0.01
CPU_STEP_SECONDS = 0.002
QUEUE_BASE = 0.3
MAX_WAITING = 250.0
PREEMPT_AT = 0.97
SYNC_SECONDS = 0.002
MIGRATION_SECONDS = 0.006
CLOCK_MHZ = 1980.0
PCIE_BYTES = 2.0e8


@dataclass(frozen=True)
class Given:
    """What the engine is given at a moment; causes change these."""

    arrival_rate: float  # requests per second
    prompt_len: float  # median prompt tokens
    output_len: float = 200.0  # median generated tokens
    hit_rate: float = 0.78  # share of prompt tokens a healthy prefix cache serves
    kv_capacity: float = 70_000.0  # tokens
    max_batch: float = 256.0  # vLLM's default max-num-seqs
    batch_delay: float = 0.0  # seconds a request is held for batching
    speed: float = 1.0  # GPU speed (clock drop, degraded GPU)
    bandwidth_stall: float = 0.0  # extra decode time from memory-bound kernels (0.5 = 50 %)
    cpu_overhead: float = 1.0  # CPU launch time per step, relative (eager mode: 4x)
    cpu_throttled: float = 0.02  # share of CFS periods throttled
    unpinned: float = 0.0  # 0..1, threads migrating across cores and NUMA nodes
    host_copies: float = 0.0  # extra host<->device traffic per request (host-side KV handling), relative
    deferred: float = 0.0  # requests waiting for a LoRA or KV-transfer budget
    max_loras: float = 0.0  # LoRA adapters that run at once (--max-loras); 0: LoRA off
    adapters: float = 0.0  # distinct LoRA adapters the traffic asks for
    adapter_load_seconds: float = 0.0  # adapter loads on the request path
    gpu_temp: float = 62.0
    throttle_reasons: float = 0.0
    xid: float = 0.0


def observe(given: Given, queue_before: float, dt: float) -> tuple[dict[str, float], float]:
    """The exporters' view of the engine (keys of tests/e2e/scenarios.BASELINE), given the
    capacity queue a moment `dt` seconds ago; also returns the queue now, for the next moment."""
    g = given
    throttle = 1 + 3 * max(0.0, g.cpu_throttled - 0.05)  # throttled CPU stretches every launch
    cpu_step = (
        CPU_STEP_SECONDS * g.cpu_overhead * throttle * (1 + 0.8 * g.unpinned)
        + SYNC_SECONDS * g.host_copies
        + MIGRATION_SECONDS * g.unpinned
    )
    prefill_tokens = g.prompt_len * (1 - g.hit_rate)
    prefill_seconds = prefill_tokens / (PREFILL_TOKENS_PER_SECOND * g.speed)
    tokens_per_request = g.prompt_len * (1 - 0.5 * g.hit_rate) + g.output_len / 2  # shared prefixes count once
    fit = min(g.max_batch, g.kv_capacity / tokens_per_request)

    def step(running: float) -> float:
        return STEP_SECONDS * (1 + BATCH_COST * running) * (1 + g.bandwidth_stall) / g.speed + cpu_step

    def service(running: float) -> float:
        return prefill_seconds + g.output_len * step(running) + g.adapter_load_seconds * 0.2

    capacity = fit / service(fit)
    load = g.arrival_rate / capacity
    if load < 0.98 and queue_before <= 2 * QUEUE_BASE + load**4 / (1 - load) + 1:
        queue = QUEUE_BASE + load**4 / (1 - load)
    else:  # overloaded: the queue integrates the excess, and drains at the spare capacity
        queue = min(MAX_WAITING, max(QUEUE_BASE, queue_before + (g.arrival_rate - capacity) * dt))
    waiting = queue + g.arrival_rate * g.batch_delay + g.deferred  # held for a batch or a budget too
    throughput = min(g.arrival_rate, capacity)
    # With the queue at its limit, clients give up: those requests finish as aborted.
    aborted = max(0.0, g.arrival_rate - capacity) if waiting >= MAX_WAITING else 0.0
    wanted = fit  # requests that would run at once if nothing limited them (Little's law, a fixed point)
    for _ in range(30):
        wanted = max(0.5, g.arrival_rate * service(min(wanted, fit)))
    running = min(fit, max(0.5, throughput * service(min(wanted, fit))))
    prefill_share = min(0.85, throughput * prefill_seconds)
    itl = step(running) / (1 - prefill_share)
    queue_time = waiting / max(throughput, 1e-3) + g.batch_delay
    # The cache holds the running requests; when the cache (not the batch limit) is what stops more
    # from running, the ones that want in press on it: preemptions, evicted prefixes.
    kv_demand = running * tokens_per_request / g.kv_capacity
    if wanted > fit and fit < g.max_batch:
        kv_demand = min(wanted, 1.5 * fit) * tokens_per_request / g.kv_capacity
    overflow = max(0.0, kv_demand - PREEMPT_AT)
    kv_usage = min(0.995, kv_demand)
    preempt_rate = throughput * min(1.0, 8 * overflow)
    hit_rate = max(0.02, g.hit_rate * (1 - min(0.6, 10 * overflow)))
    gpu_step = step(running) - cpu_step
    busy = min(0.99, throughput * service(running) / max(running, 0.5)) * (gpu_step / step(running))
    if g.batch_delay > 0:
        busy *= 1 / (1 + g.batch_delay * 10)
    busy *= min(1.0, 0.35 + running / 32)  # a small batch leaves SMs idle
    gpu_util = 100 * max(0.02, min(0.99, busy))
    intensity = 1 / (1 + g.bandwidth_stall)
    return {
        "arrival_rate": throughput,
        "waiting": waiting,
        "running": running,
        "kv_usage": kv_usage,
        "hit_rate": hit_rate,
        "preempt_rate": preempt_rate,
        "prompt_len": g.prompt_len,
        "ttft": queue_time + prefill_seconds + step(running) + g.adapter_load_seconds,
        "queue_time": max(0.005, queue_time),
        "itl": itl,
        "deferred": g.deferred,
        "gpu_util": gpu_util,
        "tensor_active": 0.55 * busy * intensity,
        "dram_active": min(0.95, 0.4 * busy * (1 + 1.2 * g.bandwidth_stall)),
        "sm_clock": CLOCK_MHZ * min(1.0, g.speed if g.speed < 1 else 1.0),
        "gpu_temp": g.gpu_temp,
        "xid": g.xid,
        "throttle": g.throttle_reasons,
        "pcie_bytes": PCIE_BYTES * (0.5 + throughput / 10) * (1 + g.host_copies),
        # The engine's main thread spins on the pinned cores: scheduling with load, and launching
        # every step's kernels, which in eager mode is most of the step.
        "pinned_busy": min(
            1.0,
            0.3
            + 0.2 * min(1.0, load)
            + 0.5 * min(1.0, 5 * cpu_step / step(running))
            + 0.08 * g.host_copies
            + 0.3 * g.unpinned,
        ),
        "other_busy": 0.15 + 0.1 * min(1.0, load),
        "ctx_switches": 9000 * (1 + min(1.0, load)) * (1 + 2.5 * g.unpinned),
        "numa_miss": 40 * (1 + min(1.0, load)) * (1 + 40 * g.unpinned),
        "throttled": g.cpu_throttled,
        "aborted": aborted,
        "max_loras": g.max_loras,
        "adapters": g.adapters,
        "kv_capacity": g.kv_capacity,
    }, queue


@dataclass
class Timeline:
    """The engine's exporters' values on a grid from `start`, every `step` seconds."""

    start: float
    step: float
    values: list[dict[str, float]]

    def at(self, t: float) -> dict[str, float]:
        index = min(len(self.values) - 1, max(0, int((t - self.start) // self.step)))
        return self.values[index]


def simulate(given_at: list[Given], start: float, step: float) -> Timeline:
    """Run the model over consecutive moments (one `Given` per grid point)."""
    values: list[dict[str, float]] = []
    queue = QUEUE_BASE
    for given in given_at:
        observed, queue = observe(given, queue, step)
        values.append(observed)
    return Timeline(start, step, values)


def changes(healthy: Given, faulty: Given) -> dict[str, float]:
    """The fields a cause changed, with their values once it hit."""
    return {
        name: getattr(faulty, name)
        for name in healthy.__dataclass_fields__
        if getattr(faulty, name) != getattr(healthy, name)
    }


def blend(healthy: Given, faulty: Given, share: float) -> Given:
    """`share` of the way from healthy to faulty, field by field (a ramp); multiplicative fields
    move geometrically, so half-way to a 4x demand is 2x."""
    if share <= 0:
        return healthy
    moved = {}
    for name, b in changes(healthy, faulty).items():
        a = getattr(healthy, name)
        moved[name] = (
            a * math.exp(math.log(b / a) * share) if a > 0 and b > 0 and name in GEOMETRIC else a + (b - a) * share
        )
    return replace(healthy, **moved)


GEOMETRIC = frozenset({"arrival_rate", "prompt_len", "output_len", "kv_capacity", "max_batch", "speed", "cpu_overhead"})
