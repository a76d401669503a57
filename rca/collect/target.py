"""Which series belong to the alert: the target (host, pod, model) and its label selectors.

Alerts come from different exporters: vLLM's `instance` is `host:port`, node_exporter's may be a
bare host after relabelling, DCGM names the host in `Hostname`/`hostname` and, in Kubernetes mode,
the GPU-consuming pod in `pod`/`namespace`. We reduce an alert to a host name (port and domain
dropped) plus its scope labels, and offer each scope (serving, gpu, node, pod) a list of candidate
selectors, most specific first. Collection keeps the first candidate that has series.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from rca.collect.promql import promql_string
from rca.config import ScopeConfig
from rca.domain.hosts import IPV4, hosts_named
from rca.domain.hosts import host_from_label as host_from_label  # where rca.scan reads it

_HOST_CHARS = re.compile(r"^[A-Za-z0-9_.-]+$")


def host_regex(host: str) -> str:
    """A PromQL regex (already escaped for a double-quoted string) matching the host's spellings:
    bare, with any domain, with any port."""
    if ":" in host:  # IPv6: `instance` spells it `[addr]:port`
        escaped = re.escape(host).replace("\\", "\\\\")
        return f"(\\\\[{escaped}\\\\](:[0-9]+)?|{escaped})"
    if not _HOST_CHARS.match(host):
        return re.escape(host).replace("\\", "\\\\")
    escaped = host.replace(".", "\\\\.")
    if IPV4.match(host):
        return f"{escaped}(:[0-9]+)?"
    return f"{escaped}(\\\\.[^:]+)?(:[0-9]+)?"


@dataclass(frozen=True)
class Target:
    """The thing under investigation, as far as the alerts tell."""

    host: str | None
    labels: dict[str, str]
    alert_start: datetime
    alertnames: list[str] = field(default_factory=list)
    # Every host the labels name, best first: a DCGM alert's `instance` may be the exporter's IP
    # while `Hostname` names the GPU node; probing keeps the first that has series.
    hosts: list[str] = field(default_factory=list)
    # The alert's own `instance` when every alert agrees: two engines on one host differ only here.
    instance: str | None = None
    # Other spellings of the host found in Prometheus's identity series (see `aliases.py`).
    aliases: list[str] = field(default_factory=list)

    def host_candidates(self) -> list[str]:
        named = self.hosts or ([self.host] if self.host else [])
        return named + [alias for alias in self.aliases if alias not in named]

    def describe(self) -> str:
        parts = [f"host={self.host}"] if self.host else []
        parts += [f"{k}={v}" for k, v in sorted(self.labels.items())]
        return " ".join(parts) or "(no identifying labels)"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["alert_start"] = self.alert_start.isoformat()
        return data


def target_from_alerts(alerts: list[dict[str, str]], starts: list[datetime], config: ScopeConfig) -> Target:
    """Reduce the incident's alert label sets to one target.

    The most common host among the firing alerts wins (an alert group normally shares it); scope
    labels are kept only when every alert that has them agrees, so a group spanning two pods is
    not narrowed to one of them.
    """
    primary: Counter[str] = Counter()
    everyone: Counter[str] = Counter()
    for labels in alerts:
        named = hosts_named(labels, config.host_labels)
        if named:
            primary[named[0]] += 1
        everyone.update(dict.fromkeys(named, 1))
    host = primary.most_common(1)[0][0] if primary else None
    hosts = ([host] if host else []) + [h for h, _ in everyone.most_common() if h != host]

    scope: dict[str, str] = {}
    for name in config.scope_labels:
        values = {labels[name] for labels in alerts if labels.get(name)}
        if len(values) == 1:
            scope[name] = values.pop()
    names = sorted({labels["alertname"] for labels in alerts if labels.get("alertname")})
    instances = {labels["instance"] for labels in alerts if labels.get("instance")}
    instance = instances.pop() if len(instances) == 1 else None
    return Target(host=host, labels=scope, alert_start=min(starts), alertnames=names, hosts=hosts, instance=instance)


def _matchers(**equal: str | None) -> list[str]:
    return [f'{name}="{promql_string(value)}"' for name, value in equal.items() if value]


def scope_candidates(target: Target, config: ScopeConfig) -> dict[str, list[str]]:
    """Candidate selectors (the inside of `{...}`) per scope, most specific first.

    The serving scope tries the alert's exact `instance` first (an alert from the engine itself),
    then pod/namespace, then any instance on the same host (an alert from DCGM or node_exporter).
    The pod scope (cAdvisor container series) has a candidate only when the alert names a pod.
    """
    pod_ns = _matchers(namespace=target.labels.get("namespace"), pod=target.labels.get("pod"))
    model = _matchers(model_name=target.labels.get("model_name"))
    job = _matchers(job=target.labels.get("job"))
    # `instance` first; then any other label a relabelling may have put the host name in.
    labels = ["instance"] + [name for name in config.host_labels if name != "instance"]
    by_host = [[f'{label}=~"{host_regex(name)}"'] for name in target.host_candidates() for label in labels]

    serving: list[list[str]] = []
    if target.instance:
        exact = _matchers(instance=target.instance)
        serving += [exact + model + job, exact + model, exact]
    if pod_ns:
        serving += [pod_ns + model + job, pod_ns + model, pod_ns]
    for narrowing in (model + job, model, []):  # every spelling of the host narrow, before any wide
        serving += [host + narrowing for host in by_host]
    if not serving and model:
        serving.append(model)

    gpu: list[list[str]] = []
    if pod_ns:
        gpu.append(pod_ns)
    for name in target.host_candidates():
        for label in config.gpu_host_labels:
            gpu.append([f'{label}=~"{host_regex(name)}"'])

    node: list[list[str]] = by_host
    # Container series (cAdvisor) only for the alert's own pod: a host-wide guess would mix pods.
    pod: list[list[str]] = [pod_ns] if target.labels.get("pod") else []

    def unique(candidates: list[list[str]]) -> list[str]:
        seen: list[str] = []
        for matchers in candidates:
            text = ",".join(matchers)
            if text and text not in seen:
                seen.append(text)
        return seen

    return {"serving": unique(serving), "gpu": unique(gpu), "node": unique(node), "pod": unique(pod)}
