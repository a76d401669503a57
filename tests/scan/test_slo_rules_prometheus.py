"""Each target judged against the operator's own SLO, read from a real Prometheus' alerting rules
(`GET /api/v1/rules`): a rule on one job's TTFT quantile, one through a recording rule, one in
milliseconds on a model, one for a job no target has; a target no rule covers keeps the default.
The backtest judges breaches against the same SLOs; an unreachable rules API keeps the rules read
before; the config file's explicit `slo_ttft_seconds` wins over every rule. The scan stores each
target's SLO and `GET /api/v1/scan/targets` lists it."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rca.api.app import create_app
from rca.scan.backtest import backtest
from rca.scan.scanner import Scanner, prometheus_fleet_source
from rca.scan.service import EarlyWarnings
from rca.scan.slo_rules import Slo
from rca.signals.slo import TTFT_SIGNAL
from tests.e2e import promstack
from tests.helpers.scan_fleet import write_history
from tests.helpers.service import API_AUTH, RecordingDispatcher, make_settings

TTFT = "vllm:time_to_first_token_seconds_bucket"
LABELS = {
    "gpu-p": {"job": "vllm-premium"},
    "gpu-b": {"job": "vllm-batch"},
    "gpu-l": {"job": "vllm-shared", "model_name": "llama"},
    "gpu-d": {"job": "vllm-dev"},
}
RECORDS = [
    {
        "record": "team:ttft_seconds:p95_rate5m",
        "expr": f"histogram_quantile(0.95, sum by (le, instance, job) (rate({TTFT}[5m])))",
    }
]
ALERTS = [
    {
        "alert": "PremiumTTFT",
        "expr": f'histogram_quantile(0.95, sum by (le, instance) (rate({TTFT}{{job="vllm-premium"}}[5m]))) > 0.8',
        "for": "5m",
    },
    {"alert": "BatchTTFT", "expr": 'team:ttft_seconds:p95_rate5m{job="vllm-batch"} > 3', "for": "5m"},
    # llm-d's style: an hour's window, here in milliseconds.
    {
        "alert": "LlamaTTFT",
        "expr": f'histogram_quantile(0.95, sum by (le) (rate({TTFT}{{model_name="llama"}}[1h]))) * 1000 > 1200',
    },
    {
        "alert": "CanaryTTFT",
        "expr": f'histogram_quantile(0.95, sum by (le) (rate({TTFT}{{job="vllm-canary"}}[5m]))) > 0.3',
    },
]


def rule(name: str) -> str:
    group = "test-extra" if name.startswith("team:") else "test-alerts"
    return f"rule {name} (group {group}, rules.yml)"


EXPECTED = {
    "gpu-p:8000": Slo(0.8, rule("PremiumTTFT")),
    "gpu-b:8000": Slo(3.0, rule("BatchTTFT")),
    "gpu-l:8000": Slo(1.2, rule("LlamaTTFT")),
    "gpu-d:8000": Slo(2.0, "default"),
}


@pytest.fixture(scope="module")
def rules_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, float]]:
    """Prometheus holding four hosts' last 40 minutes (TTFT p95 about 1.8 s on each), loaded with
    the deploy's recording rules, ours, and our alerting rules in place of the deploy's."""
    assert promstack.PROMETHEUS and promstack.PROMTOOL, "apt-get install -y prometheus"
    workdir = tmp_path_factory.mktemp("slo-rules")
    now = time.time() // 60 * 60
    source = workdir / "history.om"
    write_history(source, {host: [(now - 40 * 60, now + 1)] for host in LABELS}, labels=LABELS)
    promstack.blocks_from(source, workdir / "tsdb", timeout=300)
    proc, url = promstack.start_prometheus(
        workdir, promstack.free_port(), None, for_override=None, extra_rules=RECORDS, only_alerts=ALERTS
    )
    try:
        yield url, now
    finally:
        proc.stop()


def test_each_target_is_judged_against_the_rule_that_covers_it(
    rules_prometheus: tuple[str, float], tmp_path: Path
) -> None:
    url, now = rules_prometheus
    settings = make_settings("sqlite://", tmp_path, prometheus_url=url, scan_interval_seconds=30)
    source = prometheus_fleet_source(settings)
    asked = source.rules_query
    assert asked is not None
    calls: list[float] = []
    source.rules_query = lambda: calls.append(time.monotonic()) or asked()
    scanner = Scanner(settings, source)
    report = scanner.scan(datetime.fromtimestamp(now, UTC))
    assert report.slos == EXPECTED
    # The model the llama rule matches on is read by discovery itself, in its one query.
    targets = {t.instance: t for t in report.targets}
    assert targets["gpu-l:8000"].labels == {"model_name": "llama"} and targets["gpu-p:8000"].job == "vllm-premium"
    for instance, slo in EXPECTED.items():
        ttft = next(s for s in report.assessments[instance].signals if s.limit.signal == TTFT_SIGNAL)
        assert (ttft.limit.threshold, ttft.limit.slo_source) == (slo.seconds, slo.source)
        assert ttft.breached == (ttft.current > slo.seconds)
        figures = ttft.figures()
        assert (figures["threshold"], figures["slo_source"]) == (slo.seconds, slo.source)
    judged = {i: next(s for s in a.signals if s.limit.signal == TTFT_SIGNAL) for i, a in report.assessments.items()}
    assert 1.2 < judged["gpu-p:8000"].current < 3.0, "the history's TTFT p95 lies between the SLOs"
    assert {i for i, s in judged.items() if s.breached} == {"gpu-p:8000", "gpu-l:8000"}

    # Read at the first scan only (and again after RCA_SCAN_RULES_REFRESH_SECONDS), one query.
    before = source.queries
    again = scanner.scan(datetime.fromtimestamp(now, UTC))
    assert len(calls) == 1 and again.slos == EXPECTED
    assert again.queries == source.queries - before

    # The backtest judges breaches against the same SLOs: the looser batch SLO and the default
    # are kept, the premium and llama ones broken.
    start, end = datetime.fromtimestamp(now - 300, UTC), datetime.fromtimestamp(now, UTC)
    result = backtest(settings, prometheus_fleet_source(settings), start, end)
    assert {b.instance for b in result.breaches} == {"gpu-p:8000", "gpu-l:8000"}


def test_an_unreachable_rules_api_keeps_the_rules_read_before_and_logs_once(
    rules_prometheus: tuple[str, float], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url, now = rules_prometheus
    settings = make_settings("sqlite://", tmp_path, prometheus_url=url, scan_interval_seconds=30)
    source = prometheus_fleet_source(settings)
    scanner = Scanner(settings, source)
    clock = [1000.0]
    scanner.rules.clock = lambda: clock[0]
    at = datetime.fromtimestamp(now, UTC)
    assert scanner.scan(at).slos == EXPECTED
    # The rules API goes away (a Prometheus that no longer answers it: connection refused).
    dead = make_settings("sqlite://", tmp_path, prometheus_url=f"http://127.0.0.1:{promstack.free_port()}")
    working, source.rules_query = source.rules_query, prometheus_fleet_source(dead).rules_query
    with caplog.at_level(logging.INFO, logger="rca.scan.slo_rules"):
        for _ in range(3):
            clock[0] += settings.scan_rules_refresh_seconds
            assert scanner.scan(at).slos == EXPECTED
        outage = [r for r in caplog.records if r.name == "rca.scan.slo_rules" and r.levelno == logging.WARNING]
        assert len(outage) == 1 and "keeping the 4 SLO rule(s) read before" in outage[0].getMessage()
        source.rules_query = working
        clock[0] += settings.scan_rules_refresh_seconds
        assert scanner.scan(at).slos == EXPECTED
        assert "rules read again" in [r for r in caplog.records if r.name == "rca.scan.slo_rules"][-1].getMessage()


def test_the_config_files_explicit_slo_wins_over_every_rule(
    rules_prometheus: tuple[str, float], tmp_path: Path
) -> None:
    url, now = rules_prometheus
    config = tmp_path / "rca.yaml"
    config.write_text("slo_ttft_seconds: 1.5\n")
    settings = make_settings("sqlite://", tmp_path, prometheus_url=url, config_file=config)
    source = prometheus_fleet_source(settings)
    asked: list[int] = []
    source.rules_query = lambda: asked.append(1) or []
    report = Scanner(settings, source).scan(datetime.fromtimestamp(now, UTC))
    assert report.slos == {instance: Slo(1.5, "config file") for instance in EXPECTED}
    assert asked == [], "the rules decide nothing then: not read"
    # Written down at its default value, it is still the operator's word.
    config.write_text("slo_ttft_seconds: 2.0\n")
    settings = make_settings("sqlite://", tmp_path, prometheus_url=url, config_file=config)
    report = Scanner(settings, prometheus_fleet_source(settings)).scan(datetime.fromtimestamp(now, UTC))
    assert set(report.slos.values()) == {Slo(2.0, "config file")}


def test_the_scan_stores_each_targets_slo_and_the_api_lists_it(
    rules_prometheus: tuple[str, float], pg_db: str, tmp_path: Path
) -> None:
    url, now = rules_prometheus
    settings = make_settings(pg_db, tmp_path, prometheus_url=url, scan_interval_seconds=30)
    warnings = EarlyWarnings.from_settings(settings)
    for offset in (60, 30, 0):
        warnings.tick(datetime.fromtimestamp(now - offset, UTC))
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher())) as client:
        answer = client.get("/api/v1/scan/targets", headers=API_AUTH)
        assert answer.status_code == 200, answer.text
        items = answer.json()["items"]
        assert [item["instance"] for item in items] == sorted(EXPECTED)
        for item in items:
            assert Slo(item["slo_ttft_seconds"], item["slo_source"]) == EXPECTED[item["instance"]]
            assert item["host"] == item["instance"].split(":")[0]
            assert item["state"] in ("ok", "watch", "warning") and item["since"]
        # Stored once: ticks that change nothing leave the rows alone.
        stamps = {item["instance"]: item["updated_at"] for item in items if item["state"] == "ok"}
        warnings.tick(datetime.fromtimestamp(now, UTC) + timedelta(seconds=30))
        later = {
            i["instance"]: i["updated_at"] for i in client.get("/api/v1/scan/targets", headers=API_AUTH).json()["items"]
        }
        assert all(later[i] == stamp for i, stamp in stamps.items())
