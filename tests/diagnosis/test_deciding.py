"""What decides a cause on each stack (issue 34): a surge needs the request rate to rise, a cause
whose deciding finding is not measured leaves its look-alikes less sure, and KV pressure on Triton
with TensorRT-LLM is reached from the KV block fraction with requests paused, whatever else the
backend exports."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import pytest

from rca.config import load_settings
from rca.diagnosis import ranking
from rca.diagnosis.ranking import UNDECIDED_FACTOR, taxonomy
from rca.domain.evidence import Finding
from tests.diagnosis.test_ranking import by_category, expected_confidence, findings
from tests.worlds.fast import diagnose
from tests.worlds.generate import draw

rank = functools.partial(ranking.rank, calibrated=False)
NOW = 1_780_000_000.0
# Seeds whose KV-pressure world is drawn on Triton with TensorRT-LLM (tests/worlds/generate.py).
TRTLLM_KV_SEEDS = [45, 98]
KV_FULL = {"kv_cache_usage", "queue_median", "queue_time_p95", "ttft_p95", "preemption_rate"}


def with_status(all_findings: list[Finding], key: str, status: str) -> list[Finding]:
    for f in all_findings:
        if f.key == key:
            f.status, f.breached, f.value = status, False, None
    return all_findings


def test_the_request_rate_decides_a_surge() -> None:
    assert taxonomy()["arrival_surge"].decided_by == ["request_rate"]


def test_a_surge_with_a_flat_measured_request_rate_is_ruled_out_even_where_another_anchor_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """However the surge's anchors are written, a full cache and a queue with a flat request rate
    (measured) is never a surge: its deciding finding rules it out."""
    surge = taxonomy()["arrival_surge"]
    loose = surge.model_copy(update={"anchors": [*surge.anchors, ["kv_cache_usage", "queue_median"]]})
    monkeypatch.setitem(taxonomy(), "arrival_surge", loose)
    ranked = by_category(rank(findings(KV_FULL)))
    assert "arrival_surge" not in ranked or ranked["arrival_surge"].confidence == 0
    assert rank(findings(KV_FULL))[0].category == "kv_memory_pressure"
    with_rate = by_category(rank(findings(KV_FULL | {"request_rate"})))
    assert with_rate["arrival_surge"].confidence > 0  # a rate that rose lets it back in


def test_without_the_request_rate_every_cause_it_tells_from_a_surge_is_less_sure() -> None:
    measured = by_category(rank(findings(KV_FULL)))
    unmeasured = by_category(rank(with_status(findings(KV_FULL), "request_rate", "not_measurable")))
    kv = unmeasured["kv_memory_pressure"]
    assert kv.confidence == pytest.approx(
        expected_confidence("kv_memory_pressure", KV_FULL, {"request_rate"}), abs=1e-3
    )
    only_coverage = expected_confidence("kv_memory_pressure", KV_FULL, {"request_rate"}) / UNDECIDED_FACTOR
    assert kv.confidence < only_coverage < measured["kv_memory_pressure"].confidence
    assert "Cannot rule out arrival_surge (request_rate not measured here)" in kv.explanation
    gpu = {"sm_clock", "gpu_temperature", "gpu_throttle_reasons", "itl_p95"}
    degraded = by_category(rank(with_status(findings(gpu), "request_rate", "unavailable")))["gpu_degraded"]
    assert degraded.confidence == by_category(rank(findings(gpu)))["gpu_degraded"].confidence  # no surge look-alike
    assert "Cannot rule out" not in degraded.explanation


@pytest.mark.parametrize("seed", TRTLLM_KV_SEEDS)
def test_kv_pressure_on_triton_trtllm_is_found_from_the_block_fraction_and_paused_requests(
    seed: int, tmp_path: Path
) -> None:
    """The held-out Triton host: TRT-LLM without the request metrics (`waiting` is only in newer
    backends), the core pending gauge near zero (decoupled), no queue-time or first-response
    series: the KV block fraction near 1 with requests paused is KV pressure, not a surge."""
    world = draw(seed, NOW, cause="kv_memory_pressure")
    assert world.host.stack == "triton_trtllm"
    older = replace(world, host=replace(world.host, dropped=world.host.dropped | {"nv_trt_llm_request_metrics"}))
    analysis = diagnose(older, load_settings(data_dir=tmp_path))
    found = {f.key: f for f in analysis.findings}
    assert found["kv_cache_usage"].breached and found["kv_cache_usage"].value > 0.95
    paused = found["preemption_rate"]
    assert (
        paused.breached
        and paused.title == "Requests paused for KV-cache blocks (TRT-LLM)"
        and paused.unit == "requests"
    )
    assert not found["request_rate"].breached
    top = analysis.hypotheses[0]
    assert top.category == "kv_memory_pressure", [(h.category, h.confidence) for h in analysis.hypotheses]
    assert "arrival_surge" not in {h.category for h in analysis.hypotheses}
