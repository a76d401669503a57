"""Which host an alert names, and which hosts one round of an incident's investigations looks at.

An Alertmanager group (`group_by: [alertname]`) may carry alerts from many hosts: a surge reaches
every replica, a rollout some of them. Each host is investigated on its own (an investigation's
`host`), all of them queued together as one round (its `round_id`), at most `max_hosts` of them:
the rest are left out by a sample that is the same each time and counted (`skipped`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
_PORT = re.compile(r":\d+$")
DEFAULT_MAX_HOSTS = 16


def host_from_label(value: str) -> str:
    """`gpu-node-1.example.com:8000` -> `gpu-node-1`; `10.0.0.5:9100` -> `10.0.0.5`."""
    value = value.strip()
    if value.startswith("["):  # [ipv6]:port
        return value[1:].split("]", 1)[0]
    if value.count(":") > 1:  # bare IPv6: the last group is not a port
        return value
    value = _PORT.sub("", value)
    if IPV4.match(value):
        return value
    return value.split(".", 1)[0]


def hosts_named(labels: Mapping[str, str], host_labels: Sequence[str]) -> list[str]:
    """Every host the alert's labels name, in the order of `host_labels` (its own host first)."""
    return [host_from_label(labels[name]) for name in host_labels if labels.get(name)]


def alert_host(labels: Mapping[str, str], host_labels: Sequence[str]) -> str | None:
    """The host an alert is about: the first of `host_labels` it carries that names the machine
    rather than an address (a DCGM exporter scraped by its pod IP names its node in `Hostname`),
    else the first address; so an engine's alert and its GPU's count as one host."""
    named = hosts_named(labels, host_labels)
    return next((name for name in named if not _address(name)), named[0] if named else None)


def _address(name: str) -> bool:
    return bool(IPV4.match(name)) or ":" in name  # IPv4, or IPv6 (host_from_label keeps it whole)


def hosts_of(alerts: Sequence[Mapping[str, str]], host_labels: Sequence[str]) -> list[str]:
    """Every host these alerts are about (`alert_host`), sorted, each once."""
    return sorted({host for labels in alerts if (host := alert_host(labels, host_labels))})


@dataclass(frozen=True)
class Round:
    """The investigations queued together for an incident: one per host, or one (host None) for
    the incident as one target; `skipped` hosts its alerts name were left out by the bound."""

    hosts: tuple[str | None, ...] = (None,)
    skipped: int = 0

    @property
    def fleet(self) -> bool:
        return self.hosts != (None,)


@dataclass(frozen=True)
class Fleet:
    """How an incident's alerts are split into hosts (the config file's host labels) and how many
    of them one round investigates (RCA_FLEET_MAX_HOSTS)."""

    host_labels: tuple[str, ...]
    max_hosts: int = DEFAULT_MAX_HOSTS

    def __post_init__(self) -> None:
        if self.max_hosts < 1:
            raise ValueError(f"max_hosts must be at least 1, not {self.max_hosts}")

    def round(self, alerts: Sequence[Mapping[str, str]]) -> Round:
        """One investigation per host the alerts name when they name several, else one for the
        whole incident (exactly as a single-host incident always was). Beyond `max_hosts`, those
        whose name hashes lowest: a sample spread over the fleet (not the first names in order)
        that an unchanged incident draws again each time."""
        hosts = hosts_of(alerts, self.host_labels)
        if len(hosts) < 2:
            return Round()
        chosen = sorted(hosts, key=lambda host: hashlib.sha256(host.encode()).hexdigest())[: self.max_hosts]
        return Round(hosts=tuple(sorted(chosen)), skipped=len(hosts) - len(chosen))
