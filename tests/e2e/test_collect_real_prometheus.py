"""Collection and scoping against a real Prometheus holding 3 h of backfilled fleet data."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rca.collect.profile import load_profile
from rca.collect.target import target_from_alerts
from rca.config import ScopeConfig, Settings
from rca.pipeline import analyse
from tests.e2e import promstack
from tests.e2e.scenarios import LORA_HOST, MODEL, NAMESPACE, Fleet, Host, address

pytestmark = pytest.mark.e2e
WITH_PROCESS = frozenset({"serving", "dcgm", "node", "process"})
# An operator's keep-list without the engine's gauges and preemption counter, and without the node's
# CPU seconds: the histograms and the other node_exporter series are still scraped.
THROTTLE_STEP_MINUTES = 4
KEEP_LIST_DROPS = frozenset(
    {
        "vllm:num_requests_waiting",
        "vllm:num_requests_waiting_by_reason",
        "vllm:num_requests_running",
        "vllm:num_preemptions_total",
        "node_cpu_seconds_total",
    }
)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("collect")
    now = time.time()
    onset = now - 20 * 60
    fleet = Fleet(
        [
            Host("gpu-a", "arrival_surge", onset),
            Host("gpu-b", None, onset),
            Host("gpu-c", "cpu_launch_overhead", onset),
            Host("sg-a", "prefix_cache_miss", onset, stack="sglang"),
            Host("tgi-a", "arrival_surge", onset, stack="tgi"),
            Host("tri-a", "arrival_surge", onset, stack="triton"),
            Host("v0-a", "kv_memory_pressure", onset, stack="vllm_v0"),
            Host("trt-a", "arrival_surge", onset, stack="triton_trtllm"),
            Host(
                "k8s-a",
                "cpu_quota_throttling",
                onset,
                pod="vllm-k8s-a-0",
                exporters=frozenset({"serving", "dcgm", "cadvisor"}),
            ),
            Host("nopin-a", "cpu_launch_overhead", onset, isolcpus=False),
            Host("v08-a", "prefix_cache_miss", onset, stack="vllm_v08", normal=LORA_HOST),  # serves LoRA adapters
            Host("proc-a", "cpu_launch_overhead", onset, isolcpus=False, exporters=WITH_PROCESS),
            Host("proc-b", "cpu_launch_overhead", onset, exporters=WITH_PROCESS),
            Host("k8s-b", "cpu_affinity_numa", onset, pod="vllm-k8s-b-0", addresses=True),
            Host("multi-a", "gpu_degraded", onset, gpus=4),
            Host("keep-a", "kv_memory_pressure", onset, dropped=KEEP_LIST_DROPS),
            Host(
                "k8s-c",
                "cpu_quota_throttling",
                onset,
                pod="vllm-k8s-c-0",
                exporters=frozenset({"serving", "dcgm", "cadvisor"}),
                dropped=frozenset({"container_cpu_cfs_throttled_periods_total", "container_cpu_usage_seconds_total"}),
            ),
            # A host whose DCGM exporter steps to clock-throttle reasons 72 (0x48: HW slowdown + HW
            # thermal) and an SM clock of 990 MHz from 1,530, four minutes ago (THROTTLE_STEP_MINUTES).
            Host(
                "thr-a",
                None,
                now - THROTTLE_STEP_MINUTES * 60,
                normal=(("sm_clock", 1530.0),),
                extra=(("throttle", 72.0), ("sm_clock", 990.0)),
                ramp=1.0,
            ),
            Host(
                "sync-a",
                "host_device_sync",
                onset,
                dropped=frozenset({"DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"}),
            ),
        ],
        start=now - 3 * 3600 - 15 * 60,
    )
    with promstack.fleet_prometheus(fleet, now, workdir) as url:
        yield url


def _analyse(
    url: str | None, labels: dict[str, str], settings: Settings | None = None, started_minutes_ago: float = 1
) -> dict:
    settings = settings or Settings(prometheus_url=url)
    start = datetime.now(UTC) - timedelta(minutes=started_minutes_ago)
    target = target_from_alerts([labels], [start], ScopeConfig())
    analysis = analyse(settings, target)
    return {
        "analysis": analysis,
        "findings": {f.key: f for f in analysis.findings},
        "top": analysis.hypotheses[0].category if analysis.hypotheses else None,
    }


def test_alert_on_one_instance_is_not_diluted_by_its_healthy_neighbour(prometheus: str) -> None:
    faulty = _analyse(prometheus, {"instance": "gpu-a:8000", "model_name": MODEL, "job": "vllm"})
    healthy = _analyse(prometheus, {"instance": "gpu-b:8000", "model_name": MODEL, "job": "vllm"})
    assert faulty["top"] == "arrival_surge"
    assert faulty["findings"]["queue_median"].breached
    assert faulty["findings"]["queue_median"].value > 10  # the faulty host's own queue, not an average
    assert healthy["top"] == "no_clear_cause"
    assert not healthy["findings"]["queue_median"].breached


def test_dcgm_alert_naming_the_host_in_Hostname_reaches_serving_and_node_series(prometheus: str) -> None:
    # `instance` is the DCGM exporter's pod IP, which no other series shares; `Hostname` is the node.
    result = _analyse(
        prometheus,
        {"alertname": "GPUUtilLow", "Hostname": "gpu-c", "instance": "10.0.0.7:9400", "gpu": "0", "job": "dcgm"},
    )
    selectors = result["analysis"].collection.selectors
    assert all("gpu-c" in (selectors[scope] or "") for scope in ("serving", "gpu", "node")), selectors
    assert result["findings"]["cpu_bound_ratio"].breached
    assert result["top"] == "cpu_launch_overhead"


def test_relabelled_bare_and_fqdn_instances_match_the_same_host(prometheus: str) -> None:
    bare = _analyse(prometheus, {"instance": "gpu-c", "job": "node"})
    fqdn = _analyse(prometheus, {"instance": "gpu-c.cluster.example:9100", "job": "node"})
    for result in (bare, fqdn):
        assert result["findings"]["cpu_bound_ratio"].breached
        assert result["top"] == "cpu_launch_overhead"
        assert result["analysis"].collection.selectors["gpu"] is not None  # DCGM found via Hostname


def test_unknown_target_yields_unavailable_findings_not_a_crash(prometheus: str) -> None:
    result = _analyse(prometheus, {"instance": "no-such-host:8000"})
    assert {f.status for f in result["findings"].values()} == {"unavailable"}
    assert "no serving series match this target" in result["findings"]["queue_median"].detail
    gap = result["analysis"].gap  # blind: inconclusive, never a cause with a confidence
    assert gap is not None and gap.reason == "no_data" and result["analysis"].hypotheses == []


def test_prometheus_down_yields_unavailable_findings_quickly() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    started = time.monotonic()
    result = _analyse(f"http://127.0.0.1:{closed}", {"instance": "gpu-a:8000"})
    assert time.monotonic() - started < 10
    assert result["analysis"].collection.prometheus_error
    assert all("unavailable" in f.detail for f in result["findings"].values())
    gap = result["analysis"].gap
    assert gap is not None and gap.reason == "prometheus_unreachable" and result["analysis"].hypotheses == []


def test_step_keeps_every_series_under_the_point_limit(prometheus: str) -> None:
    result = _analyse(prometheus, {"instance": "gpu-a:8000"})
    window = result["analysis"].collection.window
    points = (window.end - window.start).total_seconds() / window.step_seconds
    assert points <= Settings().max_points_per_series < 11000


@pytest.mark.parametrize(
    ("labels", "stack", "breached", "top"),
    [
        ({"instance": "sg-a:30000", "model_name": MODEL}, "sglang", "prefix_cache_hit_rate", "prefix_cache_miss"),
        ({"instance": "tgi-a:9000"}, "tgi", "queue_median", "arrival_surge"),
        ({"instance": "tri-a:8002", "model": "llama"}, "triton", "queue_median", "arrival_surge"),
        ({"instance": "v0-a:8000", "model_name": MODEL}, "vllm_v0", "kv_cache_usage", "kv_memory_pressure"),
        ({"instance": "trt-a:8002", "model": "tensorrt_llm"}, "triton", "queue_median", "arrival_surge"),
    ],
)
def test_serving_stack_is_detected_from_its_metric_names(
    prometheus: str, labels: dict[str, str], stack: str, breached: str, top: str
) -> None:
    result = _analyse(prometheus, labels)
    assert result["analysis"].collection.stack == stack
    assert result["findings"][breached].breached, result["findings"][breached].detail
    assert result["top"] == top


def test_signal_without_a_source_on_the_stack_is_not_measurable_rather_than_healthy(prometheus: str) -> None:
    findings = _analyse(prometheus, {"instance": "tgi-a:9000"})["findings"]
    assert findings["prefix_cache_hit_rate"].status == "not_measurable"
    assert "not measurable on this stack (tgi)" in findings["prefix_cache_hit_rate"].detail
    assert findings["preemption_rate"].status == "not_measurable"
    assert findings["queue_median"].status == "breached"


K8S_ALERT = {
    "alertname": "LLMInterTokenLatencyHigh",
    "instance": "k8s-a:8000",
    "namespace": NAMESPACE,
    "pod": "vllm-k8s-a-0",
    "model_name": MODEL,
    "job": "vllm",
}


def test_cpu_bound_ratio_comes_from_cadvisor_when_node_exporter_is_absent(prometheus: str) -> None:
    result = _analyse(prometheus, K8S_ALERT)
    selectors = result["analysis"].collection.selectors
    assert selectors["node"] is None  # no node_exporter on this host
    assert selectors["pod"] == f'namespace="{NAMESPACE}",pod="vllm-k8s-a-0"'
    cpu = result["findings"]["cpu_bound_ratio"]
    assert cpu.source and cpu.source.startswith("cAdvisor"), cpu.detail
    assert cpu.breached and 0.82 < cpu.value < 1.0  # 4 quota cores, 90 % busy (the pod cgroup is not counted)
    throttling = result["findings"]["cpu_throttling"]
    assert throttling.breached and throttling.value == pytest.approx(0.6, abs=0.08)
    assert result["top"] == "cpu_quota_throttling"


def test_pod_scope_without_a_pod_in_the_alert_falls_through_to_node_exporter(prometheus: str) -> None:
    result = _analyse(prometheus, {"instance": "gpu-c", "job": "node"})
    assert result["analysis"].collection.selectors["pod"] is None
    assert result["findings"]["cpu_bound_ratio"].source == "node_exporter busy share of the pinned (isolcpus) cores"
    assert result["findings"]["cpu_throttling"].status == "unavailable"
    assert "no pod series match this target" in result["findings"]["cpu_throttling"].detail


def test_configured_pinned_cpu_list_is_used_when_the_host_has_no_isolcpus(prometheus: str, tmp_path: Path) -> None:
    # nopin-a pins the engine to CPUs 4-7 without isolcpus: only the operator's list names them.
    labels = {"instance": "nopin-a", "job": "node"}
    unconfigured = _analyse(prometheus, labels)["findings"]["cpu_bound_ratio"]
    assert unconfigured.source == "node_exporter busy share of all cores (no pinned cores are known)"
    assert not unconfigured.breached  # 4 busy cores diluted by 4 quiet ones

    config = tmp_path / "rca.yaml"
    config.write_text("pinned_cpus: 4-7\n")
    result = _analyse(prometheus, labels, Settings(prometheus_url=prometheus, config_file=config))
    cpu = result["findings"]["cpu_bound_ratio"]
    assert cpu.source == "node_exporter busy share of the configured pinned cores (pinned_cpus)"
    assert 'cpu=~"4|5|6|7"' in (cpu.query or "")
    assert cpu.breached and cpu.value > 0.9
    assert result["top"] == "cpu_launch_overhead"


def test_decoupled_trtllm_queue_is_read_from_the_backend_not_the_idle_core_gauge(prometheus: str) -> None:
    queue = _analyse(prometheus, {"instance": "trt-a:8002"})["findings"]["queue_median"]
    assert queue.breached and queue.value > 10
    assert "TRT-LLM" in (queue.source or "")


def test_vllm_v0_reads_its_own_cache_gauges(prometheus: str) -> None:
    findings = _analyse(prometheus, {"instance": "v0-a:8000", "model_name": MODEL})["findings"]
    assert "vllm:gpu_cache_usage_perc" in (findings["kv_cache_usage"].query or "")
    assert findings["prefix_cache_hit_rate"].status == "ok"
    assert "V0" in (findings["prefix_cache_hit_rate"].source or "")
    assert "time_per_output_token" in (findings["itl_p95"].query or "")
    # No reasons gauge; V0 exports lora_requests_info with max_lora="0" when LoRA is off: none wait for it.
    assert "lora_requests_info" in (findings["requests_deferred"].query or "")
    assert findings["requests_deferred"].status == "ok" and findings["requests_deferred"].value == 0


def test_vllm_08_reads_prefix_hits_from_its_block_counters(prometheus: str) -> None:
    result = _analyse(prometheus, {"instance": "v08-a:8000", "model_name": MODEL})
    finding = result["findings"]["prefix_cache_hit_rate"]
    assert result["analysis"].collection.stack == "vllm_v0"
    assert "gpu_prefix_cache_hits_total" in (finding.query or "")
    assert finding.breached and finding.value is not None and 0.2 < finding.value < 0.4
    assert result["top"] == "prefix_cache_miss"


def test_engine_pod_scraped_by_pod_ip_reaches_its_nodes_cpus_through_kube_pod_info(prometheus: str) -> None:
    result = _analyse(
        prometheus,
        {
            "instance": f"{address('pod', 'k8s-b')}:8000",
            "namespace": NAMESPACE,
            "pod": "vllm-k8s-b-0",
            "model_name": MODEL,
        },
    )
    target = result["analysis"].target
    assert {"k8s-b", address("node", "k8s-b")} <= set(target.aliases)
    selectors = result["analysis"].collection.selectors
    assert address("node", "k8s-b").replace(".", "\\\\.") in (selectors["node"] or "")
    assert 'Hostname=~"k8s-b' in (selectors["gpu"] or "")
    assert result["top"] == "cpu_affinity_numa"


def test_a_node_does_not_lead_back_to_the_pods_on_it(prometheus: str) -> None:
    """kube_pod_info joins a pod IP to its node, never a node to one of its many pods."""
    result = _analyse(prometheus, {"instance": f"{address('node', 'k8s-b')}:9100", "job": "node"})
    target = result["analysis"].target
    assert "k8s-b" in target.aliases
    assert address("pod", "k8s-b") not in target.aliases
    assert result["analysis"].collection.selectors["node"] is not None


def test_process_exporter_cpu_is_divided_by_the_isolated_cores(prometheus: str) -> None:
    cpu = _analyse(prometheus, {"instance": "proc-b:9256", "job": "process"})["findings"]["cpu_bound_ratio"]
    assert cpu.source == "process-exporter serving process CPU per pinned (isolcpus) core"
    assert 'groupname=~"(?i).*(vllm|sglang|text\\\\-generation|tritonserver).*"' in (cpu.query or "")
    # About 0.95 (the pinned cores' busy share); dividing by all 8 cores would give under 0.5. A
    # loaded machine delays scrapes of the live exporter, which reads a little low, never near that.
    assert cpu.breached and 0.85 < cpu.value < 1.0


def test_process_exporter_cpu_is_divided_by_the_configured_cpu_list(prometheus: str, tmp_path: Path) -> None:
    config = tmp_path / "rca.yaml"
    config.write_text("pinned_cpus: 4-7\nprocess_groups: [engine]\n")
    settings = Settings(prometheus_url=prometheus, config_file=config)
    cpu = _analyse(prometheus, {"instance": "proc-a:9256"}, settings)["findings"]["cpu_bound_ratio"]
    assert cpu.source == "process-exporter serving process CPU per configured pinned core (pinned_cpus)"
    assert cpu.query and cpu.query.endswith("/ 4") and "(?i).*(engine).*" in cpu.query
    assert cpu.breached and 0.85 < cpu.value < 1.0


def test_process_groups_that_match_no_group_fall_through_to_node_exporter(prometheus: str, tmp_path: Path) -> None:
    config = tmp_path / "rca.yaml"
    config.write_text("pinned_cpus: 4-7\nprocess_groups: [llama-server]\n")
    settings = Settings(prometheus_url=prometheus, config_file=config)
    cpu = _analyse(prometheus, {"instance": "proc-a:9256"}, settings)["findings"]["cpu_bound_ratio"]
    assert cpu.source == "node_exporter busy share of the configured pinned cores (pinned_cpus)"


def test_alert_naming_only_its_pod_reaches_the_node_through_kube_pod_info(prometheus: str) -> None:
    result = _analyse(
        prometheus, {"alertname": "LLMInterTokenLatencyHigh", "namespace": NAMESPACE, "pod": "vllm-k8s-b-0"}
    )
    target = result["analysis"].target
    assert target.host is None
    assert {"k8s-b", address("node", "k8s-b")} <= set(target.aliases)
    selectors = result["analysis"].collection.selectors
    assert all(selectors[scope] for scope in ("serving", "gpu", "node")), selectors
    assert result["top"] == "cpu_affinity_numa"


def test_one_throttled_gpu_of_four_is_found_and_named_by_its_uuid(prometheus: str) -> None:
    result = _analyse(prometheus, {"instance": "multi-a:8000", "model_name": MODEL})
    clock = result["findings"]["sm_clock"]
    assert clock.breached and clock.value is not None and clock.value < 1500
    assert clock.series_labels is not None and clock.series_labels["UUID"].endswith("-0000")
    assert "[worst of 4 series]" in clock.detail
    assert result["top"] == "gpu_degraded"


def test_throttle_reasons_and_a_stepped_clock_are_read_as_the_exporter_serves_them(prometheus: str) -> None:
    """Ten minutes judged, the last four at throttle reasons 72 and 990 MHz: the median of the
    minutes is 0 and about 1,530 MHz; the findings read 72 with its two bits, and 990 MHz now."""
    result = _analyse(prometheus, {"instance": "thr-a:8000", "model_name": MODEL}, started_minutes_ago=10)
    throttle = result["findings"]["gpu_throttle_reasons"]
    assert throttle.value == 72 and throttle.breached
    assert "0x48 (HwSlowdown, HwThermalSlowdown) now; also seen since" in throttle.detail, throttle.detail
    assert "0x0 (none)" in throttle.detail and "0x24" not in throttle.detail
    clock = result["findings"]["sm_clock"]
    assert clock.value is not None and abs(clock.value - 990) < 10, clock.detail
    assert clock.breached and clock.baseline is not None and abs(clock.baseline - 1530) < 10
    assert "MHz now (" in clock.detail and "on average since" in clock.detail


# What each stack cannot measure at all (the profile has no source for it), as docs/diagnosis.md says.
NOT_MEASURABLE = {
    "gpu-b:8000": set(),  # vLLM V1
    "v0-a:8000": set(),  # requests_deferred from lora_requests_info (LoRA off: 0)
    "v08-a:8000": set(),  # requests_deferred from lora_requests_info (the host serves LoRA adapters)
    "sg-a:30000": {"preemption_rate", "requests_deferred"},
    "tgi-a:9000": {"prefix_cache_hit_rate", "preemption_rate", "requests_deferred"},
    "tri-a:8002": {"prefix_cache_hit_rate", "requests_deferred"},  # preemptions: TRT-LLM's paused requests
}


@pytest.mark.parametrize("instance", sorted(NOT_MEASURABLE))
def test_every_serving_query_of_the_stack_runs_and_returns_data(prometheus: str, instance: str) -> None:
    """Each stack's own alternatives are valid PromQL with data on real Prometheus; what a stack
    cannot measure is `not_measurable`, never `unavailable` or silently healthy."""
    result = _analyse(prometheus, {"instance": instance})
    profile = {s.id: s for s in load_profile().signals}
    serving = {key: f for key, f in result["findings"].items() if key in profile and profile[key].scope == "serving"}
    assert {k for k, f in serving.items() if f.status == "not_measurable"} == NOT_MEASURABLE[instance]
    if instance != "tri-a:8002":  # the fake Triton exports no prompt-length or ITL histograms
        missing = {k: f.detail for k, f in serving.items() if f.status == "unavailable"}
        assert not missing, missing


def test_a_keep_list_without_the_engines_gauges_is_read_through_its_histograms(prometheus: str) -> None:
    """Little's law: the seconds spent waiting (running) per second is the mean number waiting
    (running); preemptions are also counted per finished request. The node stays in scope through
    node_exporter's other series."""
    result = _analyse(prometheus, {"instance": "keep-a:8000", "job": "vllm"})
    findings = result["findings"]
    assert findings["queue_median"].source.startswith("vLLM queue-time histogram"), findings["queue_median"].detail
    assert findings["queue_median"].breached
    assert findings["running_batch"].source.startswith("vLLM inference-time histogram")
    assert findings["running_batch"].value == pytest.approx(12.0, rel=0.3)
    assert findings["preemption_rate"].source.startswith("vLLM preemptions per finished request")
    assert findings["preemption_rate"].breached
    assert result["analysis"].collection.selectors["node"] is not None
    assert findings["context_switch_rate"].status in ("ok", "breached")
    assert result["top"] == "kv_memory_pressure"


def test_cpu_throttling_falls_back_to_throttled_seconds_on_their_own_scale(prometheus: str) -> None:
    alert = K8S_ALERT | {"instance": "k8s-c:8000", "pod": "vllm-k8s-c-0"}
    result = _analyse(prometheus, alert)
    assert result["analysis"].collection.selectors["pod"] is not None  # found without container_cpu_usage
    throttling = result["findings"]["cpu_throttling"]
    assert throttling.source.startswith("cAdvisor CFS throttled seconds"), throttling.detail
    assert throttling.threshold == 0.05
    assert throttling.breached and throttling.value == pytest.approx(0.3 * 0.6, rel=0.2)
    assert result["top"] == "cpu_quota_throttling"


def test_pcie_traffic_falls_back_to_dcgms_default_throughput_counters(prometheus: str) -> None:
    result = _analyse(prometheus, {"instance": "sync-a:8000", "job": "vllm"})
    pcie = result["findings"]["pcie_traffic"]
    assert pcie.source.startswith("DCGM PCIe TX+RX throughput counters"), pcie.detail
    assert pcie.breached
    assert result["top"] == "host_device_sync"
