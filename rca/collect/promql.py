"""PromQL text built from operator input: string escaping, and the values of a profile's
operator placeholders (`rca.collect.profile.PARAMETERS`) from the config file."""

from __future__ import annotations

import re

from rca.config import FileConfig
from rca.config.cpus import parse_cpu_list


def promql_string(value: str) -> str:
    """`value` escaped for the inside of a double-quoted PromQL string."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def cpu_list_regex(cpus: list[int]) -> str:
    """`[4, 5, 12]` -> `4|5|12`, for a `cpu=~"..."` matcher (node_exporter's `cpu` label is the id)."""
    return "|".join(str(cpu) for cpu in cpus)


def query_params(config: FileConfig) -> dict[str, str]:
    """Values for the profile's operator placeholders, from what the config file sets."""
    names = "|".join(re.escape(name.strip()) for name in config.process_groups)
    params = {"process_groups": promql_string(f"(?i).*({names}).*")}
    if config.pinned_cpus is not None:
        cpus = parse_cpu_list(config.pinned_cpus)
        params["pinned_cpus"] = cpu_list_regex(cpus)
        params["pinned_cpu_count"] = str(len(cpus))
    return params
