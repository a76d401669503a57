"""A synthetic fleet for the scan's cost and its kept windows, as OpenMetrics for promtool: per
host a vLLM V1 engine (waiting gauge, KV usage, prefix-cache counters, TTFT histogram) and a
node_exporter with pinned (isolcpus) cores, steady with noise, over chosen stretches of time.

Stretches, not one span: the scan reads this hour and the same hour yesterday, and writing the
day between them would cost a 1,000-host bench most of its backfill for samples nobody reads.
"""

from __future__ import annotations

import random
from pathlib import Path

TTFT_SHARES = {"0.25": 0.3, "0.5": 0.6, "1": 0.85, "2": 0.97, "5": 0.995, "+Inf": 1.0}

Stretch = tuple[float, float]  # [start, end) unix seconds


def write_history(
    path: Path,
    hosts: dict[str, list[Stretch]],
    step: float = 30.0,
    seed: int = 7,
    labels: dict[str, dict[str, str]] | None = None,
) -> int:
    """Each host's series over its stretches (oldest first), one series at a time; returns how
    many series were written. A host's waiting level is drawn anew for each stretch, so a
    baseline read from the wrong stretch shows. `labels`: a host's serving series' labels other
    than the default `job="vllm",model_name="m"`."""
    rng = random.Random(seed)
    series = 0
    with path.open("w") as out:
        for host, stretches in hosts.items():
            own = {"job": "vllm", "model_name": "m"} | (labels or {}).get(host, {})
            serving = ",".join([f'instance="{host}:8000"', *(f'{k}="{v}"' for k, v in own.items())])
            node = f'instance="{host}",job="node"'
            times = [[start + i * step for i in range(int((end - start) // step))] for start, end in stretches]
            levels = [1 + rng.random() * 2 for _ in stretches]
            counters = {
                f"vllm:prefix_cache_queries_total{{{serving}}}": 4000.0,
                f"vllm:prefix_cache_hits_total{{{serving}}}": 3000.0,
                **{f'node_cpu_seconds_total{{{node},cpu="{c}",mode="idle"}}': 0.5 for c in range(4)},
                **{
                    f'vllm:time_to_first_token_seconds_bucket{{{serving},le="{le}"}}': 8 * share
                    for le, share in TTFT_SHARES.items()
                },
            }
            for name, per_second in counters.items():
                total = 0.0
                for stretch in times:
                    for t in stretch:
                        total += per_second * step * (0.9 + 0.2 * rng.random())
                        out.write(f"{name} {total:.6g} {t:.0f}\n")
                series += 1
            gauges = {  # name: (level per stretch, relative noise)
                f"vllm:num_requests_waiting{{{serving}}}": (levels, 0.2),
                f"vllm:kv_cache_usage_perc{{{serving}}}": ([0.55] * len(stretches), 0.1),
                f"vllm:num_requests_running{{{serving}}}": ([100.0] * len(stretches), 0.1),
                **{f'node_cpu_isolated{{{node},cpu="{c}"}}': ([1.0] * len(stretches), 0.0) for c in (2, 3)},
            }
            for name, (level, noise) in gauges.items():
                for stretch, at_level in zip(times, level, strict=True):
                    for t in stretch:
                        out.write(f"{name} {at_level * (1 + noise * (2 * rng.random() - 1)):.6g} {t:.0f}\n")
                series += 1
        out.write("# EOF\n")
    return series
