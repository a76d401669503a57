"""Generated worlds: one serving host with a known root cause (or none), drawn from a seed.

Each world draws what a fleet nobody tuned the ranking to would show: the serving stack, the
host's own healthy levels and load, the cause and how hard it hits (severity), how fast it ramps,
when it began and how long before the investigation the alert fired, sample noise, red herrings
(values that move at onset without being a cause), a chronic background breach, exporters that are
missing and series an operator's keep-list dropped. Causes change what the engine is given
(`tests.worlds.engine`); what the exporters then show follows from the engine's relations, so a
surge fills the KV cache and KV pressure preempts and evicts prefixes without being told to.

Seeds are the split: `TUNING_SEEDS` may be looked at while changing the taxonomy or the signals;
`HELD_OUT_SEEDS` are only ever reported (bench/diagnosis_worlds.py, docs/diagnosis.md).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tests.e2e.scenarios import EXPORTERS, LORA_STACKS, Host, host_series
from tests.worlds.engine import Given, Timeline, blend, changes, simulate

TUNING_SEEDS = range(0, 100_000)
HELD_OUT_SEEDS = range(1_000_000, 1_100_000)
HEALTHY = "no_clear_cause"
WINDOW_SECONDS = 3 * 3600
GRID_SECONDS = 15.0
SERVING_JOBS = frozenset({"vllm", "sglang", "tgi", "triton"})  # the engines' own exporters
# The SLA alert: a latency at this multiple of the host's healthy level, held for the rule's `for:`.
ALERT_FACTOR = {"ttft": 1.5, "itl": 1.3}
ALERT_FOR_SECONDS = (60.0, 300.0)
ALERT_RATE_LAG = 150.0  # the rule's quantile is over a 5-minute rate, which lags by half of it
INVESTIGATED_AFTER_ALERT_SECONDS = (30.0, 20 * 60.0)
MAX_REDRAWS = 12
STACKS = ("vllm_v1", "vllm_v0", "vllm_v08", "sglang", "tgi", "triton", "triton_trtllm")
# LoRA: every host of the LoRA cause serves adapters, and this share of the other vLLM hosts; the
# adapters in use fit the budget (--max-loras), and fill it exactly on some.
LORA_SHARE = 0.25
LORA_BUDGETS = (1, 2, 4, 8)

Draw = Callable[[random.Random, Given, float], Given]  # (rng, healthy, severity 0..1) -> given once it hit


def _lerp(low: float, high: float, severity: float) -> float:
    """A magnitude between the mildest that still presents the cause and the hardest."""
    return low + (high - low) * severity


def _surge(r: random.Random, g: Given, s: float) -> Given:
    return replace(g, arrival_rate=g.arrival_rate * _lerp(1.6, 4.0, s))


def _settled(g: Given) -> dict[str, float]:
    return simulate([g] * 40, 0.0, GRID_SECONDS).values[-1]


def _kv(r: random.Random, g: Given, s: float) -> Given:
    """The cache overflows: less memory for it, or longer generations holding blocks longer, by
    as much as it takes to preempt (the output variant searches the length that does)."""
    healthy = _settled(g)
    smaller = replace(g, kv_capacity=g.kv_capacity * healthy["kv_usage"] / _lerp(1.05, 1.5, s))
    if r.random() < 0.5:
        return smaller
    wanted = _lerp(0.05, 0.5, s) * healthy["arrival_rate"]
    low, high = 1.0, 12.0
    if _settled(replace(g, output_len=g.output_len * high))["preempt_rate"] < wanted:
        return smaller  # the batch limit binds before the cache: longer outputs only queue
    for _ in range(20):
        mid = (low + high) / 2
        low, high = (
            (low, mid) if _settled(replace(g, output_len=g.output_len * mid))["preempt_rate"] >= wanted else (mid, high)
        )
    return replace(g, output_len=g.output_len * high)


def _prefix(r: random.Random, g: Given, s: float) -> Given:
    return replace(g, hit_rate=_lerp(0.45, 0.05, s))


def _prefill(r: random.Random, g: Given, s: float) -> Given:
    return replace(g, prompt_len=g.prompt_len * _lerp(2.5, 6.0, s), hit_rate=g.hit_rate * _lerp(0.8, 0.4, s))


def _batching(r: random.Random, g: Given, s: float) -> Given:
    if r.random() < 0.5:  # max-num-seqs / preferred batch far below what the load needs
        running = _settled(g)["running"]
        return replace(g, max_batch=max(2.0, running * _lerp(0.5, 0.12, s)))
    return replace(g, batch_delay=_lerp(0.1, 0.6, s))  # a queue delay that holds requests for a batch


def _launch(r: random.Random, g: Given, s: float) -> Given:
    return replace(g, cpu_overhead=g.cpu_overhead * _lerp(3.0, 6.0, s))


def _numa(r: random.Random, g: Given, s: float) -> Given:
    return replace(g, unpinned=_lerp(0.5, 1.0, s))


def _quota(r: random.Random, g: Given, s: float) -> Given:
    return replace(g, cpu_throttled=_lerp(0.3, 0.8, s))


def _sync(r: random.Random, g: Given, s: float) -> Given:
    return replace(g, host_copies=_lerp(3.0, 8.0, s), cpu_overhead=g.cpu_overhead * 1.3)


def _lora(r: random.Random, g: Given, s: float) -> Given:
    """The traffic asks for more adapters than the budget holds: the others' requests wait for a
    slot, and adapters load on the request path."""
    return replace(
        g,
        deferred=_lerp(2.0, 10.0, s),
        adapter_load_seconds=_lerp(0.2, 1.0, s),
        adapters=math.ceil(g.max_loras * _lerp(1.5, 3.0, s)),
    )


def _bandwidth(r: random.Random, g: Given, s: float) -> Given:
    return replace(g, bandwidth_stall=_lerp(0.4, 1.2, s))


def _gpu(r: random.Random, g: Given, s: float) -> Given:
    kind = r.choice(["thermal", "xid", "clock"])
    if kind == "thermal":
        return replace(g, gpu_temp=_lerp(88, 96, s), throttle_reasons=r.choice([0x20, 0x40]), speed=_lerp(0.8, 0.55, s))
    if kind == "xid":
        return replace(g, xid=r.choice([48.0, 63.0, 79.0]), speed=_lerp(0.9, 0.7, s))
    return replace(g, speed=_lerp(0.8, 0.5, s), throttle_reasons=0x8)


CAUSES: dict[str, Draw] = {
    "arrival_surge": _surge,
    "kv_memory_pressure": _kv,
    "prefix_cache_miss": _prefix,
    "prefill_blocking": _prefill,
    "batching_misconfig": _batching,
    "cpu_launch_overhead": _launch,
    "cpu_affinity_numa": _numa,
    "cpu_quota_throttling": _quota,
    "host_device_sync": _sync,
    "lora_adapter_loading": _lora,
    "memory_bandwidth_bound": _bandwidth,
    "gpu_degraded": _gpu,
}
# What a cause needs to be seen at all: the exporters (and stacks) its own evidence comes from.
NEEDS: dict[str, dict[str, Any]] = {
    "cpu_quota_throttling": {"exporters": {"cadvisor"}},
    "cpu_affinity_numa": {"exporters": {"node"}},
    "cpu_launch_overhead": {"exporters": {"node"}},
    "host_device_sync": {"exporters": {"dcgm"}},
    "memory_bandwidth_bound": {"exporters": {"dcgm"}},
    "gpu_degraded": {"exporters": {"dcgm"}},
    # vLLM 0.34 counts deferred requests; older V1 and V0 show them in lora_requests_info.
    "lora_adapter_loading": {"stacks": LORA_STACKS},
    # Prompt lengths are exported by vLLM, SGLang and TGI (the test exporters' Triton has none).
    "prefill_blocking": {"stacks": {"vllm_v1", "vllm_v0", "vllm_v08", "sglang", "tgi"}},
    # Requests held while the GPU idles: GPU activity, and a queue-time or TTFT histogram.
    "batching_misconfig": {
        "exporters": {"dcgm"},
        "stacks": {"vllm_v1", "vllm_v0", "vllm_v08", "sglang", "tgi", "triton"},
    },
    "prefix_cache_miss": {"stacks": {"vllm_v1", "vllm_v0", "vllm_v08", "sglang"}},
    "kv_memory_pressure": {"stacks": {"vllm_v1", "vllm_v0", "vllm_v08", "sglang", "triton", "triton_trtllm"}},
}
# Serving series a keep-list may drop, per stack: only ones a signal has another source for.
DROPPABLE: dict[str, list[str]] = {
    "vllm_v1": [
        "vllm:request_success_total",
        "vllm:num_requests_waiting",
        "vllm:prefix_cache_hits_total",
        "vllm:num_requests_running",
        "vllm:num_preemptions_total",
    ],
    "vllm_v0": ["vllm:request_success_total", "vllm:time_per_output_token_seconds", "vllm:num_requests_waiting"],
    "vllm_v08": ["vllm:request_success_total", "vllm:num_requests_waiting"],
    "sglang": ["sglang:e2e_request_latency_seconds", "sglang:prefill_effective_tokens_total", "sglang:num_queue_reqs"],
    "tgi": ["tgi_request_count_total", "tgi_queue_size"],
    "triton": ["nv_inference_request_success", "nv_inference_pending_request_count"],
    "triton_trtllm": ["nv_inference_request_success"],
}


@dataclass(frozen=True)
class GeneratedHost(Host):
    """A host whose exporters follow a simulated engine rather than scenarios' fixed FAULTS."""

    faulty: Timeline | None = None
    healthy: Timeline | None = None
    herrings: tuple[tuple[str, float], ...] = ()  # observed values multiplied by this factor after onset

    def params(self, t: float) -> dict[str, float]:
        timeline = self.faulty if self.fault is not None and self.faulty is not None else self.healthy
        assert timeline is not None
        values = timeline.at(t)
        if self.herrings and t > self.onset:
            share = min(1.0, (t - self.onset) / self.ramp)
            values = dict(values)
            for key, factor in self.herrings:
                values[key] *= 1 + (factor - 1) * share
        return values


@dataclass
class World:
    seed: int
    cause: str  # the expected answer; HEALTHY for the controls
    host: GeneratedHost
    now: float
    alert_start: float
    severity: float  # where in its magnitude range the cause hit (0 mildest, 1 hardest)
    busy: bool  # a healthy but busy host (controls only)
    notes: list[str] = field(default_factory=list)

    @property
    def minutes_since_onset(self) -> float:
        return (self.now - self.host.onset) / 60

    @property
    def alert(self) -> dict[str, str]:
        """The labels of the SLA alert that fired for this host."""
        # The alert's labels are the serving series' own: their instance, and their pod when it runs in one.
        serving = next(s for s in host_series(self.host) if s.labels.get("job") in SERVING_JOBS)
        scope = {k: v for k, v in serving.labels.items() if k in ("instance", "namespace", "pod")}
        return {"alertname": "LLMTimeToFirstTokenHigh", **scope}


def _lora_setup(seed: int, stack: str, cause: str) -> dict[str, float]:
    """The host's LoRA budget and adapters in use (none: LoRA off), drawn apart from the world's
    other draws so that those stay what they were."""
    r = random.Random(f"lora:{seed}")
    if stack not in LORA_STACKS or (cause != "lora_adapter_loading" and r.random() >= LORA_SHARE):
        return {}
    budget = r.choice(LORA_BUDGETS)
    return {"max_loras": float(budget), "adapters": float(r.randint(1, budget))}


def _healthy_given(r: random.Random, busy: bool, load: tuple[float, float] = (0.3, 0.75)) -> Given:
    """The host's own healthy levels: load, prompt and output lengths, cache, memory."""
    prompt = r.uniform(300, 2500)
    output = r.uniform(120, 400)
    hit = r.uniform(0.62, 0.92)
    base = Given(arrival_rate=1.0, prompt_len=prompt, output_len=output, hit_rate=hit)
    kv_share = r.uniform(0.3, 0.7)  # how full the healthy cache runs
    base = replace(base, kv_capacity=r.uniform(40_000, 160_000))
    # Scale the demand to a target load, then size the cache to run `kv_share` full.
    target = r.uniform(0.86, 0.93) if busy else r.uniform(*load)
    rate = _rate_for_load(base, target)
    given = replace(base, arrival_rate=rate)
    running = simulate([given] * 40, 0.0, GRID_SECONDS).values[-1]["running"]
    tokens = given.prompt_len * (1 - 0.5 * given.hit_rate) + given.output_len / 2
    return replace(given, kv_capacity=max(running * tokens / kv_share, tokens * 8))


def _rate_for_load(given: Given, load: float) -> float:
    """The arrival rate at which the engine runs at `load` of its capacity (bisection)."""
    low, high = 0.05, 500.0
    for _ in range(40):
        mid = (low + high) / 2
        observed = simulate([replace(given, arrival_rate=mid)] * 40, 0.0, GRID_SECONDS).values[-1]
        if observed["waiting"] > 0.3 + load**4 / (1 - load) + 0.05 or observed["arrival_rate"] < mid * 0.999:
            high = mid
        else:
            low = mid
    return low


def _alert_delay(base: Given, target: Given, ramp: float, hold: float) -> float | None:
    """Seconds from onset until the SLA alert fires: TTFT or inter-token latency at its
    ALERT_FACTOR times the host's own healthy level, as the rule's 5-minute rate sees it (late by
    ALERT_RATE_LAG), held for the rule's `for:` (None: not within an hour)."""
    healthy = _settled(base)
    moments = [blend(base, target, min(1.0, i * GRID_SECONDS / ramp)) for i in range(int(3600 / GRID_SECONDS))]
    held_since: float | None = None
    for i, values in enumerate(simulate([base] * 40 + moments, 0.0, GRID_SECONDS).values[40:]):
        t = i * GRID_SECONDS
        if any(values[key] >= factor * healthy[key] for key, factor in ALERT_FACTOR.items()):
            held_since = t if held_since is None else held_since
            if t - held_since >= hold:
                return t + ALERT_RATE_LAG
        else:
            held_since = None
    return None


def _timeline(given_at: Callable[[float], Given], start: float, end: float) -> Timeline:
    times = [start + i * GRID_SECONDS for i in range(int((end - start) // GRID_SECONDS) + 2)]
    return simulate([given_at(t) for t in times], start, GRID_SECONDS)


def draw(seed: int, now: float, cause: str | None = None) -> World:
    """The world of `seed`, its window ending at `now` (unix seconds). `cause` forces the cause
    (None: drawn, with one world in eight a healthy control)."""
    r = random.Random(seed)
    if cause is None:
        cause = HEALTHY if r.random() < 1 / 8 else r.choice(sorted(CAUSES))
    needs = NEEDS.get(cause, {})
    stack = r.choice(sorted(needs.get("stacks", STACKS)))
    exporters = set(EXPORTERS)
    notes: list[str] = [f"stack {stack}"]
    if r.random() < 0.4:
        exporters.add("cadvisor")
    if r.random() < 0.3:
        exporters.add("process")
    for optional, share in (("dcgm", 0.12), ("node", 0.1)):
        if optional not in needs.get("exporters", set()) and r.random() < share:
            exporters.discard(optional)
            notes.append(f"no {optional} exporter")
    exporters |= needs.get("exporters", set())
    if "cadvisor" in exporters:
        notes.append("in a pod with cAdvisor")
    busy = cause == HEALTHY and r.random() < 0.4
    lora = _lora_setup(seed, stack, cause)
    if lora:
        notes.append(f"LoRA budget {lora['max_loras']:.0f}, {lora['adapters']:.0f} adapters in use")
    healthy = replace(_healthy_given(r, busy), **lora)
    severity = r.random()
    ramp = r.uniform(30, 600)
    chronic: Given | None = None
    if r.random() < 0.15:  # something was off before the window and stays so: not this incident's cause
        chronic = _chronic(healthy)
        notes.append("chronic CPU load")
    base = chronic or healthy
    alert_for = r.uniform(*ALERT_FOR_SECONDS)
    if cause == HEALTHY:
        # A control's alert fired for a reason outside the host (a client's own timeout, a probe).
        faulty_given = healthy
        onset = now - r.uniform(6, 45) * 60
        alert_start = onset + r.uniform(1, 4) * 60
    else:
        # The SLA alert fires only once the fault shows in a latency the host is alerted on; a fault
        # too mild to ever show raises no alert, so no incident: draw it again, harder, and on a host
        # that runs nearer its capacity when even the hardest does not show on this one.
        for attempt in range(MAX_REDRAWS):
            if attempt and attempt % 4 == 0:
                healthy = replace(_healthy_given(r, busy=False, load=(0.75, 0.85)), **lora)
                chronic = chronic and _chronic(healthy)
                base = chronic or healthy
                severity = r.random()
            faulty_given = CAUSES[cause](r, healthy, severity)
            target = faulty_given if chronic is None else _merge(chronic, healthy, faulty_given)
            delay = _alert_delay(base, target, ramp, alert_for)
            if delay is not None:
                break
            severity = r.uniform(severity, 1.0)
        else:
            raise AssertionError(f"seed {seed}: {cause} never shows in a latency even at its hardest")
        # The investigation runs when Alertmanager calls, or at a later re-send of the group.
        onset = now - delay - r.uniform(*INVESTIGATED_AFTER_ALERT_SECONDS)
        alert_start = onset + delay

    def given_at(t: float, faulty: bool = True) -> Given:
        if not faulty or t <= onset:
            return base
        target = faulty_given if chronic is None else _merge(chronic, healthy, faulty_given)
        return blend(base, target, min(1.0, (t - onset) / ramp))

    start = now - WINDOW_SECONDS - 3600
    faulty_timeline = _timeline(given_at, start, now + 120)
    healthy_timeline = _timeline(lambda t: given_at(t, faulty=False), start, now + 120)
    herrings: list[tuple[str, float]] = []
    if r.random() < 0.35:
        key, low, high = r.choice(
            [("gpu_temp", 1.05, 1.25), ("pcie_bytes", 1.2, 1.8), ("other_busy", 1.3, 2.5), ("ctx_switches", 1.1, 1.4)]
        )
        herrings.append((key, r.uniform(low, high)))
        notes.append(f"red herring {key}")
    dropped: set[str] = set()
    if DROPPABLE[stack] and r.random() < 0.3:
        dropped.add(r.choice(DROPPABLE[stack]))
        notes.append(f"keep-list drops {', '.join(sorted(dropped))}")
    host = GeneratedHost(
        name=f"gen-{seed}",
        fault=None if cause == HEALTHY else cause,
        onset=onset,
        stack=stack,
        exporters=frozenset(exporters),
        pod=f"engine-{seed}" if "cadvisor" in exporters else None,
        ramp=ramp,
        severity=severity,
        dropped=frozenset(dropped),
        faulty=faulty_timeline,
        healthy=healthy_timeline,
        herrings=tuple(herrings),
    )
    if busy:
        notes.append("healthy but busy")
    return World(seed, cause, host, now, alert_start, severity, busy, notes)


def _chronic(healthy: Given) -> Given:
    """A CPU load that was there before the window and stays: launches cost 2.5 times more."""
    return replace(healthy, cpu_overhead=healthy.cpu_overhead * 2.5)


def _merge(chronic: Given, healthy: Given, faulty: Given) -> Given:
    """The fault's changes applied on top of a chronic condition."""
    return replace(chronic, **changes(healthy, faulty))
