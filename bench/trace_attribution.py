"""Trace benchmark: time to fetch and attribute 500 traces, p50 over several runs.

    .venv/bin/python bench/trace_attribution.py [--runs 7] [--traces 500] [--decode-steps 0 32]

Serves 3 h 15 min of realistic LLM-serving request traces (gateway -> engine -> queue, LoRA
adapter load with its three steps, prefill, decode, optionally one span per decode step) from the
protocol-faithful fake Jaeger and Tempo servers on loopback (tests/fakes/traces.py), then times
`rca.traces.evidence.trace_findings` with `RCA_TRACES_SAMPLE_SIZE=500`: services lookup, the
sliced searches (Tempo: plus one fetch per trace), parsing, attribution and findings. Also times
the attribution alone on the fetched traces. The loopback server has no network latency, so
this measures the client's own cost; add the backend's query time for a real deployment.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rca.config import TracesConfig  # noqa: E402
from rca.startup import checked_settings  # noqa: E402
from rca.traces.attribution import compile_groups, time_trace  # noqa: E402
from rca.traces.client import TraceHTTP  # noqa: E402
from rca.traces.evidence import trace_findings  # noqa: E402
from rca.traces.jaeger import JaegerSource  # noqa: E402
from rca.traces.sampling import collect_sample, plan_sample  # noqa: E402
from tests.fakes.traces import LORA_FAULT, SERVICE, FakeBackend, Store, TraceFactory  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--traces", type=int, default=500)
    parser.add_argument("--decode-steps", type=int, nargs="+", default=[0, 32])
    args = parser.parse_args()
    now = datetime.now(UTC)
    start, alert = now - timedelta(minutes=195), now - timedelta(minutes=2)
    us = lambda d: int(d.timestamp() * 1e6)  # noqa: E731
    print(
        f"{'backend':8s} {'spans/trace':>11s} {'traces':>6s} {'fetch+attribute p50':>20s} {'min':>7s} "
        f"{'max':>7s} {'attribute only p50':>19s}"
    )
    for steps in args.decode_steps:
        factory = TraceFactory(3, decode_steps=steps)
        per_minute = max(6.0, args.traces * 2.5 / 195)  # enough that every slice can fill its share
        store = Store(
            factory.window(us(start), us(now), us(now - timedelta(minutes=25)), LORA_FAULT, per_minute=per_minute)
        )
        spans = statistics.mean(len(t.spans) for t in store.traces)
        for backend in ("jaeger", "tempo"):
            with FakeBackend(backend, store) as fake:
                settings = checked_settings(
                    traces_backend=backend,
                    traces_url=fake.url,
                    traces_sample_size=args.traces,
                    traces_budget_seconds=300,
                )
                timings, count = [], 0
                for _ in range(args.runs):
                    began = time.perf_counter()
                    findings = trace_findings(settings, TracesConfig(), [{"job": SERVICE}], alert, start, now)
                    timings.append(time.perf_counter() - began)
                    summary = findings[0]
                    assert summary.status == "ok", summary.detail
                    sampled = re.search(r"Sample: (\d+) traces", summary.detail)
                    count = int(sampled.group(1)) if sampled else 0
                attribute = None
                if backend == "jaeger":
                    attribute = attribution_only(fake.url, start, now, args.traces, args.runs)
            note = "" if attribute is None else f"{statistics.median(attribute) * 1000:16.0f} ms"
            print(
                f"{backend:8s} {spans:11.0f} {args.traces:6d} {statistics.median(timings) * 1000:17.0f} ms "
                f"{min(timings) * 1000:5.0f}ms {max(timings) * 1000:5.0f}ms {note:>19s}"
                f"   (traces fetched and attributed: {count})"
            )


def attribution_only(url: str, start: datetime, end: datetime, size: int, runs: int) -> list[float]:
    source = JaegerSource(TraceHTTP(url, {}, 30), 2000)
    plan = plan_sample(int(start.timestamp() * 1e6), int(end.timestamp() * 1e6), size)
    traces = collect_sample(source, SERVICE, plan, 300, size).traces
    source.close()
    groups = compile_groups(TracesConfig().operations)
    out = []
    for _ in range(runs):
        began = time.perf_counter()
        for trace in traces:
            time_trace(trace, groups)
        out.append(time.perf_counter() - began)
    return out


if __name__ == "__main__":
    main()
