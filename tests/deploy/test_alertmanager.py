"""deploy/alertmanager: the sub-route merges into an existing config, the whole example passes
amtool, routes every signal alert to the RCA service *and* to the team's existing receivers, keeps
the service's own alerts away from it, and inhibits only what its comments say."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from tests.e2e import promstack
from tests.helpers.deploy import DEPLOY, load_yaml, rules, run, tool

AM = DEPLOY / "alertmanager"
SNIPPET = load_yaml(AM / "rca-route.yml")
WHOLE = AM / "alertmanager.yml"
RECEIVER_URL = "http://rca-api:8080/api/v1/alertmanager"


def alert_rules(name: str) -> list[dict]:
    return [r for r in rules(DEPLOY / "prometheus" / name) if "alert" in r]


def routes_for(config: Path, labels: dict[str, str]) -> list[str]:
    out = run(
        [
            tool("amtool"),
            "config",
            "routes",
            "test",
            f"--config.file={config}",
            *(f"{k}={v}" for k, v in labels.items()),
        ]
    ).stdout
    return out.strip().split(",")


def test_whole_example_passes_amtool() -> None:
    run([tool("amtool"), "check-config", str(WHOLE)])


def test_sub_route_merges_into_an_existing_config(tmp_path: Path) -> None:
    existing = {
        "route": {"receiver": "ops", "group_by": ["alertname"], "routes": [{"receiver": "ops"}]},
        "receivers": [{"name": "ops"}],
    }
    existing["route"]["routes"] = SNIPPET["route"]["routes"] + existing["route"]["routes"]
    existing["receivers"] += SNIPPET["receivers"]
    existing["inhibit_rules"] = SNIPPET["inhibit_rules"]
    merged = tmp_path / "merged.yml"
    merged.write_text(yaml.safe_dump(existing))
    run([tool("amtool"), "check-config", str(merged)])
    queue = {"alertname": "LLMRequestQueueMedianHigh", "signal": "queue_median"}
    assert routes_for(merged, queue) == ["llm-rca", "ops"]


def test_whole_example_carries_the_snippet_verbatim() -> None:
    whole = load_yaml(WHOLE)
    assert whole["route"]["routes"][0] == SNIPPET["route"]["routes"][0]
    assert whole["route"]["routes"][0]["continue"] is True
    receivers = {r["name"]: r for r in whole["receivers"]}
    assert receivers["llm-rca"] == SNIPPET["receivers"][0]
    assert whole["inhibit_rules"] == SNIPPET["inhibit_rules"]
    assert SNIPPET["receivers"][0]["webhook_configs"][0]["url"] == RECEIVER_URL


def test_the_route_matches_exactly_the_signal_labels_of_the_rules() -> None:
    matcher = SNIPPET["route"]["routes"][0]["matchers"][0]
    listed = set(matcher.removeprefix('signal=~"').removesuffix('"').split("|"))
    assert listed == {r["labels"]["signal"] for r in alert_rules("rules.yml")}


@pytest.mark.parametrize("rule", alert_rules("rules.yml"), ids=lambda r: r["alert"])
def test_signal_alerts_reach_the_rca_service_and_the_existing_routes(rule: dict) -> None:
    team = "team-pager" if rule["labels"]["severity"] == "critical" else "team-default"
    labels = {"alertname": rule["alert"], **rule["labels"], "instance": "gpu-a:8000"}
    assert routes_for(WHOLE, labels) == ["llm-rca", team]


@pytest.mark.parametrize("rule", alert_rules("rca-service.rules.yml"), ids=lambda r: r["alert"])
def test_service_alerts_never_reach_the_service_itself(rule: dict) -> None:
    receivers = routes_for(WHOLE, {"alertname": rule["alert"], **rule["labels"]})
    assert "llm-rca" not in receivers and receivers


def test_inhibit_rules_name_alerts_that_exist_and_spare_the_slo_and_the_causes() -> None:
    names = {r["alert"] for r in alert_rules("rules.yml") + alert_rules("rca-service.rules.yml")}
    inhibited = set()
    for rule in SNIPPET["inhibit_rules"]:
        for key in ("source_matchers", "target_matchers"):
            (matcher,) = rule[key]
            assert matcher.startswith('alertname="') and matcher[11:-1] in names, matcher
        inhibited.add(rule["target_matchers"][0][11:-1])
    assert inhibited == {"LLMRequestQueueMedianHigh", "RCAInvestigationQueueStale"}


def test_a_real_alertmanager_inhibits_the_queue_warning_but_not_the_slo_page(tmp_path: Path) -> None:
    """The whole example on a real Alertmanager (deliveries to a closed loopback port): with the
    TTFT SLO firing on a target, that target's queue warning is inhibited; another target's is not."""
    promstack.require_binaries()
    config = WHOLE.read_text().replace(RECEIVER_URL, "http://127.0.0.1:9/api/v1/alertmanager")
    config = config.replace("credentials_file: /etc/alertmanager/rca-webhook-token", "credentials: test")
    (tmp_path / "alertmanager.yml").write_text(config)
    port = promstack.free_port()
    am = promstack.Process(
        "alertmanager",
        [
            promstack.ALERTMANAGER,
            f"--config.file={tmp_path / 'alertmanager.yml'}",
            f"--storage.path={tmp_path / 'data'}",
            "--cluster.listen-address=",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        tmp_path,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        promstack.wait_until(
            lambda: httpx.get(f"{url}/-/ready", timeout=2).status_code == 200, 30, "alertmanager", am.proc
        )
        a, b = {"instance": "gpu-a:8000", "model_name": "m"}, {"instance": "gpu-b:8000", "model_name": "m"}
        slo = {"alertname": "LLMTTFTSLOBreach", "signal": "ttft_p95", "severity": "critical"}
        queue = {"alertname": "LLMRequestQueueMedianHigh", "signal": "queue_median", "severity": "warning"}
        prefix = {"alertname": "LLMPrefixCacheHitRateLow", "signal": "prefix_cache_hit_rate", "severity": "warning"}
        alerts = [{"labels": slo | a}, {"labels": queue | a}, {"labels": prefix | a}, {"labels": queue | b}]
        assert httpx.post(f"{url}/api/v2/alerts", json=alerts, timeout=5).status_code == 200

        def states() -> dict[tuple[str, str], list[str]]:
            got = httpx.get(f"{url}/api/v2/alerts", timeout=5).json()
            return {(a["labels"]["alertname"], a["labels"]["instance"]): a["status"]["inhibitedBy"] for a in got}

        promstack.wait_until(lambda: len(states()) == 4 and any(states().values()), 20, "inhibition")
        inhibited = {key for key, by in states().items() if by}
        assert inhibited == {("LLMRequestQueueMedianHigh", "gpu-a:8000")}
    finally:
        am.stop()
