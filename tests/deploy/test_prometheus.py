"""deploy/prometheus: the rules pass promtool, every alert has unit tests that fire and stay silent,
the alerts speak the service's finding ids, link to their runbooks, and measure each signal with
the series, matchers and windows of the profile's primary query for each stack."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from string import Template

import pytest

from rca.collect.profile import SCOPES, load_profile
from rca.collect.promql import query_params
from rca.config import FileConfig
from tests.helpers.deploy import (
    DEPLOY,
    RCA_SERVICE_SERIES,
    REPO,
    load_yaml,
    matchers,
    metric_names,
    ranges,
    rules,
    run,
    tool,
)

PROM = DEPLOY / "prometheus"
SIGNAL_RULES = PROM / "rules.yml"
SERVICE_RULES = PROM / "rca-service.rules.yml"
UNIT_TESTS = sorted((PROM / "tests").glob("*_test.yml"))
PROFILE = load_profile()
SPECS = {spec.id: spec for spec in PROFILE.signals}
EARLY_SIGNALS = {"cpu_bound_ratio", "prefix_cache_hit_rate", "queue_median", "gpu_compute_to_memory"}
# A record's `stack` label: a profile stack id, or `vllm` where V1 and V0/0.8 share the series.
STACK_LABELS = {"vllm": {"vllm_v1", "vllm_v0"}} | {stack: {stack} for stack in PROFILE.stacks}


def alerts(path: Path) -> list[dict]:
    return [rule for rule in rules(path) if "alert" in rule]


def records() -> list[dict]:
    return [rule for rule in rules(SIGNAL_RULES) if "record" in rule]


def test_rule_files_pass_promtool_check() -> None:
    run([tool("promtool"), "check", "rules", str(SIGNAL_RULES), str(SERVICE_RULES)])


def test_promtool_unit_tests_pass() -> None:
    assert UNIT_TESTS, "no promtool unit tests under deploy/prometheus/tests"
    run([tool("promtool"), "test", "rules", *map(str, UNIT_TESTS)], cwd=PROM / "tests")


def test_promtool_unit_tests_catch_a_wrong_threshold(tmp_path: Path) -> None:
    """The unit tests can fail: with the queue threshold moved to 9 the firing case breaks."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "rules.yml").write_text(SIGNAL_RULES.read_text().replace("> 4.7", "> 9"))
    shutil.copy(PROM / "tests" / "signals_test.yml", tmp_path / "tests")
    proc = subprocess.run(
        [tool("promtool"), "test", "rules", "signals_test.yml"],
        cwd=tmp_path / "tests",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "LLMRequestQueueMedianHigh" in proc.stdout + proc.stderr


@pytest.mark.parametrize("path", [SIGNAL_RULES, SERVICE_RULES], ids=lambda p: p.name)
def test_every_alert_has_a_unit_test_that_fires_and_one_that_stays_silent(path: Path) -> None:
    cases: dict[str, set[bool]] = {}
    for test_file in UNIT_TESTS:
        for test in load_yaml(test_file)["tests"]:
            for case in test.get("alert_rule_test", []):
                cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    for rule in alerts(path):
        assert cases.get(rule["alert"]) == {True, False}, f"{rule['alert']}: needs a firing and a silent case"


def test_signal_alerts_are_labelled_with_the_service_finding_ids() -> None:
    by_signal = {rule["labels"]["signal"]: rule["alert"] for rule in alerts(SIGNAL_RULES)}
    assert set(by_signal) <= set(SPECS), f"unknown finding ids: {set(by_signal) - set(SPECS)}"
    assert set(by_signal) >= EARLY_SIGNALS
    assert {s.id for s in PROFILE.signals if s.kind == "signal"} == EARLY_SIGNALS
    assert len(by_signal) == len(alerts(SIGNAL_RULES)), "one alert per signal"
    for rule in records():
        assert rule["labels"]["signal"] in SPECS, rule["record"]
    for rule in alerts(SERVICE_RULES):
        assert "signal" not in rule["labels"], f"{rule['alert']} would be routed to the RCA service itself"


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as dashes."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_alert_links_to_its_own_runbook_section() -> None:
    anchors = _anchors((REPO / "docs" / "runbooks.md").read_text())
    for rule in alerts(SIGNAL_RULES) + alerts(SERVICE_RULES):
        url = rule["annotations"]["runbook_url"]
        assert url.endswith(f"docs/runbooks.md#{rule['alert'].lower()}"), url
        assert rule["alert"].lower() in anchors, f"docs/runbooks.md has no section for {rule['alert']}"


def _rendered(query: str) -> str:
    """A profile query with its scope selectors as a throwaway matcher and the default parameters."""
    values = {scope: 'instance="x"' for scope in SCOPES} | query_params(FileConfig(pinned_cpus="4-7"))
    return Template(query).substitute(values)


def _primary(signal: str, stack: str | None) -> str:
    """The first query the service tries for the signal on that stack (any stack: the first
    stack-independent one)."""
    spec = SPECS[signal]
    for query in spec.queries:
        applies = query.stacks is None if stack is None else (query.stacks is None or stack in query.stacks)
        if applies:
            return _rendered(query.promql)
    raise AssertionError(f"{signal}: no query for stack {stack}")


def _without_scope(found: dict[str, set[str]]) -> dict[str, set[str]]:
    return {metric: {m for m in ms if not m.startswith("instance=")} for metric, ms in found.items()}


@pytest.mark.parametrize("rule", records(), ids=lambda r: f"{r['record']}/{r['labels'].get('stack', 'any')}")
def test_each_record_measures_its_signal_like_the_profile_primary_query(rule: dict) -> None:
    signal, stack_label = rule["labels"]["signal"], rule["labels"].get("stack")
    stacks = STACK_LABELS[stack_label] if stack_label else {None}
    probes = {name for stack in PROFILE.stacks.values() for name in stack.probe.split("|")}
    for stack in stacks:
        primary = _primary(signal, stack)
        assert metric_names(primary) <= metric_names(rule["expr"]), f"{stack}: {primary}"
        assert metric_names(rule["expr"]) <= metric_names(primary) | probes, f"{stack}: extra series"
        got = _without_scope(matchers(rule["expr"]))
        for metric, wanted in _without_scope(matchers(primary)).items():
            assert wanted <= got.get(metric, set()), f"{stack}: {metric} matchers {wanted} vs {got.get(metric)}"
        assert ranges(primary) <= ranges(rule["expr"]), f"{stack}: windows {ranges(primary)}"


def test_every_stack_that_exports_a_signal_has_a_rule_for_it() -> None:
    covered = {
        (r["labels"]["signal"], s)
        for r in records()
        if "stack" in r["labels"]
        for s in STACK_LABELS[r["labels"]["stack"]]
    }
    for signal in ("prefix_cache_hit_rate", "queue_median", "ttft_p95"):
        measurable = {s for q in SPECS[signal].queries for s in (q.stacks or ())}
        assert measurable == {s for sig, s in covered if sig == signal}, signal
    stackless = {r["labels"]["signal"] for r in records() if "stack" not in r["labels"]}
    assert stackless == {"cpu_bound_ratio", "gpu_compute_to_memory"}


def test_alert_thresholds_are_the_profile_thresholds() -> None:
    exprs = {rule["labels"]["signal"]: rule["expr"] for rule in alerts(SIGNAL_RULES)}
    for signal in ("cpu_bound_ratio", "prefix_cache_hit_rate", "queue_median"):
        spec = SPECS[signal]
        assert re.search(rf"\[10m\]\)\s*{re.escape(spec.comparison)}\s*{spec.threshold}\s*$", exprs[signal].strip()), (
            f"{signal}: 10-minute median {spec.comparison} {spec.threshold}"
        )
    change = SPECS["gpu_compute_to_memory"].change
    assert (
        f"< {1 - change:g} * quantile_over_time(0.5, rca:gpu_sm_per_dram_active:ratio5m[150m] offset 30m)"
        in " ".join(exprs["gpu_compute_to_memory"].split())
    )
    assert exprs["ttft_p95"].strip().endswith(f"> {FileConfig().slo_ttft_seconds:g}")


def test_scrape_config_passes_promtool_with_both_jobs(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("secret\n")
    config = (PROM / "scrape.yml").read_text().replace("/etc/prometheus/secrets/rca-api-token", str(token))
    (tmp_path / "scrape.yml").write_text(config)
    for name in ("rules.yml", "rca-service.rules.yml"):
        shutil.copy(PROM / name, tmp_path)
    run([tool("promtool"), "check", "config", str(tmp_path / "scrape.yml")])
    jobs = {job["job_name"]: job for job in load_yaml(PROM / "scrape.yml")["scrape_configs"]}
    assert set(jobs) == {"rca-api", "rca-worker"}
    assert jobs["rca-api"]["authorization"]["credentials_file"]
    assert jobs["rca-worker"]["static_configs"][0]["targets"][0].endswith(":9808")


def test_the_check_command_in_scrape_yml_passes_as_written() -> None:
    """Its header's own promtool line, run where the file is, on a machine without its token file."""
    lines = (PROM / "scrape.yml").read_text().splitlines()
    [command] = [line.lstrip("# ") for line in lines if line.lstrip("# ").startswith("promtool ")]
    assert not Path("/etc/prometheus/secrets/rca-api-token").exists(), "the check would not show what it shows"
    run([tool("promtool"), *shlex.split(command)[1:]], cwd=PROM)


def test_service_alerts_match_label_values_the_service_exposes() -> None:
    """`status="failed"` or `code=~"5.."` must select something a real scrape has, or the alert can never fire."""
    checked = 0
    for rule in alerts(SERVICE_RULES):
        for name, found in matchers(rule["expr"]).items():
            if name not in RCA_SERVICE_SERIES:
                continue
            exposed = RCA_SERVICE_SERIES[name]
            for matcher in found:
                label, op, value = re.fullmatch(r'(\w+)(=~|!~|!=|=)"(.*)"', matcher).groups()
                values = {v for k, v in exposed if k == label}
                assert values, f"{rule['alert']}: {name} has no label {label}"
                if op == "=":
                    assert value in values, f"{rule['alert']}: {name}{{{matcher}}} selects nothing the service exposes"
                elif op == "=~":
                    assert any(re.fullmatch(value, v) for v in values), f"{rule['alert']}: {matcher} matches no value"
                checked += 1
    assert checked >= 2
