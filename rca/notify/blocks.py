"""Render an `IncidentMessage` as a Block Kit payload that Slack will always accept.

Limits enforced here (Slack's Block Kit reference, https://docs.slack.dev/reference/block-kit/blocks):
a message holds at most 50 blocks; a section's text at most 3,000 characters; a header's
plain_text at most 150; a button's text 75 and its URL 3,000. Longer content is cut, with a note
that says so, instead of being rejected.

Escaping follows the text object's type (https://docs.slack.dev/reference/block-kit/composition-objects/text-object):
every untrusted string in a `mrkdwn` text (sections, context, the message's `text`) goes through
`escape.mrkdwn`; a `plain_text` one (the header) is shown as written, so it is never escaped (an
escaped `<` would show as `&lt;`), only kept on one line.

A degraded result says so: an inconclusive investigation (nothing measured: Prometheus unconfigured,
down, or without series for the target) leads with "Could not investigate: …why…" and shows no cause
and no breached signals, never "no signal breached"; signals without data are named;
and the line saying who wrote the answer names the rules when the model's answer was not used,
and why.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rca.domain.status import AlertStatus, Analyst
from rca.domain.values import format_value
from rca.notify import actions
from rca.notify.escape import code, mrkdwn, single_line
from rca.notify.message import BreachedLine, HypothesisLine, IncidentMessage

MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_HEADER_TEXT = 150
MAX_BUTTON_TEXT = 75
MAX_URL = 3000
MAX_FALLBACK_TEXT = 300  # the notification text; Slack allows far more, a phone shows far less
MAX_WHY = 280
MAX_SUMMARY = 500
SHOWN_HYPOTHESES = 3
MAX_REASON = 300  # why the model's answer was not used; the incident in the API has all of it
MAX_GAP = 600  # what was missing (a Prometheus error can be long)
SHOWN_BREACHED = 25  # a page of evidence; the rest is one click away in the incident

Block = dict[str, Any]
Payload = dict[str, Any]


def cut(text: str, limit: int, note: str = "… (cut)") -> str:
    """`text` within `limit` characters, ending in `note` when something was cut. Never splits an
    `&amp;`-style entity, and prefers to end at a line break."""
    if len(text) <= limit:
        return text
    end = max(limit - len(note), 0)
    amp = text.rfind("&", max(end - 5, 0), end)
    if amp != -1 and ";" not in text[amp:end]:
        end = amp  # the entity would be split in half: drop it whole
    newline = text.rfind("\n", 0, end)
    if newline > end * 0.7:
        end = newline
    return text[:end].rstrip() + note


CUT_NOTE = "\n_… cut to fit Slack; the incident in the API has the rest_"


def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": cut(text, MAX_SECTION_TEXT, CUT_NOTE)}}


def _context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": cut(text, MAX_SECTION_TEXT)}]}


def _hypothesis(rank: int, h: HypothesisLine) -> Block:
    why = cut(mrkdwn(single_line(h.why)), MAX_WHY)
    return _section(f"*{rank}. {code(h.category)}* — {h.confidence:.0%}\n{why}")


def _breached_line(f: BreachedLine) -> str:
    limit = f" (limit {f.comparison} {format_value(f.threshold, f.unit)})" if f.threshold is not None else ""
    return (
        f"• {mrkdwn(single_line(f.title))} {code(f.key)}: "
        f"{format_value(f.baseline, f.unit)} → *{format_value(f.value, f.unit)}*{limit}"
    )


def _breached_sections(breached: list[BreachedLine]) -> list[Block]:
    if not breached:
        return [_section("*Breached signals*\nNo signal breached its threshold.")]
    sections, text = [], "*Breached signals* (baseline → current)"
    lines = [_breached_line(f) for f in breached[:SHOWN_BREACHED]]
    if len(breached) > SHOWN_BREACHED:
        lines.append(f"_… and {len(breached) - SHOWN_BREACHED} more; the incident in the API lists them all_")
    for line in lines:
        if len(text) + 1 + len(line) > MAX_SECTION_TEXT:
            sections.append(_section(text))
            text = ""
        text = f"{text}\n{line}" if text else line
    sections.append(_section(text))
    return sections


def _safe_url(url: str | None) -> str | None:
    """Only http(s) URLs of a length Slack accepts become buttons; anything else is left out."""
    if url and url.startswith(("http://", "https://")) and len(url) <= MAX_URL:
        return url
    return None


def _links(message: IncidentMessage) -> Block | None:
    buttons: list[Block] = []
    for label, url in (
        (f"Incident #{message.incident_id}", message.incident_url),
        ("Prometheus", message.generator_url),
        ("Alertmanager", message.external_url),
    ):
        if (safe := _safe_url(url)) is not None:
            buttons.append(
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": label[:MAX_BUTTON_TEXT]},
                    "url": safe,
                    "action_id": f"link-{len(buttons)}",
                }
            )
    return {"type": "actions", "elements": buttons} if buttons else None


def _written_by(message: IncidentMessage) -> str:
    """Who really wrote the hypotheses: the model only when its answer was used."""
    if message.analyst == Analyst.LLM:
        return f"Written by model {code(message.model or 'unknown')}"
    if message.model:  # a model was asked; the rules answer stands in for its answer
        reason = cut(mrkdwn(single_line(message.fallback_reason or "no reason recorded")), MAX_REASON)
        return f"Written by the *rules fallback*: the answer of model {code(message.model)} was not used ({reason})"
    return "Written by *rules*"


def _cost(message: IncidentMessage) -> str:
    parts = [] if _blind(message) else [_written_by(message)]  # blind: nobody wrote an answer
    parts.append(f"{message.seconds:.1f} s" if message.seconds is not None else "time n/a")
    parts.append(f"{message.tokens:,} tokens" if message.tokens is not None else "no LLM tokens")
    if message.cost_usd is not None:
        parts.append(f"${message.cost_usd:.4f}")
    return " · ".join(parts)


def _last_time(message: IncidentMessage) -> Block | None:
    p = message.precedent
    if p is None or not p.category:
        return None
    known = "confirmed by an engineer" if p.confirmed else "ranked first then, not confirmed"
    ref = f"#{p.incident_id}"
    if (safe := _safe_url(message.precedent_url)) is not None and not set("<>|") & set(safe):
        ref = f"<{safe}|{ref}>"
    return _context(
        f":repeat: *Last time* ({ref}, {p.created_at:%Y-%m-%d}, {p.score:.0%} alike): {code(p.category)}, {known}"
    )


def header_text(message: IncidentMessage) -> str:
    """The header's plain_text: not mrkdwn, so nothing is escaped (Slack would show `&lt;`)."""
    icon = ":white_check_mark:" if message.status == AlertStatus.RESOLVED else ":rotating_light:"
    return cut(f"{icon} {single_line(message.alertname)} on {single_line(message.subject)}", MAX_HEADER_TEXT, "…")


def _blind(message: IncidentMessage) -> bool:
    return message.data_gap is not None and message.data_gap.blind


def _fleet_section(message: IncidentMessage) -> list[Block]:
    """A fleet incident's hosts by cause: a few lines whatever the fleet's size (each host's own
    findings are in the incident)."""
    if message.fleet is None:
        return []
    lines = [f"• {mrkdwn(single_line(line))}" for line in message.fleet.lines()]
    if message.fleet.fleet_wide:
        lines[0] = f"*{lines[0]}*"
    return [_section("*Hosts by most likely cause*\n" + "\n".join(lines))]


def fallback_text(message: IncidentMessage) -> str:
    """The plain `text` Slack shows in notifications and where blocks cannot be drawn."""
    top = message.hypotheses[0] if message.hypotheses else None
    cause = f": likely {top.category} ({top.confidence:.0%})" if top else ""
    if message.fleet is not None and message.fleet.lines():
        cause = f": {single_line(message.fleet.lines()[0])}"
    if message.data_gap is not None and message.data_gap.headline:
        cause = f": {message.data_gap.headline}"
    if message.failure:
        cause = ": the investigation failed"
    state = "resolved" if message.status == AlertStatus.RESOLVED else "firing"
    text = f"[{state}] {mrkdwn(single_line(message.alertname))} on {mrkdwn(single_line(message.subject))}{cause}"
    return cut(text, MAX_FALLBACK_TEXT, "…")


def _verdicts(message: IncidentMessage) -> list[Block]:
    """Who confirmed which cause, and who asked for the investigation running now."""
    said = []
    if (c := message.confirmed) is not None:
        said.append(_context(f":white_check_mark: Confirmed by {mrkdwn(single_line(c.author))}: {code(c.cause)}"))
    if message.asked_by is not None:
        said.append(
            _context(f":arrows_counterclockwise: Re-investigating, asked by {mrkdwn(single_line(message.asked_by))}")
        )
    return said


def _buttons(message: IncidentMessage) -> Block:
    """Confirm the top cause, pick another, investigate again (rca/notify/actions.py)."""
    ranked = message.hypotheses and not _blind(message) and not message.failure
    top = message.hypotheses[0].category if ranked else None
    if message.fleet is not None:  # a fleet's cause to confirm is the one its hosts share, if they do
        top = message.fleet.fleet_wide
    elements = actions.elements(message.incident_id, message.investigation_id, top, message.causes)
    return {"type": "actions", "block_id": actions.BLOCK_ID, "elements": elements}


def render(message: IncidentMessage, note: str | None = None, buttons: bool = False) -> Payload:
    """The whole message: header, status, who confirmed or asked, top causes, breached signals,
    who/cost, the buttons (`buttons`: a bot's message, which Slack can click back to us), links."""
    status = [f"*Incident #{message.incident_id}* · {mrkdwn(message.status)}"]
    if message.severity:
        status.append(f"severity {code(message.severity)}")
    head: list[Block] = [
        {"type": "header", "text": {"type": "plain_text", "text": header_text(message), "emoji": True}}
    ]
    if note:
        head.append(_context(note))
    head += _verdicts(message)
    if message.failure:  # first: there is no answer below, only the alert
        failure = cut(mrkdwn(single_line(message.failure)), MAX_GAP)
        head.append(_section(f":x: *The investigation failed; no cause was ranked.* {failure}"))
    gap = message.data_gap
    if gap is not None and gap.blind:  # first, so that nobody reads what follows as healthy
        head.append(_section(f":warning: *{cut(mrkdwn(single_line(gap.text)), MAX_GAP)}*"))
    summary = f"\n{cut(mrkdwn(single_line(message.summary)), MAX_SUMMARY)}" if message.summary else ""
    body = [_section(" · ".join(status) + summary)]
    if message.fleet is not None:
        body += _fleet_section(message)
    elif not _blind(message):  # a ranking of nothing is not a judgement, nor an empty list of breaches
        if message.hypotheses:
            body.append(_section("*Most likely causes*"))
            body += [_hypothesis(i, h) for i, h in enumerate(message.hypotheses[:SHOWN_HYPOTHESES], start=1)]
        if (last := _last_time(message)) is not None:
            body.append(last)
        body += _breached_sections(message.breached)
    if gap is not None and not gap.blind:
        body.append(_context(f":grey_question: {cut(mrkdwn(single_line(gap.text)), MAX_GAP)}"))
    tail = [_context(_cost(message))]
    if buttons:
        tail.append(_buttons(message))
    if (links := _links(message)) is not None:
        tail.append(links)
    room = MAX_BLOCKS - len(head) - len(tail)
    if len(body) > room:
        dropped = len(body) - room + 1
        body = body[: room - 1] + [_context(f"_… {dropped} more blocks cut to fit Slack; the incident has them all_")]
    return {"text": fallback_text(message), "blocks": head + body + tail}


def change_reply(message: IncidentMessage, investigation_id: int) -> Payload:
    """Thread reply when a re-investigation materially changed the evidence or the ranking."""
    top = ", ".join(code(h.category) for h in message.hypotheses[:SHOWN_HYPOTHESES]) or "none"
    breached = ", ".join(code(f.key) for f in message.breached) or "none"
    now = f"Top causes now: {top}\nBreached: {breached}"
    if message.fleet is not None:
        now = "Hosts now: " + "; ".join(mrkdwn(single_line(line)) for line in message.fleet.lines())
    text = (
        f":arrows_counterclockwise: Re-investigation #{investigation_id} changed the evidence; "
        f"the message above is updated.\n{now}"
    )
    return {
        "text": cut(f"Re-investigation #{investigation_id} changed the evidence", MAX_FALLBACK_TEXT),
        "blocks": [_section(text)],
    }


def resolved_reply(message: IncidentMessage, resolved_at: datetime | None) -> Payload:
    """Thread reply (or, for a webhook, a short message) when Alertmanager reports the group resolved."""
    when = f" at {resolved_at:%Y-%m-%d %H:%M} UTC" if resolved_at else ""
    text = (
        f":white_check_mark: Resolved{when}: {mrkdwn(single_line(message.alertname))} on "
        f"{mrkdwn(single_line(message.subject))} (incident #{message.incident_id})"
    )
    return {"text": cut(text, MAX_FALLBACK_TEXT, "…"), "blocks": [_section(text)]}
