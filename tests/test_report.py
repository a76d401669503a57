"""The terminal report: causes first, then findings, with one line per reason data is missing."""

from __future__ import annotations

from rca.report import render


def _finding(fid: str, status: str, detail: str = "", value: float | None = None) -> dict:
    return {"id": fid, "status": status, "value": value, "baseline": None, "unit": "ratio", "onset": None,
            "detail": detail}


def test_findings_missing_for_the_same_reason_are_reported_once() -> None:
    down = "data unavailable: Prometheus at http://x is unavailable"
    findings = [_finding("queue_median", "breached", value=0.5), _finding("a", "unavailable", down),
                _finding("b", "unavailable", down), _finding("c", "not_measurable", "not measurable on this stack")]
    hypotheses = [{"rank": 1, "category": "arrival_surge", "confidence": 0.8, "title": "surge",
                   "evidence": ["queue_median"], "contradicting": []}]
    text = render("host=gpu-1", findings, hypotheses)
    assert text.count(down) == 1
    assert "[--] a, b" in text and "[--] c" in text
    assert "[!!] queue_median" in text
    assert text.index("arrival_surge") < text.index("Findings:")
