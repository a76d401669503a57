"""Alert labels -> target host and scope selectors (rca.collect.target)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from rca.collect.target import Target, host_from_label, host_regex, scope_candidates, target_from_alerts
from rca.config import ScopeConfig

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
CONFIG = ScopeConfig()


def promql_unescape(text: str) -> str:
    """What PromQL makes of the inside of a double-quoted string (only the escapes we emit)."""
    return re.sub(r'\\(["\\n])', lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), text)


def full_match(regex_in_promql_string: str, value: str) -> bool:
    # Prometheus anchors label regexes (RE2, ^(?:...)$); re.fullmatch is the stand-in.
    return re.fullmatch(promql_unescape(regex_in_promql_string), value) is not None


def selector_regex(selector: str, label: str) -> str:
    match = re.search(label + r'=~"((?:[^"\\]|\\.)*)"', selector)
    assert match, f"no {label}=~ matcher in {selector!r}"
    return match.group(1)


# ---- host_from_label ----


@pytest.mark.parametrize(
    ("label", "host"),
    [
        ("gpu-node-1:8000", "gpu-node-1"),
        ("gpu-node-1", "gpu-node-1"),
        ("gpu-node-1.example.com:9100", "gpu-node-1"),
        ("gpu-node-1.example.com", "gpu-node-1"),
        ("10.0.0.5:9100", "10.0.0.5"),
        ("10.0.0.5", "10.0.0.5"),
        ("[2001:db8::1]:8000", "2001:db8::1"),
        ("[::1]:9400", "::1"),
        ("  gpu-node-1:8000 ", "gpu-node-1"),
    ],
)
def test_host_from_label_drops_port_and_domain(label: str, host: str) -> None:
    assert host_from_label(label) == host


def test_host_from_label_keeps_last_group_of_bare_ipv6() -> None:
    # Without brackets there is no port; `:1` is part of the address.
    assert host_from_label("2001:db8::1") == "2001:db8::1"


# ---- host_regex ----


@pytest.mark.parametrize(
    "spelling", ["gpu-node-1", "gpu-node-1:8000", "gpu-node-1.example.com:9100", "gpu-node-1.example.com"]
)
def test_host_regex_matches_every_spelling_of_the_host(spelling: str) -> None:
    assert full_match(host_regex("gpu-node-1"), spelling)


@pytest.mark.parametrize(
    "other",
    [
        "gpu-node-10:8000",
        "gpu-node-10",
        "xgpu-node-1",
        "gpu-node-1x:8000",
        "gpu-node-1:",
        "gpu-node-1:80a",
        "gpu-node-2:8000",
    ],
)
def test_host_regex_rejects_other_hosts(other: str) -> None:
    assert not full_match(host_regex("gpu-node-1"), other)


def test_host_regex_for_ipv4_matches_only_that_address() -> None:
    regex = host_regex("10.0.0.5")
    assert full_match(regex, "10.0.0.5")
    assert full_match(regex, "10.0.0.5:9100")
    assert not full_match(regex, "10.0.0.50:9100")
    assert not full_match(regex, "10x0x0x5:9100")  # dots are literal
    assert not full_match(regex, "110.0.0.5")


def test_host_regex_dots_are_escaped_twice_for_the_promql_string() -> None:
    # Inside "...", PromQL turns `\\.` into `\.`; a single backslash would be an invalid escape.
    assert "\\\\." in host_regex("10.0.0.5")
    assert "\\\\." in host_regex("gpu-node-1")


def test_host_regex_for_ipv6_matches_the_bracketed_instance() -> None:
    host = host_from_label("[2001:db8::1]:8000")
    regex = host_regex(host)
    assert full_match(regex, "[2001:db8::1]:8000")
    assert full_match(regex, "[2001:db8::1]")
    assert full_match(regex, "2001:db8::1")
    assert not full_match(regex, "[2001:db8::10]:8000")


# ---- target_from_alerts ----


def test_target_picks_the_most_common_host_across_exporters() -> None:
    alerts = [
        {"alertname": "VllmQueueHigh", "instance": "gpu-node-1:8000", "model_name": "llama"},
        {"alertname": "GpuUtilLow", "Hostname": "gpu-node-1", "gpu": "0"},
        {"alertname": "NodeCpuHigh", "instance": "gpu-node-1"},
        {"alertname": "NodeCpuHigh", "instance": "gpu-node-2.example.com:9100"},
    ]
    target = target_from_alerts(alerts, [T0] * len(alerts), CONFIG)
    assert target.host == "gpu-node-1"


def test_target_prefers_host_labels_in_configured_order_within_one_alert() -> None:
    config = ScopeConfig(host_labels=["Hostname", "instance"])
    alerts = [{"alertname": "GpuUtilLow", "instance": "10.0.0.7:9400", "Hostname": "gpu-node-3"}]
    assert target_from_alerts(alerts, [T0], config).host == "gpu-node-3"
    config = ScopeConfig(host_labels=["instance", "Hostname"])
    assert target_from_alerts(alerts, [T0], config).host == "10.0.0.7"


def test_target_without_host_labels_has_no_host() -> None:
    target = target_from_alerts([{"alertname": "X", "model_name": "llama"}], [T0], CONFIG)
    assert target.host is None
    assert target.labels == {"model_name": "llama"}


def test_target_keeps_scope_labels_only_when_alerts_agree() -> None:
    alerts = [
        {"alertname": "A", "instance": "h:8000", "namespace": "serving", "pod": "vllm-0", "model_name": "llama"},
        {"alertname": "B", "instance": "h:8000", "namespace": "serving", "pod": "vllm-1", "model_name": "llama"},
        {"alertname": "C", "instance": "h"},  # lacks the scope labels: does not veto them
    ]
    target = target_from_alerts(alerts, [T0] * 3, CONFIG)
    assert target.labels == {"namespace": "serving", "model_name": "llama"}


def test_target_ignores_labels_that_are_not_scope_labels() -> None:
    alerts = [{"alertname": "A", "instance": "h:8000", "severity": "page", "gpu": "0"}]
    assert target_from_alerts(alerts, [T0], CONFIG).labels == {}


def test_target_starts_at_the_earliest_alert_and_lists_alertnames_once() -> None:
    alerts = [
        {"alertname": "B", "instance": "h"},
        {"alertname": "A", "instance": "h"},
        {"alertname": "B", "instance": "h"},
    ]
    starts = [T0, T0 - timedelta(minutes=7), T0 + timedelta(minutes=3)]
    target = target_from_alerts(alerts, starts, CONFIG)
    assert target.alert_start == T0 - timedelta(minutes=7)
    assert target.alertnames == ["A", "B"]


# ---- scope_candidates ----


def make_target(host: str | None = "gpu-node-1", **labels: str) -> Target:
    return Target(host=host, labels=labels, alert_start=T0)


def test_serving_candidates_start_with_pod_then_fall_back_to_host() -> None:
    target = make_target(namespace="serving", pod="vllm-0", model_name="llama", job="vllm")
    serving = scope_candidates(target, CONFIG)["serving"]
    pod_first = [i for i, s in enumerate(serving) if 'pod="vllm-0"' in s]
    host_based = [i for i, s in enumerate(serving) if s.startswith("instance=~")]
    assert pod_first and host_based
    assert max(pod_first) < min(host_based)
    assert serving[0] == 'namespace="serving",pod="vllm-0",model_name="llama",job="vllm"'
    assert f'instance=~"{host_regex("gpu-node-1")}"' in serving
    assert any('model_name="llama"' in s and s.startswith("instance=~") for s in serving)


def test_host_candidates_try_instance_then_the_other_host_labels_then_aliases() -> None:
    # node_exporter relabelled to carry the host in `nodename`, and an alias found in Prometheus.
    target = Target(host="gpu-node-1", labels={}, alert_start=T0, aliases=["10.0.3.7"])
    assert target.host_candidates() == ["gpu-node-1", "10.0.3.7"]
    node = scope_candidates(target, CONFIG)["node"]
    labels = ["instance"] + [name for name in CONFIG.host_labels if name != "instance"]
    assert node == [f'{label}=~"{host_regex(host)}"' for host in ("gpu-node-1", "10.0.3.7") for label in labels]
    assert full_match(selector_regex(node[labels.index("nodename")], "nodename"), "gpu-node-1.example.com")
    assert full_match(selector_regex(node[len(labels)], "instance"), "10.0.3.7:9100")


def test_serving_candidates_narrow_before_they_widen() -> None:
    serving = scope_candidates(make_target(model_name="llama", job="vllm"), CONFIG)["serving"]
    counts = [s.count("=") for s in serving]  # one `=` per matcher (=~ counts once too)
    assert counts == sorted(counts, reverse=True)
    assert len(serving) == len(set(serving))


def test_serving_candidates_use_model_alone_without_host_or_pod() -> None:
    candidates = scope_candidates(make_target(host=None, model_name="llama"), CONFIG)
    assert candidates["serving"] == ['model_name="llama"']
    assert candidates["gpu"] == []
    assert candidates["node"] == []
    assert candidates["pod"] == []


def test_pod_candidates_only_when_the_alert_names_a_pod() -> None:
    assert scope_candidates(make_target(namespace="serving", pod="vllm-0"), CONFIG)["pod"] == [
        'namespace="serving",pod="vllm-0"'
    ]
    assert scope_candidates(make_target(pod="vllm-0"), CONFIG)["pod"] == ['pod="vllm-0"']
    assert scope_candidates(make_target(namespace="serving"), CONFIG)["pod"] == []  # a namespace is many pods
    assert scope_candidates(make_target(), CONFIG)["pod"] == []


def test_gpu_candidates_try_pod_then_each_gpu_host_label() -> None:
    gpu = scope_candidates(make_target(namespace="serving", pod="vllm-0"), CONFIG)["gpu"]
    assert gpu[0] == 'namespace="serving",pod="vllm-0"'
    assert [s.split("=~")[0] for s in gpu[1:]] == CONFIG.gpu_host_labels


def test_host_selectors_match_each_exporter_spelling() -> None:
    candidates = scope_candidates(make_target(), CONFIG)
    serving = selector_regex(next(s for s in candidates["serving"] if s.startswith("instance=~")), "instance")
    assert full_match(serving, "gpu-node-1:8000")
    node = selector_regex(candidates["node"][0], "instance")
    assert full_match(node, "gpu-node-1")
    dcgm = selector_regex(candidates["gpu"][0], "Hostname")
    assert full_match(dcgm, "gpu-node-1")
    assert not full_match(dcgm, "gpu-node-11")


def test_label_values_with_quotes_backslashes_and_newlines_are_escaped() -> None:
    tricky = 'we"ird\\pod\nx'
    serving = scope_candidates(make_target(host=None, pod=tricky, namespace="ns"), CONFIG)["serving"]
    matcher = re.search(r'pod="((?:[^"\\\n]|\\.)*)"', serving[0])
    assert matcher, serving[0]
    assert matcher.end() == len(serving[0])  # the quoted string ends where the matcher ends
    assert promql_unescape(matcher.group(1)) == tricky


def test_target_keeps_every_named_host_as_a_fallback_best_first() -> None:
    # DCGM's `instance` is the exporter's address; `Hostname` names the GPU node.
    alerts = [{"alertname": "GpuUtilLow", "instance": "10.0.0.7:9400", "Hostname": "gpu-node-3"}]
    target = target_from_alerts(alerts, [T0], CONFIG)
    assert target.host == "10.0.0.7"  # `instance` comes first in the default host_labels
    assert target.host_candidates()[0] == target.host
    assert set(target.host_candidates()) == {"10.0.0.7", "gpu-node-3"}
    gpu = scope_candidates(target, CONFIG)["gpu"]
    assert any(full_match(selector_regex(s, "Hostname"), "gpu-node-3") for s in gpu if s.startswith("Hostname"))
    first_host_selector = next(s for s in gpu if s.startswith("Hostname"))
    assert full_match(selector_regex(first_host_selector, "Hostname"), "10.0.0.7")


def test_target_host_candidates_fall_back_to_the_single_host() -> None:
    assert make_target().host_candidates() == ["gpu-node-1"]
    assert make_target(host=None).host_candidates() == []
