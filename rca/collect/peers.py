"""What the metrics know about a fleet incident's affected hosts and their healthy peers, for the
common factor (rca.domain.factor): a handful of fleet-wide instant queries, whatever the fleet's
size (`PEER_QUERIES` at most).

The serving instances come from the profile's serving probe, with their model, `namespace` and
`job`; the peers are those that serve the affected hosts' model (else their namespace, else their
job) and did not alert. The engine's info series (`vllm:cache_config_info`) adds its flags;
kube-state-metrics each pod's images
(`kube_pod_container_info`), node (`kube_pod_info`), node labels (`kube_node_labels`) and start
time (`kube_pod_start_time`); the engine's `process_start_time_seconds` a start time where there is
no pod. Every one of these series is optional: what is missing is simply not compared.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from rca.collect.promql import promql_string
from rca.domain.factor import HostFacts
from rca.domain.hosts import host_from_label

Query = Callable[[str], list[dict]]  # an instant query: the vector's items, each with its `metric` labels
# What makes a healthy instance a peer, in order: the model it serves (vLLM's and SGLang's
# `model_name`, Triton's and TGI's `model`), else its namespace, else its job.
PEER_GROUPS = ("model_name", "model", "namespace", "job")
# Serving instances, the engine's configuration, containers, pods, node labels, pod and process starts.
PEER_QUERIES = 7
SERVING_LABELS = "job, instance, namespace, pod, model_name, model"  # what a serving instance is read with
NODE_LABEL = "label_"  # kube_node_labels' prefix of a Kubernetes node label
ENGINE_CONFIG = "vllm:cache_config_info"  # the engine's own info series: its cache flags, one label each
NOT_CONFIG = frozenset({"__name__", "job", "instance", "namespace", "pod", "model_name", "engine"})


@dataclass
class _Instance:
    """One serving instance as discovery and kube-state-metrics see it."""

    labels: dict[str, str]
    attributes: dict[str, set[str]] = field(default_factory=dict)
    started: datetime | None = None

    @property
    def pod(self) -> tuple[str, str] | None:
        namespace, pod = self.labels.get("namespace"), self.labels.get("pod")
        return (namespace, pod) if namespace and pod else None

    def names(self) -> set[str]:
        """The names an alert may call this instance's host by."""
        names = {host_from_label(self.labels["instance"])} if self.labels.get("instance") else set()
        return names | {self.labels[k] for k in ("pod",) if self.labels.get(k)} | self.attributes.get("node", set())

    def add(self, attribute: str, value: str) -> None:
        self.attributes.setdefault(attribute, set()).add(value)


def _regex(values: Iterable[str]) -> str:
    return promql_string("|".join(re.escape(v) for v in sorted(set(values))))


def _labels(items: list[dict]) -> list[dict[str, str]]:
    return [item.get("metric", {}) for item in items]


def _time(items: list[dict], key: Callable[[dict[str, str]], object]) -> dict[object, datetime]:
    """Each item's value (a unix time) by `key` of its labels, the latest where several."""
    times: dict[object, datetime] = {}
    for item in items:
        try:
            at = datetime.fromtimestamp(float(item["value"][1]), UTC)
        except (KeyError, IndexError, TypeError, ValueError, OverflowError):
            continue
        k = key(item.get("metric", {}))
        times[k] = max(at, times.get(k, at))
    return times


def fleet_facts(query: Query, serving_probe: str, affected_hosts: Sequence[str]) -> list[HostFacts]:
    """The affected hosts' facts and their peers', one HostFacts per host (an instance's host
    name, or the affected name that matched it); an affected host not seen serving has none."""
    affected = set(affected_hosts)
    serving = f'{{__name__=~"{promql_string(serving_probe)}"}}'
    instances = [_Instance(labels) for labels in _labels(query(f"group by ({SERVING_LABELS}) ({serving})"))]
    pods = {i.pod for i in instances if i.pod}
    if pods:
        _read_pods(query, instances, {namespace for namespace, _ in pods})
    ours = [i for i in instances if i.names() & affected]
    group = next((name for name in PEER_GROUPS if all(i.labels.get(name) for i in ours)), None)
    values = {i.labels[group] for i in ours} if group else set()
    peers = [i for i in instances if i not in ours and group and i.labels.get(group) in values]
    _read_engine_config(query, ours + peers)
    _read_process_starts(query, [i for i in ours + peers if i.started is None])
    for i in ours + peers:
        if model := i.labels.get("model_name") or i.labels.get("model"):
            i.add("model", model)
    return _by_host(ours, peers, affected)


def _read_pods(query: Query, instances: list[_Instance], namespaces: set[str]) -> None:
    """Images, node, node labels and start time of the instances' pods (kube-state-metrics)."""
    by_pod = {i.pod: i for i in instances if i.pod}
    within = f'namespace=~"{_regex(namespaces)}"'
    for labels in _labels(query(f"group by (namespace, pod, image) (kube_pod_container_info{{{within}}})")):
        if (pod := by_pod.get((labels.get("namespace", ""), labels.get("pod", "")))) and labels.get("image"):
            pod.add("image", labels["image"])
    nodes: dict[str, list[_Instance]] = {}
    for labels in _labels(query(f"group by (namespace, pod, node) (kube_pod_info{{{within}}})")):
        if (pod := by_pod.get((labels.get("namespace", ""), labels.get("pod", "")))) and labels.get("node"):
            pod.add("node", labels["node"])
            nodes.setdefault(labels["node"], []).append(pod)
    if nodes:
        for labels in _labels(query(f'kube_node_labels{{node=~"{_regex(nodes)}"}}')):
            for name, value in labels.items():
                if name.startswith(NODE_LABEL) and value:
                    for pod in nodes.get(labels.get("node", ""), []):
                        pod.add(f"node_label:{name.removeprefix(NODE_LABEL)}", value)
    starts = _time(
        query(f"max by (namespace, pod) (kube_pod_start_time{{{within}}})"),
        lambda labels: (labels.get("namespace", ""), labels.get("pod", "")),
    )
    for key, pod in by_pod.items():
        pod.started = starts.get(key)


def _read_engine_config(query: Query, instances: list[_Instance]) -> None:
    """The engine's flags from its own info series, an attribute `engine_config:<label>` each."""
    by_address = {i.labels["instance"]: i for i in instances if i.labels.get("instance")}
    if not by_address:
        return
    for labels in _labels(query(f'{ENGINE_CONFIG}{{instance=~"{_regex(by_address)}"}}')):
        if instance := by_address.get(labels.get("instance", "")):
            for name, value in labels.items():
                if name not in NOT_CONFIG and value:
                    instance.add(f"engine_config:{name}", value)


def _read_process_starts(query: Query, instances: list[_Instance]) -> None:
    """The engine's own start time (`process_start_time_seconds`), where its pod's is unknown."""
    addresses = {i.labels["instance"] for i in instances if i.labels.get("instance")}
    if not addresses:
        return
    starts = _time(
        query(f'max by (instance) (process_start_time_seconds{{instance=~"{_regex(addresses)}"}})'),
        lambda labels: labels.get("instance", ""),
    )
    for i in instances:
        i.started = starts.get(i.labels.get("instance", ""))


def _by_host(ours: list[_Instance], peers: list[_Instance], affected: set[str]) -> list[HostFacts]:
    """One HostFacts per host: the instances of one host merged (their values joined, the
    latest start), affected ones named as the alerts name them."""
    merged: dict[tuple[str, bool], list[_Instance]] = {}
    for instance in ours:
        merged.setdefault((min(instance.names() & affected), True), []).append(instance)
    for instance in peers:
        host = host_from_label(instance.labels.get("instance", "")) or instance.labels.get("pod", "")
        if host not in affected:
            merged.setdefault((host, False), []).append(instance)
    for host in affected - {host for host, _ in merged}:
        merged[(host, True)] = []
    facts = []
    for (host, is_affected), members in sorted(merged.items()):
        attributes: dict[str, set[str]] = {}
        for member in members:
            for name, values in member.attributes.items():
                attributes.setdefault(name, set()).update(values)
        starts = [m.started for m in members if m.started is not None]
        facts.append(
            HostFacts(
                host,
                is_affected,
                {name: frozenset(values) for name, values in attributes.items()},
                max(starts) if starts else None,
            )
        )
    return facts
