"""The labelled scenario suite: one fleet, one Prometheus, each scenario a host (or an instance)
with a known root cause and the labels its alert would carry.

Covers every taxonomy id, four serving stacks, healthy controls, a host where only one of two
engines is faulty, red herrings (values that move but are not the cause), missing exporters,
exporters scraped by address, and a cause only the traces (a fake Jaeger) reveal.
`run_suite` pushes every scenario through the real pipeline (`rca.pipeline.analyse`) against a
real Prometheus; `score` computes AC@k and Avg@5 as RCAEval defines them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rca.analyst.summary import AlertText
from rca.collect.target import target_from_alerts
from rca.config import ScopeConfig, Settings
from rca.domain.evidence import Hypothesis
from rca.pipeline import analyse
from tests.e2e import promstack
from tests.e2e.scenarios import LORA_HOST, MODEL, NAMESPACE, RAMP_SECONDS, Exporter, Fleet, Host, address
from tests.fakes.traces import LORA_FAULT, FakeBackend, Phases, Store, TraceFactory

ONSET_MINUTES_AGO = 25
CONFIDENT = 0.5


@dataclass(frozen=True)
class Scenario:
    name: str
    expected: str
    hosts: list[Host]
    alert: dict[str, str]  # the labels of the alert that fires for it
    notes: str = ""
    traces: Phases | None = None  # the service's traces after onset, served by a fake Jaeger; None: no traces


def _vllm_alert(host: str, alertname: str = "LLMRequestQueueMedianHigh", port: int = 8000) -> dict[str, str]:
    return {"alertname": alertname, "instance": f"{host}:{port}", "model_name": MODEL, "job": "vllm"}


def _node_alert(host: str) -> dict[str, str]:
    return {"alertname": "LLMServingCPUBoundPinnedCores", "instance": host}


def _dcgm_alert(host: str) -> dict[str, str]:
    # In Kubernetes the exporter's instance is its pod IP; the GPU node is only in Hostname.
    return {
        "alertname": "LLMGPUMemoryBoundShift",
        "instance": "10.42.0.17:9400",
        "Hostname": host,
        "gpu": "0",
        "job": "dcgm",
    }


def scenarios(onset: float, severity: float = 1.0, ramp: float = RAMP_SECONDS) -> list[Scenario]:
    """The suite; `severity` and `ramp` make every fault milder or slower, to test robustness."""

    def host(name: str, fault: str | None, **kw: object) -> Host:
        return Host(name, fault, onset, severity=severity, ramp=ramp, **kw)  # type: ignore[arg-type]

    return [
        Scenario(
            "vllm-prefix-miss",
            "prefix_cache_miss",
            [host("s01", "prefix_cache_miss")],
            _vllm_alert("s01", "LLMPrefixCacheHitRateLow"),
        ),
        Scenario("vllm-arrival-surge", "arrival_surge", [host("s02", "arrival_surge")], _vllm_alert("s02")),
        Scenario("vllm-kv-pressure", "kv_memory_pressure", [host("s03", "kv_memory_pressure")], _vllm_alert("s03")),
        Scenario(
            "vllm-launch-overhead", "cpu_launch_overhead", [host("s04", "cpu_launch_overhead")], _node_alert("s04")
        ),
        Scenario("vllm-numa", "cpu_affinity_numa", [host("s05", "cpu_affinity_numa")], _node_alert("s05")),
        Scenario("vllm-host-device-sync", "host_device_sync", [host("s06", "host_device_sync")], _node_alert("s06")),
        Scenario(
            "triton-batching-window",
            "batching_misconfig",
            [host("s07", "batching_misconfig", stack="triton")],
            {"alertname": "LLMRequestQueueMedianHigh", "instance": "s07:8002", "model": "llama"},
        ),
        Scenario("vllm-prefill-blocking", "prefill_blocking", [host("s08", "prefill_blocking")], _vllm_alert("s08")),
        Scenario(
            "vllm-lora-loading",
            "lora_adapter_loading",
            [host("s09", "lora_adapter_loading", normal=LORA_HOST)],
            _vllm_alert("s09"),
        ),
        Scenario(
            "vllm-v0-lora-loading",
            "lora_adapter_loading",
            [host("s28", "lora_adapter_loading", stack="vllm_v0", normal=LORA_HOST)],
            _vllm_alert("s28"),
            "V0 has no deferred reason: requests wait while lora_requests_info shows a full adapter budget",
        ),
        Scenario(
            "vllm-memory-bound", "memory_bandwidth_bound", [host("s10", "memory_bandwidth_bound")], _dcgm_alert("s10")
        ),
        Scenario("vllm-gpu-throttled", "gpu_degraded", [host("s11", "gpu_degraded")], _vllm_alert("s11")),
        Scenario(
            "healthy-vllm", "no_clear_cause", [host("s12", None)], _vllm_alert("s12"), "alert fired on normal data"
        ),
        Scenario(
            "healthy-sglang",
            "no_clear_cause",
            [host("s13", None, stack="sglang")],
            {"alertname": "LLMRequestQueueMedianHigh", "instance": "s13:30000", "model_name": MODEL},
        ),
        Scenario(
            "sglang-prefix-miss",
            "prefix_cache_miss",
            [host("s14", "prefix_cache_miss", stack="sglang")],
            {"alertname": "LLMPrefixCacheHitRateLow", "instance": "s14:30000", "model_name": MODEL},
        ),
        Scenario(
            "tgi-arrival-surge",
            "arrival_surge",
            [host("s15", "arrival_surge", stack="tgi")],
            {"alertname": "LLMRequestQueueMedianHigh", "instance": "s15:9000"},
        ),
        Scenario(
            "one-of-two-engines",
            "arrival_surge",
            [host("s16", "arrival_surge"), host("s16", None, port=8001, exporters=frozenset({"serving"}))],
            _vllm_alert("s16"),
            "two engines on one host; only :8000 is overloaded",
        ),
        Scenario(
            "healthy-twin-of-faulty",
            "no_clear_cause",
            [host("s17", None), host("s17", "kv_memory_pressure", port=8001, exporters=frozenset({"serving"}))],
            _vllm_alert("s17"),
            "the alert names the healthy engine of a host whose other engine is faulty",
        ),
        Scenario(
            "surge-without-gpu-or-node-data",
            "arrival_surge",
            [host("s18", "arrival_surge", exporters=frozenset({"serving"}))],
            _vllm_alert("s18"),
            "DCGM and node_exporter missing",
        ),
        Scenario(
            "kv-pressure-with-red-herrings",
            "kv_memory_pressure",
            [host("s19", "kv_memory_pressure", extra=(("gpu_temp", 80.0), ("ctx_switches", 20000.0)))],
            _vllm_alert("s19"),
            "context switches up 66 %, GPU warmer, neither the cause",
        ),
        Scenario(
            "prefix-miss-with-busier-traffic",
            "prefix_cache_miss",
            [host("s20", "prefix_cache_miss", extra=(("arrival_rate", 10.0),))],
            _vllm_alert("s20", "LLMPrefixCacheHitRateLow"),
            "request rate up 25 %, below a surge",
        ),
        Scenario(
            "healthy-no-gpu-data",
            "no_clear_cause",
            [host("s21", None, exporters=frozenset({"serving", "node"}))],
            _vllm_alert("s21"),
        ),
        Scenario(
            "k8s-cpu-quota-throttling",
            "cpu_quota_throttling",
            [
                host(
                    "s22",
                    "cpu_quota_throttling",
                    pod="vllm-s22-0",
                    exporters=frozenset({"serving", "dcgm", "cadvisor"}),
                )
            ],
            _vllm_alert("s22", "LLMInterTokenLatencyHigh") | {"namespace": NAMESPACE, "pod": "vllm-s22-0"},
            "Kubernetes pod without node_exporter: the CPU-bound ratio comes from cAdvisor",
        ),
        Scenario(
            "node-alert-by-ip-pcie-sync",
            "host_device_sync",
            [host("s23", "host_device_sync", addresses=True)],
            {"alertname": "LLMServingCPUBoundPinnedCores", "instance": f"{address('node', 's23')}:9100", "job": "node"},
            "node_exporter scraped by IP: the GPU and engine are reached through node_uname_info",
        ),
        Scenario(
            "pod-ip-alert-numa",
            "cpu_affinity_numa",
            [host("s24", "cpu_affinity_numa", pod="vllm-s24-0", addresses=True)],
            {
                "alertname": "LLMInterTokenLatencyHigh",
                "instance": f"{address('pod', 's24')}:8000",
                "namespace": NAMESPACE,
                "pod": "vllm-s24-0",
                "model_name": MODEL,
            },
            "engine pod scraped by pod IP: its node's CPUs are reached through kube_pod_info",
        ),
        Scenario(
            "memory-bound-without-dcgm-profiling",
            "memory_bandwidth_bound",
            [host("s25", "memory_bandwidth_bound", exporters=frozenset({"serving", "dcgm_basic", "node"}))],
            _vllm_alert("s25", "LLMInterTokenLatencyHigh"),
            "no DCP fields: the compute-to-memory ratio is not measurable, memory-copy utilisation is",
        ),
        Scenario(
            "sglang-lora-only-traces",
            "lora_adapter_loading",
            [host("s27", "lora_adapter_loading", stack="sglang")],
            {
                "alertname": "LLMRequestQueueMedianHigh",
                "instance": "s27:30000",
                "model_name": MODEL,
                "service": "sglang-s27",
            },
            "SGLang exports no LoRA metric: only the traces show adapter loads on the request path",
            traces=LORA_FAULT,
        ),
        Scenario(
            "healthy-busy-queue",
            "no_clear_cause",
            [host("s26", None, normal=(("waiting", 6.5), ("running", 24.0)))],
            _vllm_alert("s26"),
            "a busy but steady engine whose queue has sat above 4.7 all along: nothing changed",
        ),
    ]


@dataclass
class Outcome:
    scenario: Scenario
    ranked: list[Hypothesis]
    stack: str | None
    seconds: float
    breached: list[str] = field(default_factory=list)
    chronic: list[str] = field(default_factory=list)  # breached for the whole window
    selectors: dict[str, str | None] = field(default_factory=dict)

    @property
    def categories(self) -> list[str]:
        return [h.category for h in self.ranked]

    def hit_at(self, k: int) -> bool:
        return self.scenario.expected in self.categories[:k]

    @property
    def confident_wrong(self) -> bool:
        top = self.ranked[0]
        return top.category != self.scenario.expected and top.confidence >= CONFIDENT


@contextmanager
def suite_prometheus(
    workdir: Path, onset_minutes_ago: float = ONSET_MINUTES_AGO, severity: float = 1.0, ramp: float = RAMP_SECONDS
) -> Iterator[tuple[str, list[Scenario]]]:
    """Backfill every scenario's 3 h into one real Prometheus; yield its URL and the scenarios."""
    promstack.require_binaries()
    now = time.time()
    suite = scenarios(now - onset_minutes_ago * 60, severity, ramp)
    fleet = Fleet([h for s in suite for h in s.hosts], start=now - 3 * 3600 - 15 * 60)
    promstack.backfill(fleet, now, workdir / "tsdb", workdir)
    with Exporter(fleet, time.time) as exporter:
        proc, url = promstack.start_prometheus(workdir, exporter.port, None)
        try:
            time.sleep(6)  # one live scrape, so "now" has data from the exporter too
            yield url, suite
        finally:
            proc.stop()


@contextmanager
def _settings_for(prometheus_url: str, scenario: Scenario) -> Iterator[Settings]:
    """Prometheus, plus a fake Jaeger holding the scenario's 3 h of traces when it has any."""
    if scenario.traces is None:
        yield Settings(prometheus_url=prometheus_url)
        return
    now, onset = time.time(), scenario.hosts[0].onset
    us = lambda t: int(t * 1e6)  # noqa: E731
    factory = TraceFactory(seed=len(scenario.name), service=scenario.alert["service"])
    store = Store(factory.window(us(now - 3 * 3600 - 15 * 60), us(now) + 600_000_000, us(onset), scenario.traces))
    with FakeBackend("jaeger", store) as jaeger:
        yield Settings(prometheus_url=prometheus_url, traces_backend="jaeger", traces_url=jaeger.url)


def run_suite(prometheus_url: str, suite: list[Scenario]) -> list[Outcome]:
    outcomes = []
    for scenario in suite:
        start = datetime.now(UTC) - timedelta(minutes=2)
        target = target_from_alerts([scenario.alert], [start], ScopeConfig())
        with _settings_for(prometheus_url, scenario) as settings:
            began = time.perf_counter()
            analysis = analyse(settings, target, alerts=[AlertText(scenario.alert, {}, start)])
        outcomes.append(
            Outcome(
                scenario,
                analysis.hypotheses,
                analysis.collection.stack,
                time.perf_counter() - began,
                [f.key for f in analysis.findings if f.breached],
                [f.key for f in analysis.findings if f.chronic],
                analysis.collection.selectors,
            )
        )
    return outcomes


def score(outcomes: list[Outcome]) -> dict[str, float]:
    """AC@k = share of scenarios with the true cause in the top k; Avg@5 = mean of AC@1..AC@5."""
    n = len(outcomes)
    ac = {k: sum(o.hit_at(k) for o in outcomes) / n for k in range(1, 6)}
    healthy = [o for o in outcomes if o.scenario.expected == "no_clear_cause"]
    return {
        "AC@1": ac[1],
        "AC@3": ac[3],
        "Avg@5": sum(ac.values()) / 5,
        "confident_wrong": sum(o.confident_wrong for o in outcomes),
        "false_alarm_rate": sum(o.ranked[0].category != "no_clear_cause" for o in healthy) / max(1, len(healthy)),
        "healthy_confident_wrong": sum(o.confident_wrong for o in healthy),
    }
