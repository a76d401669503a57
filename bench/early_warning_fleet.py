"""A synthetic vLLM fleet for the early-warning bench: days of traffic and faults, as OpenMetrics.

Each host is a small queueing model of a vLLM V1 engine, stepped every DT seconds, and what it
exports follows from that model, not from the detector: requests arrive (Poisson, a diurnal
rate), wait in the engine's queue until a sequence slot and KV-cache room are free, are
prefilled (the tokens the prefix cache does not hold) and decoded; the decode step slows with the
batch and, once the engine's CPU work per step approaches the GPU's step time, with the CPU
(the engine is CPU-bound). TTFT is each request's wait in the queue (FIFO, from the cumulative
arrivals) plus its prefill, so TTFT p95 rises when, and because, a queue builds.

Faults change a cause and let the model play out: a growing surge (the arrival rate), KV
pressure building (longer contexts: fewer sequences fit the cache, more tokens to prefill), the
prefix-cache hit rate sliding (more prefill), a CPU-bound ratio creeping up (CPU work per step).
Each develops linearly over RAMP_MINUTES, holds, then recovers. Its final strength is drawn so
that the engine's capacity ends at a share of the load of the moment (a fault that would not
hurt at that hour is moved to another). One fault in every SUDDEN_EVERY is a sudden GPU throttle
instead (the GPU's step time jumps at once): nothing moves before it, so no scan can lead it; the
bench counts it apart.

What must not warn: hosts restart on deploys (counters reset, the prefix cache starts cold); one
host is busy but steady (a closed-loop batch workload that keeps its batch full and a queue of a few requests, its
cores busy and its hit rate low, all day, flat); one host is hot (its afternoon peak takes
HOT_PEAK of its capacity: batch and KV grow every morning, a short queue forms at the peak, TTFT
stays within the SLO); and the healthy hosts see brief bursts (BURST_SECONDS of up to BURST_RATE
times their traffic, a few a day) that the engine absorbs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
from scipy.special import ndtr

# Model step, seconds: shorter than any request's service (3-7 s), so that the batch holds what a
# real engine's does (at 5 s every request came and went within one step, and the running gauge
# read near 0 at a quiet hour where Little's law says dozens run).
DT = 1.0
THINK_SECONDS = 2.0  # the busy host's clients wait this long, on average, before their next request
# Clients beyond a full batch and the thinking ones: the busy host's queue median is then 5 (past
# the article's 4.7 all day) and its TTFT p95 about 1.0 s (p90 1.5, at most 1.9 over 12 simulated hours),
# inside a 2 s SLO: busy, not breaching. At 7, its p95 sat at 1.9 s and crossed the SLO by itself.
BUSY_WAITING = 4
NOISE_SECONDS = 5.0  # the load, hit-rate and client-count wobbles below are AR(1) per this many seconds
SCRAPE = 15.0  # Prometheus scrape interval
DAY = 86400.0
MAX_SEQS = 256
KV_TOKENS = 450_000.0
OUTPUT_TOKENS = 200.0
PREFILL_TOKENS_PER_S = 25_000.0
STEP_BASE, STEP_PER_SEQ = 0.010, 0.00010  # GPU decode step time: base + per running sequence
CPU_BASE, CPU_PER_SEQ = 0.004, 0.00006  # engine CPU work per step, on its pinned cores
SMOOTH = 4.0  # step time = (gpu^p + cpu^p)^(1/p): CPU and GPU overlap until one dominates
TTFT_SPREAD = 0.7  # lognormal sigma of one request's prefill-to-first-token time (prompt lengths vary)
CLIENT_TIMEOUT = 60.0  # a request still queued this long is abandoned by its client (no TTFT)
RESTART_DOWN = 90.0  # seconds an engine is away on a deploy
CACHE_WARM = 240.0  # time constant of the prefix cache filling again after a restart
RAMP_MINUTES = (10.0, 30.0)
HOLD_MINUTES = (45.0, 90.0)
RECOVER_SECONDS = 300.0
FAULT_KINDS = ("surge", "kv_pressure", "prefix_slide", "cpu_creep")
SUDDEN_KIND = "gpu_throttle"  # a step change, no ramp: no early sign
SUDDEN_EVERY = 5  # every fifth fault is sudden
HOT_PEAK = (0.85, 0.9)  # the hot host's peak load, as a share of its capacity
BURST_SECONDS = (60.0, 180.0)
BURST_RATE = (1.3, 1.8)
BURSTS_PER_DAY = 4
BURST_CEILING = 0.95  # of the engine's capacity: a burst never takes more
# vLLM V1's TTFT buckets
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TTFT_BUCKETS += (20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
PINNED_CPUS = (2, 3)
CPUS = 4


@dataclass
class Fault:
    host: int
    kind: str
    start: float
    ramp: float  # seconds until full strength
    hold: float  # seconds at full strength before the cause is removed
    strength: float  # the cause's final multiplier (surge, kv, cpu, gpu) or hit rate (prefix_slide)

    @property
    def end(self) -> float:
        return self.start + self.ramp + self.hold + RECOVER_SECONDS

    def weight(self, t: float) -> float:
        """0 before, rising to 1 over the ramp (at once without one), 1 while held, back to 0
        over the recovery."""
        if t < self.start or t >= self.end:
            return 0.0
        if t < self.start + self.ramp:
            return (t - self.start) / self.ramp
        if t < self.start + self.ramp + self.hold:
            return 1.0
        return 1.0 - (t - self.start - self.ramp - self.hold) / RECOVER_SECONDS


@dataclass
class Host:
    name: str
    peak: float  # requests/s at the day's peak
    prompt: float  # mean prompt tokens
    hit: float  # prefix-cache hit rate
    cpu_base: float
    phase: float  # hours the host's day is shifted by
    busy: bool = False  # closed-loop, steady, always busy
    clients: int = 0
    restarts: list[float] = field(default_factory=list)
    hot: bool = False  # its peak load near its capacity, never over it
    bursts: list[tuple[float, float, float]] = field(default_factory=list)  # (start, seconds, rate multiplier)


def _ar1(previous: float, per_step: float, sd: float, rng: np.random.Generator) -> float:
    """An AR(1) wobble with `per_step` correlation and `sd` innovations per NOISE_SECONDS, stepped
    every DT seconds (the same time constant and spread whatever DT is)."""
    decay = per_step ** (DT / NOISE_SECONDS)
    scale = sd * math.sqrt((1 - decay**2) / (1 - per_step**2))
    return decay * previous + float(rng.normal(0, scale))


def step_time(running: float, cpu_base: float, cpu_scale: float, gpu_scale: float = 1.0) -> tuple[float, float]:
    """(step seconds, CPU busy share of the pinned cores) at this batch size."""
    gpu = (STEP_BASE + STEP_PER_SEQ * running) * gpu_scale
    cpu = (cpu_base + CPU_PER_SEQ * running) * cpu_scale
    step = (gpu**SMOOTH + cpu**SMOOTH) ** (1 / SMOOTH)
    return step, cpu / step


def capacity(prompt: float, hit: float, cpu_base: float, cpu_scale: float = 1.0, gpu_scale: float = 1.0) -> float:
    """Requests/s the engine sustains: a full batch, less the step time prefill takes."""
    running = min(MAX_SEQS, 0.98 * KV_TOKENS / (prompt + OUTPUT_TOKENS / 2))
    step, _ = step_time(running, cpu_base, cpu_scale, gpu_scale)
    decode = running / (OUTPUT_TOKENS * step)
    prefill_rate = PREFILL_TOKENS_PER_S * (STEP_BASE + STEP_PER_SEQ * running) / step  # the CPU slows it too
    return decode / (1 + decode * prompt * (1 - hit) / prefill_rate)


def diurnal(t: float, phase: float) -> float:
    """0 at the small hours (04:00), 1 at the afternoon peak (16:00)."""
    hour = (t / 3600.0 + phase) % 24
    return 0.5 - 0.5 * math.cos(2 * math.pi * (hour - 4) / 24)


def load(host: Host, t: float) -> float:
    return host.peak * (0.3 + 0.7 * diurnal(t, host.phase))


def _solve(low: float, high: float, too_strong: Callable[[float], bool], steps: int = 40) -> float:
    """The strength in [low, high] where `too_strong` flips (bisection; monotone)."""
    for _ in range(steps):
        mid = (low + high) / 2
        if too_strong(mid):
            high = mid
        else:
            low = mid
    return (low + high) / 2


def fault_strength(host: Host, kind: str, t: float, share: float) -> float | None:
    """The cause's final value that leaves the engine `share` of the load at `t`; None when
    no value of it can (a hit rate cannot slide below 0)."""
    target = share * load(host, t)

    def cap(prompt: float = host.prompt, hit: float = host.hit, cpu: float = 1.0, gpu: float = 1.0) -> float:
        return capacity(prompt, hit, host.cpu_base, cpu, gpu)

    if kind == "surge":
        return cap() / target  # arrivals x this: the load becomes capacity / share
    if kind == "kv_pressure":
        if cap(prompt=host.prompt * 12) > target:
            return None
        return _solve(1.0, 12.0, lambda m: cap(prompt=host.prompt * m) < target)
    if kind == "prefix_slide":
        if cap(hit=0.02) > target:
            return None
        return _solve(0.02, host.hit, lambda h: cap(hit=h) > target)  # the highest hit rate that hurts
    if kind == "cpu_creep":
        if cap(cpu=20.0) > target:
            return None
        return _solve(1.0, 20.0, lambda m: cap(cpu=m) < target)
    if kind == SUDDEN_KIND:
        if cap(gpu=20.0) > target:
            return None
        return _solve(1.0, 20.0, lambda m: cap(gpu=m) < target)
    raise ValueError(f"unknown fault kind {kind!r}")


def make_fleet(
    rng: np.random.Generator, hosts: int, start: float, days: int, faulty_share: float = 0.5, per_day: int = 3
) -> tuple[list[Host], list[Fault]]:
    """Hosts (host 0 busy but steady, host 1 hot; the last `faulty_share` of them with faults,
    the others with brief bursts) and faults, only on the days after the first (the first day is
    the baseline's history)."""
    if hosts < 4:
        raise ValueError("--hosts: at least 4 (a busy one, a hot one, healthy ones and faulty ones)")
    fleet: list[Host] = []
    for n in range(hosts):
        hit = float(rng.uniform(0.70, 0.85))
        prompt = float(rng.uniform(1000, 2000))
        cpu_base = CPU_BASE * float(rng.uniform(0.8, 1.3))
        cap = capacity(prompt, hit, cpu_base)
        fleet.append(
            Host(f"host-{n:02d}", cap * float(rng.uniform(0.5, 0.75)), prompt, hit, cpu_base, rng.uniform(-1, 1))
        )
    busy = fleet[0]
    busy.busy, busy.hit, busy.cpu_base, busy.prompt = True, 0.55, 0.0246, 1200.0
    # Its clients send again THINK_SECONDS after an answer: enough of them to keep a full batch
    # and BUSY_WAITING waiting, the rest thinking (Little's law: the batch's completions per second
    # times the think time, less the step a client is counted running after its answer).
    busy.clients = round(
        MAX_SEQS + BUSY_WAITING + capacity(busy.prompt, busy.hit, busy.cpu_base) * (THINK_SECONDS - DT)
    )
    hot = fleet[1]
    hot.hot = True
    hot.peak = capacity(hot.prompt, hot.hit, hot.cpu_base) * float(rng.uniform(*HOT_PEAK))
    deploys = [start + d * DAY + float(rng.uniform(9, 17)) * 3600 for d in range(days)]
    for n, host in enumerate(fleet):
        host.restarts = [deploy + n * 180.0 for deploy in deploys]  # a rolling deploy, 3 min apart
    faults: list[Fault] = []
    first_faulty = hosts - max(1, round(hosts * faulty_share))
    for host in fleet[2:first_faulty]:
        for day in range(days):
            for _ in range(BURSTS_PER_DAY):
                at = start + day * DAY + float(rng.uniform(0, DAY))
                host.bursts.append((at, float(rng.uniform(*BURST_SECONDS)), float(rng.uniform(*BURST_RATE))))
    kinds = iter(FAULT_KINDS * (hosts * days * per_day))
    drawn = 0
    for n in range(first_faulty, hosts):
        host = fleet[n]
        for day in range(1, days):
            placed: list[float] = []
            for _ in range(per_day):
                drawn += 1
                kind = SUDDEN_KIND if drawn % SUDDEN_EVERY == 0 else next(kinds)
                for _attempt in range(200):
                    at = start + day * DAY + float(rng.uniform(0, DAY - 3 * 3600))
                    clear = all(abs(at - other) > 3 * 3600 for other in placed)
                    clear = clear and all(not at - 3600 < r < at + 3 * 3600 for r in host.restarts)
                    ramp = 0.0 if kind == SUDDEN_KIND else float(rng.uniform(*RAMP_MINUTES)) * 60
                    share = float(rng.uniform(0.6, 0.95))
                    strength = fault_strength(host, kind, at + ramp, share) if clear else None
                    if strength is not None:
                        hold = float(rng.uniform(*HOLD_MINUTES)) * 60
                        faults.append(Fault(n, kind, at, ramp, hold, strength))
                        placed.append(at)
                        break
    return fleet, sorted(faults, key=lambda f: f.start)


@dataclass
class Engine:
    """One host's engine state between steps."""

    waiting_fresh: float = 0.0
    waiting_preempted: float = 0.0
    running: float = 0.0
    admitted: float = 0.0  # cumulative fresh admissions (of the host's cumulative arrivals)
    counters: dict[str, float] = field(default_factory=dict)
    up_since: float = 0.0


def simulate(host: Host, faults: list[Fault], start: float, end: float, rng: np.random.Generator) -> Iterator[str]:
    """The host's OpenMetrics lines (serving and node series) from `start` to `end`."""
    serving = f'instance="{host.name}:8000",job="vllm",model_name="m"'
    node = f'instance="{host.name}",job="node"'
    engine = Engine()
    steps = int((end - start) // DT)
    arrived = np.full(steps + 1, np.inf)  # arrived[k + 1]: the host's fresh arrivals up to step k
    arrived[0] = 0.0
    clients = 0.0  # the busy host's AR(1) wobble of its client count
    noise = 0.0  # AR(1) load noise, relative
    hit_noise = 0.0
    node_idle = {c: 0.0 for c in range(CPUS)}
    node_user = {c: 0.0 for c in range(CPUS)}
    restarts = sorted(host.restarts)
    started = start - float(rng.uniform(1, 5)) * DAY  # the engine process's start (process_start_time_seconds)
    down_until = -1.0
    mine = [f for f in faults if host.name.endswith(f"{f.host:02d}")]
    full = capacity(host.prompt, host.hit, host.cpu_base)
    per_scrape = int(SCRAPE // DT)
    lines: dict[str, list[str]] = {}
    day_factor = 1.0
    for k in range(steps):
        t = start + k * DT
        if k % int(DAY // DT) == 0:
            day_factor = float(rng.normal(1.0, 0.04))
        surge, kv, slide, cpu, gpu = 1.0, 1.0, 0.0, 1.0, 1.0
        for burst_at, seconds, rate in host.bursts:
            if burst_at <= t < burst_at + seconds:  # a burst the engine absorbs: it stays under capacity
                surge *= min(rate, BURST_CEILING * full / max(load(host, t), 1e-9))
        for f in mine:
            w = f.weight(t)
            if w <= 0:
                continue
            if f.kind == "surge":
                surge *= 1 + (f.strength - 1) * w
            elif f.kind == "kv_pressure":
                kv *= 1 + (f.strength - 1) * w
            elif f.kind == "prefix_slide":
                slide = max(slide, (host.hit - f.strength) * w)
            elif f.kind == SUDDEN_KIND:
                gpu *= 1 + (f.strength - 1) * w
            else:
                cpu *= 1 + (f.strength - 1) * w
        if restarts and t >= restarts[0]:
            restarts.pop(0)
            down_until = t + RESTART_DOWN
            engine = Engine(admitted=arrived[k], up_since=down_until)  # the queue is lost with the process
            started = down_until - 30.0  # the model loads for a while before the engine serves
        down = t < down_until
        noise = _ar1(noise, 0.97, 0.012, rng)
        hit_noise = _ar1(hit_noise, 0.95, 0.004, rng)
        prompt = host.prompt * kv
        warm = 1 - math.exp(-(t - engine.up_since) / CACHE_WARM) if engine.up_since else 1.0
        hit = min(0.95, max(0.0, (host.hit - slide + hit_noise) * warm))
        step, cpu_share = step_time(engine.running, host.cpu_base, cpu, gpu)
        if down:
            arrivals = 0.0  # the load balancer sends the engine's share elsewhere
        elif host.busy:
            clients = _ar1(clients, 0.99, 0.15, rng)
            thinking = max(
                0.0, host.clients + round(clients) - engine.waiting_fresh - engine.waiting_preempted - engine.running
            )
            arrivals = float(rng.binomial(int(thinking), min(1.0, DT / THINK_SECONDS)))
        else:
            rate = load(host, t) * day_factor * (1 + noise) * surge
            arrivals = float(rng.poisson(max(0.0, rate) * DT))
        engine.waiting_fresh += arrivals
        arrived[k + 1] = arrived[k] + arrivals
        given_up = arrived[max(0, k + 1 - int(CLIENT_TIMEOUT // DT))] - engine.admitted
        if given_up > 0:  # the oldest in the queue, their clients gone
            engine.waiting_fresh = max(0.0, engine.waiting_fresh - given_up)
            engine.admitted += given_up
        # admission: preempted requests first, then the queue in order, while slots and KV last
        per_seq = prompt + OUTPUT_TOKENS / 2
        room = min(MAX_SEQS, math.floor(0.98 * KV_TOKENS / per_seq))
        if engine.running > room:  # KV full: preempt the youngest back to the queue
            engine.waiting_preempted += engine.running - room
            engine.running = room
            engine.counters["preempt"] = engine.counters.get("preempt", 0.0) + 1
        free = max(0.0, room - engine.running)
        again = min(engine.waiting_preempted, free)
        engine.waiting_preempted -= again
        fresh = min(engine.waiting_fresh, free - again)
        engine.waiting_fresh -= fresh
        engine.running += again + fresh
        step, cpu_share = step_time(engine.running, host.cpu_base, cpu, gpu)
        prefill_rate = PREFILL_TOKENS_PER_S * (STEP_BASE + STEP_PER_SEQ * engine.running) / step
        prefill_tokens = fresh * prompt * (1 - hit)
        prefill_share = min(0.9, prefill_tokens / DT / prefill_rate)
        done_p = 1 - math.exp(-DT * (1 - prefill_share) / (step * OUTPUT_TOKENS))  # each request's chance to finish
        held = engine.running  # the slots the batch holds during this step: what the gauges show
        done = float(rng.binomial(int(engine.running), done_p)) if engine.running >= 1 else 0.0
        engine.running = max(0.0, engine.running - done)
        # TTFT of this step's admissions: FIFO wait (from the cumulative arrivals) + prefill
        before = engine.admitted
        engine.admitted += fresh
        buckets = np.zeros(len(TTFT_BUCKETS))
        ttft_sum = 0.0
        if fresh >= 1:
            # within a step, arrivals and admissions are spread evenly over it (step k ends at t)
            waits = []
            for n in (before + 0.5, before + fresh / 2, engine.admitted - 0.5):
                admitted_at = t - DT + DT * (n - before) / fresh
                j = int(np.searchsorted(arrived, n, side="left")) - 1  # the step it arrived in
                share = (n - arrived[j]) / max(arrived[j + 1] - arrived[j], 1e-9)
                arrived_at = start + j * DT - DT + DT * share
                waits.append(max(0.0, admitted_at - arrived_at))
            service = step * (1 + prompt * (1 - hit) / 2048) / (1 - prefill_share) + 0.02
            les = np.asarray(TTFT_BUCKETS)
            x = np.clip(les[None, :] - np.asarray(waits)[:, None], 1e-9, None)
            cdf = ndtr((np.log(x) - math.log(service)) / TTFT_SPREAD).mean(axis=0)
            n = int(round(fresh))
            probs = np.diff(np.concatenate([[0.0], cdf, [1.0]]))
            counts = rng.multinomial(n, np.clip(probs, 0, None) / max(probs.sum(), 1e-12))
            buckets = np.cumsum(counts)[:-1].astype(float)
            ttft_sum = n * (sum(waits) / len(waits) + service * math.exp(TTFT_SPREAD**2 / 2))
        c = engine.counters
        c["queries"] = c.get("queries", 0.0) + fresh * prompt
        c["hits"] = c.get("hits", 0.0) + fresh * prompt * hit
        c["ttft_count"] = c.get("ttft_count", 0.0) + round(fresh)
        c["ttft_sum"] = c.get("ttft_sum", 0.0) + ttft_sum
        for i in range(len(TTFT_BUCKETS)):
            c[f"b{i}"] = c.get(f"b{i}", 0.0) + buckets[i]
        busy_share = 0.0 if down else min(1.0, cpu_share + float(rng.normal(0, 0.015)))
        for cpu_n in range(CPUS):
            used = busy_share if cpu_n in PINNED_CPUS else min(1.0, max(0.0, 0.25 + float(rng.normal(0, 0.03))))
            node_idle[cpu_n] += DT * (1 - used)
            node_user[cpu_n] += DT * used
        if k % per_scrape:
            continue
        ts = f"{t:.0f}"
        for cpu_n in range(CPUS):
            _add(lines, f'node_cpu_seconds_total{{{node},cpu="{cpu_n}",mode="idle"}}', node_idle[cpu_n], ts)
            _add(lines, f'node_cpu_seconds_total{{{node},cpu="{cpu_n}",mode="user"}}', node_user[cpu_n], ts)
        for cpu_n in PINNED_CPUS:
            _add(lines, f'node_cpu_isolated{{{node},cpu="{cpu_n}"}}', 1.0, ts)
        if down:
            continue
        waiting = engine.waiting_fresh + engine.waiting_preempted
        _add(lines, f"process_start_time_seconds{{{serving}}}", started, ts)
        _add(lines, f"vllm:num_requests_waiting{{{serving}}}", round(waiting), ts)
        _add(lines, f"vllm:num_requests_running{{{serving}}}", round(held), ts)
        _add(lines, f"vllm:kv_cache_usage_perc{{{serving}}}", min(1.0, held * per_seq / KV_TOKENS), ts)
        _add(lines, f"vllm:num_preemptions_total{{{serving}}}", c.get("preempt", 0.0), ts)
        _add(lines, f"vllm:prefix_cache_queries_total{{{serving}}}", c["queries"], ts)
        _add(lines, f"vllm:prefix_cache_hits_total{{{serving}}}", c["hits"], ts)
        for i, le in enumerate(TTFT_BUCKETS):
            _add(lines, f'vllm:time_to_first_token_seconds_bucket{{{serving},le="{le:g}"}}', c[f"b{i}"], ts)
        _add(lines, f'vllm:time_to_first_token_seconds_bucket{{{serving},le="+Inf"}}', c["ttft_count"], ts)
        _add(lines, f"vllm:time_to_first_token_seconds_count{{{serving}}}", c["ttft_count"], ts)
        _add(lines, f"vllm:time_to_first_token_seconds_sum{{{serving}}}", c["ttft_sum"], ts)
    for name, samples in lines.items():
        for sample in samples:
            yield f"{name} {sample}\n"


def _add(lines: dict[str, list[str]], name: str, value: float, ts: str) -> None:
    lines.setdefault(name, []).append(f"{value:.10g} {ts}")
