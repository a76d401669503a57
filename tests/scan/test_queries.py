"""The profile's queries made fleet-wide: grouped by instance, every alternative tagged."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from rca.collect.profile import load_profile
from rca.scan.queries import NotFleetWide, early_signals, fleet_query, per_instance
from tests.e2e.promstack import PROMTOOL


def test_aggregations_and_matching_keep_the_instance() -> None:
    assert per_instance("sum(rate(a[5m])) / (sum(rate(b[5m])) > 0)") == (
        "sum by (instance) (rate(a[5m])) / (sum by (instance) (rate(b[5m])) > 0)"
    )
    assert per_instance("1 - avg(sum by (cpu) (rate(x[5m])) and on (cpu) y)") == (
        "1 - avg by (instance) (sum by (instance, cpu) (rate(x[5m])) and on (instance, cpu) y)"
    )
    assert per_instance("a / scalar(count(b) > 0)") == "a / on (instance) (count by (instance) (b) > 0)"
    with pytest.raises(NotFleetWide):
        per_instance("sum without (engine) (a)")


def test_every_early_signal_of_the_default_profile_is_one_valid_query(tmp_path: Path) -> None:
    """promtool parses each fleet query as a recording rule: the rewrite yields valid PromQL."""
    profile = load_profile()
    signals = early_signals(profile)
    assert {s.id for s in signals} == {"cpu_bound_ratio", "prefix_cache_hit_rate", "queue_median"}
    queries = [fleet_query(spec, {"process_groups": ".*vllm.*"}) for spec in signals]
    rules = {"groups": [{"name": "scan", "rules": []}]}
    for query in queries:
        assert query is not None and len(query.alternatives) >= 2
        rules["groups"][0]["rules"].append({"record": f"rca:scan_{query.spec.id}", "expr": query.promql})
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    assert PROMTOOL, "promtool is missing: apt-get install -y prometheus"
    checked = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
