"""Plain-text rendering of a ranked result for the terminal (`rca investigate`, `rca demo`)."""

from __future__ import annotations

from typing import Any


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0%}" if unit == "ratio" else f"{value:.3g}"


def render(target: str, findings: list[dict[str, Any]], hypotheses: list[dict[str, Any]]) -> str:
    """Findings and hypotheses as dicts (API shape), formatted for a human."""
    lines = [f"Target: {target}", "", "Ranked root causes:"]
    for h in hypotheses:
        lines.append(f"  {h['rank']}. {h['category']}  confidence {h['confidence']:.2f}  - {h['title']}")
        if h.get("evidence"):
            lines.append(f"     evidence: {', '.join(h['evidence'])}")
        if h.get("contradicting"):
            lines.append(f"     against:  {', '.join(h['contradicting'])}")
    lines += ["", "Findings:"]
    missing: dict[str, list[str]] = {}  # reason -> finding ids, so one outage is said once
    for f in findings:
        if f["status"] in ("unavailable", "not_measurable"):
            missing.setdefault(f["detail"], []).append(f["id"])
            continue
        mark = "!!" if f["status"] == "breached" else "ok"
        onset = f" since {f['onset']}" if f.get("onset") else ""
        lines.append(
            f"  [{mark}] {f['id']:<26} {_value(f['value'], f['unit']):>8} "
            f"(baseline {_value(f['baseline'], f['unit'])}){onset}"
        )
    for reason, ids in missing.items():
        lines.append(f"  [--] {', '.join(ids)}")
        lines.append(f"       {reason}")
    return "\n".join(lines)
