"""Join an alert's host to its other spellings, through series that name a machine twice.

Exporters are relabelled independently: node_exporter may be scraped as `10.0.3.7:9100`, DCGM
names the node `gpu-7` in `Hostname`, a vLLM pod is scraped by its pod IP. Identity series
(`node_uname_info`, DCGM's `Hostname`, kube-state-metrics) say which spellings belong together;
the profile lists them (`identities:`), and this module follows them a few hops from the alert.
"""

from __future__ import annotations

from collections.abc import Callable

from rca.collect.profile import IdentitySpec
from rca.collect.target import host_from_label, host_regex

MAX_HOPS = 3
MAX_ALIASES = 16  # a label that is not really an identity must not pull in a whole fleet

Query = Callable[[str], list[dict]]


def _promql(spec: IdentitySpec, pattern: str, lookback_seconds: int) -> str:
    labels = spec.same + spec.leads_to_same
    either = " or ".join(f'last_over_time({spec.metric}{{{label}=~"{pattern}"}}[{lookback_seconds}s])'
                         for label in labels)
    return f"group by ({', '.join(labels)}) ({either})"


def resolve_aliases(query: Query, identities: list[IdentitySpec], hosts: list[str],
                    lookback_seconds: int) -> list[str]:
    """The other spellings of `hosts` (not including them), nearest first.

    `query` runs an instant PromQL query and returns the vector's items; errors propagate, so a
    Prometheus outage is reported once, by collection, rather than hidden here.
    """
    known = list(dict.fromkeys(hosts))
    given = len(known)
    frontier = list(known)
    for _ in range(MAX_HOPS):
        if not frontier or not identities:
            break
        pattern = "|".join(f"({host_regex(host)})" for host in frontier)
        found: list[str] = []
        for spec in identities:
            for item in query(_promql(spec, pattern, lookback_seconds)):
                labels = item.get("metric", {})
                found += [host_from_label(labels[name]) for name in spec.same if labels.get(name)]
        frontier = [host for host in dict.fromkeys(found) if host and host not in known]
        known += frontier
        if len(known) - given >= MAX_ALIASES:
            break
    return known[given:][:MAX_ALIASES]
