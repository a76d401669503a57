"""deploy/grafana: the dashboards are well-formed, every query is PromQL that promtool accepts,
every metric they chart exists (rules, profile, the service's own metrics), and the fleet
dashboard draws each signal's alert threshold."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from rca.collect.profile import load_profile
from rca.config import FileConfig
from tests.helpers.deploy import DEPLOY, RCA_SERVICE_METRICS, load_yaml, metric_names, rules, run, tool

GRAFANA = DEPLOY / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
GRAFANA_DURATIONS = {"__rate_interval": "5m", "__interval": "1m", "__range": "6h"}
PROMETHEUS_BUILTINS = {"ALERTS", "up"}


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def panels(dashboard: dict) -> list[dict]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def exprs(dashboard: dict) -> list[str]:
    return [t["expr"] for p in panels(dashboard) for t in p["targets"]]


def variable_queries(dashboard: dict) -> list[str]:
    """The series selector of each `label_values(selector, label)` variable."""
    queries = [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    selectors = [re.sub(r"^label_values\((.+),\s*\w+\)$", r"\1", q) for q in queries]
    assert all(s != q for s, q in zip(selectors, queries, strict=True)), "variables are label_values() queries"
    return selectors


def substitute(expr: str) -> str:
    """Grafana's variables as Prometheus would see them: durations, and `.*` for `All`."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: GRAFANA_DURATIONS.get(m.group(1), ".*"), expr)


def known_metrics() -> set[str]:
    recorded = {
        r["record"]
        for path in (DEPLOY / "prometheus").glob("*.yml")
        if path.name != "scrape.yml"
        for r in rules(path)
        if "record" in r
    }
    profiled = {name for spec in load_profile().signals for q in spec.queries for name in metric_names(q.promql)}
    return recorded | profiled | RCA_SERVICE_METRICS | PROMETHEUS_BUILTINS


def test_there_are_a_fleet_and_a_service_dashboard() -> None:
    assert {load(p)["uid"] for p in DASHBOARDS} == {"llm-rca-fleet", "llm-rca-service"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_has_the_schema_essentials(path: Path) -> None:
    dashboard = load(path)
    assert dashboard["uid"] and len(dashboard["uid"]) <= 40 and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    ids = [p["id"] for p in dashboard["panels"]]
    assert ids and len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for panel in panels(dashboard):
        where = f"{path.name} panel {panel['id']} ({panel.get('title')})"
        assert panel["title"] and panel["type"] in {"timeseries", "stat", "table", "gauge"}, where
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in "hwxy") and grid["x"] + grid["w"] <= 24, where
        xs, ys = range(grid["x"], grid["x"] + grid["w"]), range(grid["y"], grid["y"] + grid["h"])
        mine = {(x, y) for x in xs for y in ys}
        assert not cells & mine, f"{where} overlaps another panel"
        cells |= mine
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
        assert panel["targets"], where
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), where
        for target in panel["targets"]:
            assert target["expr"].strip() and target["datasource"] == panel["datasource"], where
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    used = set(re.findall(r"\$\{?(\w+)\}?", " ".join(exprs(dashboard))))
    assert used - set(GRAFANA_DURATIONS) <= set(variables), "every variable a query uses is defined"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_query_is_promql_that_promtool_accepts(path: Path, tmp_path: Path) -> None:
    dashboard = load(path)
    queries = [substitute(e) for e in exprs(dashboard)]
    queries += variable_queries(dashboard)
    recording = [{"record": f"grafana:query_{i}", "expr": q} for i, q in enumerate(queries)]
    rules_file = tmp_path / "dashboard_queries.yml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": path.stem, "rules": recording}]}))
    run([tool("promtool"), "check", "rules", str(rules_file)])


def test_promtool_rejects_a_broken_query(tmp_path: Path) -> None:
    """The check above can fail: an unbalanced query is refused."""
    rules_file = tmp_path / "broken.yml"
    rules_file.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "g",
                        "rules": [
                            {
                                "record": "grafana:broken",
                                "expr": substitute("sum(rate(rca_webhook_requests_total[$__rate_interval])"),
                            }
                        ],
                    }
                ]
            }
        )
    )
    proc = subprocess.run(
        [tool("promtool"), "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_charted_metric_exists_in_the_rules_the_profile_or_the_service(path: Path) -> None:
    dashboard = load(path)
    charted = {name for e in exprs(dashboard) + variable_queries(dashboard) for name in metric_names(substitute(e))}
    assert charted, "no metric found: the name extraction is broken"
    unknown = charted - known_metrics()
    assert not unknown, f"{path.name} charts metrics nothing produces: {sorted(unknown)}"


def test_service_dashboard_shows_the_service_health() -> None:
    service = load(GRAFANA / "dashboards" / "llm-rca-service.json")
    charted = {n for e in exprs(service) for n in metric_names(substitute(e))}
    for metric in (
        "rca_webhook_requests_total",
        "rca_investigations_total",
        "rca_queue_oldest_age_seconds",
        "rca_investigation_duration_seconds_bucket",
        "rca_llm_tokens_total",
        "rca_llm_cost_dollars_total",
        "rca_slack_delivery_failures_total",
    ):
        assert metric in charted, metric


def _steps(panel: dict) -> list[float]:
    steps = panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
    return [s["value"] for s in steps if s["value"] is not None]


def test_fleet_dashboard_draws_each_alert_threshold() -> None:
    fleet = load(GRAFANA / "dashboards" / "llm-fleet-signals.json")
    specs = {s.id: s for s in load_profile().signals}
    by_record = {name: p for p in panels(fleet) for t in p["targets"] for name in metric_names(substitute(t["expr"]))}
    expected = {
        "rca:serving_process_cpu_per_pinned_core:ratio_rate5m": specs["cpu_bound_ratio"].threshold,
        "rca:prefix_cache_hit:ratio_rate5m": specs["prefix_cache_hit_rate"].threshold,
        "rca:requests_waiting:median10m": specs["queue_median"].threshold,
        "rca:ttft_seconds:p95_rate5m": FileConfig().slo_ttft_seconds,
        "vllm:kv_cache_usage_perc": specs["kv_cache_usage"].threshold,
    }
    for record, threshold in expected.items():
        panel = by_record[record]
        assert _steps(panel) == [threshold], f"{panel['title']}: threshold {threshold} not drawn"
        assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off", panel["title"]
    gpu = by_record["rca:gpu_sm_per_dram_active:ratio5m"]
    limit = f"{1 - specs['gpu_compute_to_memory'].change:g} * quantile_over_time"
    assert any(t["expr"].startswith(limit) for t in gpu["targets"]), "the GPU panel draws its relative limit"


def test_provisioning_points_at_the_dashboards_and_the_datasource() -> None:
    source = load_yaml(GRAFANA / "provisioning" / "datasources" / "prometheus.yml")["datasources"][0]
    assert source["type"] == "prometheus" and source["uid"] and source["url"].startswith("http")
    provider = load_yaml(GRAFANA / "provisioning" / "dashboards" / "llm-rca.yml")["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"]
