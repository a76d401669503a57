"""Plain-text rendering of a ranked result for the terminal (`rca investigate`, `rca demo`).

Causes come first, each with the findings that support and contradict it; then every finding,
breached first, with its value, baseline and threshold in its unit, and what its sentence says
beyond those numbers (each finding once, not its numbers again). When nothing
could be measured the report says "no data" and why, never a confidence: a ranking of nothing is
not a judgement. Colour is for terminals only (the caller decides, see `use_colour`).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any, TextIO

from rca.domain.coverage import data_gap, judged
from rca.domain.values import format_value

MEASURED = ("breached", "ok")
_STATUS_ORDER = {"breached": 0, "ok": 1, "not_measurable": 2, "unavailable": 3}
_MARK = {"breached": "!!", "ok": "ok"}
_COLOURS = {"red": "31", "green": "32", "bold": "1", "dim": "2", "yellow": "33"}
# A measured finding's sentence opens with the numbers `measure` prints: "<title> is <value>
# (baseline <b>, limit <c> <t>)", the limit possibly "n/a (no baseline)" (rca/signals/findings.py).
_SENTENCE_NUMBERS = re.compile(r"^.*? is [^(]*\(baseline [^()]*, limit (?:[^()]|\([^()]*\))*\)")


def use_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and never with NO_COLOR set (https://no-color.org) or TERM=dumb."""
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


class _Style:
    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def __call__(self, text: str, name: str) -> str:
        return f"\033[{_COLOURS[name]}m{text}\033[0m" if self.colour else text


def _limit(finding: dict[str, Any]) -> str:
    if finding.get("threshold") is None:
        return "limit n/a"
    return f"limit {finding['comparison']} {format_value(finding['threshold'], finding['unit'])}"


def measure(finding: dict[str, Any]) -> str:
    """`98% (baseline 55%, limit > 95%)`: the numbers of a measured finding."""
    unit = finding["unit"]
    return (
        f"{format_value(finding['value'], unit)} "
        f"(baseline {format_value(finding['baseline'], unit)}, {_limit(finding)})"
    )


def beyond_numbers(finding: dict[str, Any]) -> str:
    """What a measured finding's sentence says besides the numbers `measure` shows (its onset, a
    proxy's note), or the whole sentence when it is worded otherwise."""
    detail = finding["detail"]
    match = _SENTENCE_NUMBERS.match(detail)
    return detail[match.end() :].lstrip(",. ") if match else detail


def no_data_reason(findings: list[dict[str, Any]], prometheus_error: str | None = None) -> str | None:
    """Why nothing could be judged, or None when the investigation saw something (the rule every
    output shares: `rca.domain.coverage`)."""
    gap = data_gap([judged(f) for f in findings], prometheus_error)
    if gap is None or not gap.blind:
        return None
    if prometheus_error:
        return prometheus_error
    details = Counter(f["detail"].removeprefix("data unavailable: ") for f in findings)
    return details.most_common(1)[0][0] if details else "the investigation produced no findings"


def written_by(analyst: str | None, model: str | None, fallback_reason: str | None) -> str:
    """Who really wrote the hypotheses, in the words of the Slack message (`rca.notify.blocks`):
    the model only when its answer was used; after a fallback the rules, and why not the model."""
    if analyst == "llm":
        return f"Written by model {model or 'unknown'}"
    if model:
        why = fallback_reason or "no reason recorded"
        return f"Written by the rules fallback: the answer of model {model} was not used ({why})"
    return "Written by the rules (no LLM configured)" if fallback_reason else "Written by the rules"


def no_data_hint(reason: str, prometheus_url: str | None) -> str | None:
    """What to do about it, for a human; None when the reason already says."""
    if "RCA_PROMETHEUS_URL" in reason:
        return None
    if not prometheus_url:
        return "set RCA_PROMETHEUS_URL to the Prometheus that scrapes the fleet"
    if prometheus_url in reason:  # unreachable
        return "is Prometheus up? check RCA_PROMETHEUS_URL"
    if reason.startswith("query failed"):
        return f"Prometheus at {prometheus_url} refused the queries: check RCA_PROMETHEUS_URL"
    return f"Prometheus at {prometheus_url} has no series for this target: check the alert's labels"


def render(
    subject: str,
    findings: list[dict[str, Any]],
    hypotheses: list[dict[str, Any]],
    *,
    colour: bool = False,
    no_data: str | None = None,
) -> str:
    """Findings and hypotheses as dicts (API shape), formatted for a human. `no_data` (why
    nothing was measured, see `no_data_reason`) replaces the ranking, which judged nothing."""
    style = _Style(colour)
    lines = [f"Target: {subject}", ""]
    if no_data is not None:
        lines.append(style(f"no data: {no_data}", "yellow"))
        lines.append(f"  nothing was measured ({len(findings)} findings unavailable), so no cause is ranked")
        return "\n".join(lines)
    by_id = {f["id"]: f for f in findings}
    lines.append("Ranked root causes:")
    for h in hypotheses:
        lines.append(f"  {h['rank']}. {style(h['category'], 'bold')}  confidence {h['confidence']:.2f}  {h['title']}")
        for heading, ids, sign in (
            ("supported by", h.get("evidence") or [], "+"),
            ("contradicted by", h.get("contradicting") or [], "-"),
        ):
            if ids:
                lines.append(f"     {heading}:")
            for fid in ids:
                known = by_id.get(fid)
                sentence = known["detail"] if known else "(not among the findings)"
                lines.append(f"       {sign} {fid:<24} {sentence}")
        if h["rank"] == 1 and h.get("next_steps"):
            lines.append("     next steps:")
            lines += [f"       > {step}" for step in h["next_steps"]]
    lines += ["", "Findings:"]  # breached first
    missing: dict[str, list[str]] = {}  # reason -> finding ids, so one outage is said once
    for f in sorted(findings, key=lambda f: _STATUS_ORDER.get(f["status"], 9)):
        if f["status"] not in MEASURED:
            missing.setdefault(f["detail"], []).append(f["id"])
            continue
        mark = _MARK[f["status"]]
        mark = style(f"[{mark}]", "red" if f["status"] == "breached" else "green")
        rest = beyond_numbers(f)  # the numbers once, not again in the sentence under them
        since = rest.startswith("since ")
        lines.append(f"  {mark} {f['id']:<26} {measure(f)}" + (f" {rest}" if since else ""))
        if rest and not since:
            lines.append(f"       {rest}")
    for reason, ids in missing.items():
        lines.append(f"  {style('[--]', 'dim')} {', '.join(ids)}")
        lines.append(f"       {reason}")
    return "\n".join(lines)
