"""A labelled scenario that only the traces can solve, through the real pipeline.

SGLang serves LoRA adapters; since the onset most requests load an adapter on the request path.
SGLang exports no LoRA-deferred metric, so Prometheus shows only a longer queue and a slower
first token: metrics alone cannot tell adapter loading from a batching or capacity problem (and
`lora_adapter_loading` has no breached anchor at all). The service's traces, in a fake Jaeger or
Tempo that speaks the real query API (tests/fakes/traces.py), show `lora_adapter.load` taking a
large share of request time since the onset, and that decides the ranking. A healthy twin with
healthy traces stays `no_clear_cause`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rca.analyst.summary import AlertText
from rca.collect.target import target_from_alerts
from rca.config import ScopeConfig, Settings
from rca.pipeline import Analysis, analyse
from tests.e2e import promstack
from tests.e2e.scenarios import MODEL, Exporter, Fleet, Host
from tests.fakes.traces import HEALTHY, LORA_FAULT, FakeBackend, Store, TraceFactory

pytestmark = pytest.mark.e2e

ONSET_MINUTES_AGO = 25
TRACED_SERVICE = "sglang-llama-3-8b"
LORA_KEY = "trace_lora_adapter_load_share"


def alert(host: str) -> dict[str, str]:
    return {
        "alertname": "LLMRequestQueueMedianHigh",
        "instance": f"{host}:30000",
        "model_name": MODEL,
        "job": "sglang",
        "service": f"sglang-{host}",
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Store, Store, float]]:
    """Real Prometheus with 3 h of both hosts' metrics; trace stores with the same history."""
    workdir: Path = tmp_path_factory.mktemp("traces-e2e")
    promstack.require_binaries()
    now = time.time()
    onset = now - ONSET_MINUTES_AGO * 60
    hosts = [Host("t01", "lora_adapter_loading", onset, stack="sglang"), Host("t02", None, onset, stack="sglang")]
    fleet = Fleet(hosts, start=now - 3 * 3600 - 15 * 60)
    promstack.backfill(fleet, now, workdir / "tsdb", workdir)
    us = lambda t: int(t * 1e6)  # noqa: E731
    faulty = Store(
        TraceFactory(11, service=TRACED_SERVICE).window(us(fleet.start), us(now) + 600_000_000, us(onset), LORA_FAULT)
    )
    healthy = Store(
        TraceFactory(12, service=TRACED_SERVICE).window(us(fleet.start), us(now) + 600_000_000, us(onset), HEALTHY)
    )
    with Exporter(fleet, time.time) as exporter:
        proc, url = promstack.start_prometheus(workdir, exporter.port, None)
        try:
            time.sleep(6)  # one live scrape, so "now" has data from the exporter too
            yield url, faulty, healthy, now
        finally:
            proc.stop()


def investigate(prometheus: str, host: str, tmp_path: Path, **traces: str) -> Analysis:
    config = tmp_path / "rca.yaml"
    # The alert's `service` label names the deployment; the trace backend knows it by its OTel name.
    config.write_text(f"traces:\n  services: {{sglang-{host}: {TRACED_SERVICE}}}\n")
    settings = Settings(prometheus_url=prometheus, config_file=config, **traces)
    labels = alert(host)
    start = datetime.now(UTC) - timedelta(minutes=2)
    return analyse(settings, target_from_alerts([labels], [start], ScopeConfig()), alerts=[AlertText(labels)])


def test_metrics_alone_cannot_name_lora_adapter_loading(world: tuple, tmp_path: Path) -> None:
    prometheus = world[0]
    analysis = investigate(prometheus, "t01", tmp_path)
    findings = {f.key: f for f in analysis.findings}
    assert findings["queue_median"].breached and findings["ttft_p95"].breached
    assert findings["requests_deferred"].status == "not_measurable"
    assert "lora_adapter_loading" not in [h.category for h in analysis.hypotheses]
    assert findings["trace_latency_attribution"].status == "unavailable"


@pytest.mark.parametrize("backend", ["jaeger", "tempo"])
def test_traces_reveal_lora_adapter_loading(world: tuple, tmp_path: Path, backend: str) -> None:
    prometheus, faulty, _, now = world
    with FakeBackend(backend, faulty) as fake:
        analysis = investigate(prometheus, "t01", tmp_path, traces_backend=backend, traces_url=fake.url)
    top = analysis.hypotheses[0]
    assert top.category == "lora_adapter_loading", [(h.category, h.confidence) for h in analysis.hypotheses]
    assert LORA_KEY in top.evidence and "`lora_adapter.load`" in top.explanation
    lora = {f.key: f for f in analysis.findings}[LORA_KEY]
    assert lora.breached and lora.value > 0.3 and lora.baseline < 0.05
    onset = datetime.fromtimestamp(now - ONSET_MINUTES_AGO * 60, UTC)
    assert onset - timedelta(minutes=2) <= lora.onset <= onset + timedelta(minutes=12)


def test_healthy_twin_with_healthy_traces_stays_no_clear_cause(world: tuple, tmp_path: Path) -> None:
    prometheus, _, healthy, _ = world
    with FakeBackend("jaeger", healthy) as fake:
        analysis = investigate(prometheus, "t02", tmp_path, traces_backend="jaeger", traces_url=fake.url)
    assert analysis.hypotheses[0].category == "no_clear_cause"
    assert [f.key for f in analysis.findings if f.breached] == []
    assert {f.key: f for f in analysis.findings}["trace_latency_attribution"].status == "ok"
