"""The terminal report: causes first, then findings, with one line per reason data is missing."""

from __future__ import annotations

import io
import os
import re

import pytest

from rca.domain.values import format_value
from rca.report import no_data_hint, no_data_reason, render, use_colour, written_by


def _finding(fid: str, status: str, detail: str = "", value: float | None = None) -> dict:
    return {
        "id": fid,
        "kind": "signal",
        "status": status,
        "value": value,
        "baseline": None,
        "unit": "ratio",
        "onset": None,
        "detail": detail,
    }


def test_findings_missing_for_the_same_reason_are_reported_once() -> None:
    down = "data unavailable: Prometheus at http://x is unavailable"
    findings = [
        _finding("queue_median", "breached", value=0.5),
        _finding("a", "unavailable", down),
        _finding("b", "unavailable", down),
        _finding("c", "not_measurable", "not measurable on this stack"),
    ]
    hypotheses = [
        {
            "rank": 1,
            "category": "arrival_surge",
            "confidence": 0.8,
            "title": "surge",
            "evidence": ["queue_median"],
            "contradicting": [],
        }
    ]
    text = render("host=gpu-1", findings, hypotheses)
    assert text.count(down) == 1
    assert "[--] a, b" in text and "[--] c" in text
    assert "[!!] queue_median" in text
    assert text.index("arrival_surge") < text.index("Findings:")


def _measured(
    fid: str,
    status: str,
    value: float,
    baseline: float,
    threshold: float,
    unit: str,
    detail: str,
    comparison: str = ">",
) -> dict:
    return {
        "id": fid,
        "kind": "signal",
        "status": status,
        "value": value,
        "baseline": baseline,
        "threshold": threshold,
        "comparison": comparison,
        "unit": unit,
        "onset": None,
        "detail": detail,
    }


KV = _measured(
    "kv_cache_usage",
    "breached",
    0.985,
    0.55,
    0.92,
    "ratio",
    "KV-cache usage is 98% (baseline 55%, limit > 92%) since 04:12 UTC",
)
RATE = _measured("request_rate", "ok", 8.04, 8.0, 12.0, "per_second", "Completed requests per second is 8.04")
TTFT = _measured("ttft_p95", "ok", 0.533, 0.5, 0.8, "seconds", "Time to first token p95 is 0.533")
CAUSES = [
    {
        "rank": 1,
        "category": "kv_memory_pressure",
        "confidence": 0.9,
        "title": "KV cache full",
        "evidence": ["kv_cache_usage"],
        "contradicting": ["request_rate"],
        "next_steps": ["Lower max-num-seqs."],
    },
    {
        "rank": 2,
        "category": "arrival_surge",
        "confidence": 0.45,
        "title": "surge",
        "evidence": ["kv_cache_usage"],
        "contradicting": [],
        "next_steps": ["Add replicas."],
    },
]


def test_each_finding_shows_value_baseline_threshold_in_its_unit_and_its_sentence_breached_first() -> None:
    text = render("host=gpu-node-7", [RATE, TTFT, KV], CAUSES)
    findings = text[text.index("Findings:") :]
    assert findings.index("kv_cache_usage") < findings.index("request_rate") < findings.index("ttft_p95")
    assert "[!!] kv_cache_usage             98% (baseline 55%, limit > 92%)" in findings
    assert "8.04/s (baseline 8/s, limit > 12/s)" in findings
    assert "0.533 s (baseline 0.5 s, limit > 0.8 s)" in findings
    for finding in (RATE, TTFT):  # worded otherwise: the sentence as it is
        assert finding["detail"] in findings


def test_each_finding_is_listed_once_its_numbers_not_repeated_by_its_sentence() -> None:
    proxy = _measured(
        "gpu_compute_to_memory",
        "ok",
        1.28,
        1.29,
        0.772,
        "",
        "GPU compute-to-memory ratio (proxy) is 1.28 (baseline 1.29, limit < 0.772). Proxy for Nsight.",
        comparison="<",
    )
    no_baseline = _measured(
        "queue_time_p95",
        "breached",
        2.77,
        0.088,
        0.138,
        "seconds",
        "Time requests wait in the queue p95 is 2.77 s (baseline n/a, limit > n/a (no baseline)), "
        "beyond its limit for the whole window (no healthy baseline)",
    )
    findings = render("host=gpu-node-7", [KV, proxy, no_baseline], [])
    findings = findings[findings.index("Findings:") :]
    assert "[!!] kv_cache_usage             98% (baseline 55%, limit > 92%) since 04:12 UTC\n" in findings
    assert findings.count("98%") == 1 and findings.count("1.28") == 1 and findings.count("2.77") == 1
    assert findings.endswith("\n       Proxy for Nsight."), "what the sentence adds, on a line of its own"
    assert "\n       beyond its limit for the whole window (no healthy baseline)" in findings


def test_causes_carry_their_supporting_and_contradicting_findings_and_the_top_cause_its_next_steps() -> None:
    text = render("host=gpu-node-7", [RATE, TTFT, KV], CAUSES)
    causes = text[: text.index("Findings:")]
    first, second = causes.split("  2. ")
    assert "1. kv_memory_pressure  confidence 0.90" in first
    assert f"+ kv_cache_usage           {KV['detail']}" in first
    assert f"- request_rate             {RATE['detail']}" in first
    assert "Lower max-num-seqs." in first and "Add replicas." not in second, "next steps for the top cause only"
    assert "arrival_surge  confidence 0.45" in second


def test_no_data_is_its_own_answer_without_a_confidence() -> None:
    down = "Prometheus at http://127.0.0.1:9 is unavailable: connection refused or unreachable"
    findings = [
        _finding("queue_median", "unavailable", f"data unavailable: {down}"),
        _finding("kv_cache_usage", "unavailable", f"data unavailable: {down}"),
    ]
    ranked = [
        {
            "rank": 1,
            "category": "no_clear_cause",
            "confidence": 0.4,
            "title": "No clear cause",
            "evidence": [],
            "contradicting": [],
        }
    ]
    assert no_data_reason(findings) == down
    assert no_data_reason(findings, "no Prometheus configured (set RCA_PROMETHEUS_URL)").startswith("no Prometheus")
    assert no_data_reason([*findings, RATE]) is None, "one measured finding is data"
    traced = {**RATE, "id": "lora_load_share", "kind": "trace"}
    assert no_data_reason([*findings, traced]) == down, "a trace alone judges nothing (rca.domain.coverage)"
    text = render("host=x", findings, ranked, no_data=down)
    assert f"no data: {down}" in text
    assert "confidence" not in text and "0.40" not in text and "no_clear_cause" not in text


def test_no_data_hints_say_what_to_set() -> None:
    assert "set RCA_PROMETHEUS_URL" in no_data_hint("no serving series match this target", None)
    assert no_data_hint("no Prometheus configured (set RCA_PROMETHEUS_URL)", None) is None
    assert "RCA_PROMETHEUS_URL" in no_data_hint(
        "Prometheus at http://p:9090 is unavailable: timed out", "http://p:9090"
    )
    assert "has no series for this target" in no_data_hint("no serving series match this target", "http://p:9090")


def test_colour_only_when_asked_and_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = render("host=gpu-node-7", [KV, RATE], CAUSES)
    coloured = render("host=gpu-node-7", [KV, RATE], CAUSES, colour=True)
    assert "\033[" not in plain
    assert "\033[31m[!!]\033[0m kv_cache_usage" in coloured and "\033[32m[ok]\033[0m request_rate" in coloured
    assert re.sub(r"\033\[\d+m", "", coloured) == plain
    primary, replica = os.openpty()
    with os.fdopen(primary, "w") as _keep, os.fdopen(replica, "w") as tty:
        monkeypatch.delenv("NO_COLOR", raising=False)
        monkeypatch.setenv("TERM", "xterm")
        assert use_colour(tty)
        monkeypatch.setenv("NO_COLOR", "1")
        assert not use_colour(tty)
    assert not use_colour(io.StringIO())


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [
        (0.985, "ratio", "98%"),
        (0.2, "probability", "20%"),
        (85.2, "percent", "85.2 %"),
        (0.35, "seconds", "0.35 s"),
        (8.04, "per_second", "8.04/s"),
        (1976.0, "MHz", "1,976 MHz"),
        (64.0, "bitmask", "0x40"),
        (61.7, "celsius", "61.7 °C"),
        (9.09, "requests", "9.09 requests"),
        (None, "ratio", "n/a"),
    ],
)
def test_values_print_in_their_unit(value: float | None, unit: str, shown: str) -> None:
    assert format_value(value, unit) == shown


def test_written_by_names_the_model_only_when_its_answer_was_used() -> None:
    assert written_by("llm", "gpt-4o-mini", None) == "Written by model gpt-4o-mini"
    assert written_by("rules", "gpt-4o-mini", "LLM unavailable: HTTP 503") == (
        "Written by the rules fallback: the answer of model gpt-4o-mini was not used (LLM unavailable: HTTP 503)"
    )
    assert written_by("rules", None, "no LLM configured (RCA_LLM_BASE_URL unset)") == (
        "Written by the rules (no LLM configured)"
    )
