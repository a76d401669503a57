"""Join an alert's host to its other spellings, through series that name a machine twice.

Exporters are relabelled independently: node_exporter may be scraped as `10.0.3.7:9100`, DCGM
names the node `gpu-7` in `Hostname`, a vLLM pod is scraped by its pod IP. Identity series
(`node_uname_info`, DCGM's `Hostname`, kube-state-metrics) say which spellings belong together;
the profile lists them (`identities:`), and this module follows them a few hops from the alert's
host, or from its pod when the alert names no host.
"""

from __future__ import annotations

from collections.abc import Callable

from rca.collect.profile import IdentitySpec
from rca.collect.promql import promql_string
from rca.collect.target import host_regex
from rca.domain.hosts import host_from_label

MAX_HOPS = 3
MAX_ALIASES = 16  # a label that is not really an identity must not pull in a whole fleet

Query = Callable[[str], list[dict]]


def _promql(spec: IdentitySpec, pattern: str, lookback_seconds: int) -> str:
    labels = spec.same + spec.leads_to_same
    either = " or ".join(
        f'last_over_time({spec.metric}{{{label}=~"{pattern}"}}[{lookback_seconds}s])' for label in labels
    )
    return f"group by ({', '.join(labels)}) ({either})"


def _spellings(spec: IdentitySpec, items: list[dict]) -> list[str]:
    found: list[str] = []
    for item in items:
        labels = item.get("metric", {})
        found += [host_from_label(labels[name]) for name in spec.same if labels.get(name)]
    return found


def _pod_hosts(query: Query, identities: list[IdentitySpec], pod: dict[str, str], lookback_seconds: int) -> list[str]:
    """The machine of the alert's pod, through identity series that name pods."""
    found: list[str] = []
    for spec in identities:
        # The pod name is required; the namespace narrows when the alert has one.
        if len(spec.pod_labels) != 2 or not pod.get("pod"):
            continue
        namespace_label, pod_label = spec.pod_labels
        matchers = [f'{pod_label}="{promql_string(pod["pod"])}"']
        if pod.get("namespace"):
            matchers.append(f'{namespace_label}="{promql_string(pod["namespace"])}"')
        promql = (
            f"group by ({', '.join(spec.same)}) "
            f"(last_over_time({spec.metric}{{{','.join(matchers)}}}[{lookback_seconds}s]))"
        )
        found += _spellings(spec, query(promql))
    return found


def resolve_aliases(
    query: Query,
    identities: list[IdentitySpec],
    hosts: list[str],
    lookback_seconds: int,
    pod: dict[str, str] | None = None,
) -> list[str]:
    """The other spellings of `hosts` (not including them), nearest first; with the alert's
    `pod` (`{"namespace": ..., "pod": ...}`), its machine's spellings too.

    `query` runs an instant PromQL query and returns the vector's items; errors propagate, so a
    Prometheus outage is reported once, by collection, rather than hidden here.
    """
    known = list(dict.fromkeys(hosts))
    given = len(known)
    frontier = list(known)
    if pod:
        of_pod = [
            host
            for host in dict.fromkeys(_pod_hosts(query, identities, pod, lookback_seconds))
            if host and host not in known
        ]
        known += of_pod
        frontier += of_pod
    for _ in range(MAX_HOPS):
        if not frontier or not identities:
            break
        pattern = "|".join(f"({host_regex(host)})" for host in frontier)
        found: list[str] = []
        for spec in identities:
            found += _spellings(spec, query(_promql(spec, pattern, lookback_seconds)))
        frontier = [host for host in dict.fromkeys(found) if host and host not in known]
        known += frontier
        if len(known) - given >= MAX_ALIASES:
            break
    return known[given:][:MAX_ALIASES]
