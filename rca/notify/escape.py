"""Make untrusted text inert in Slack mrkdwn.

Slack treats `&`, `<` and `>` as control characters: `<!channel>` pings everyone, `<@U123>` a user,
`<http://x|click>` makes a link. Replacing exactly those three with HTML entities is what Slack's
formatting reference prescribes (https://docs.slack.dev/messaging/formatting-message-text#escaping);
nothing else is entity-encoded, or it would show up literally. Alert labels, annotations and LLM
output all pass through `mrkdwn()` before they reach a message.
"""

from __future__ import annotations

_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def mrkdwn(text: object) -> str:
    """`text` with `&`, `<`, `>` escaped (ampersand first, so entities are not escaped twice)."""
    return "".join(_ENTITIES.get(ch, ch) for ch in str(text))


def code(text: object) -> str:
    """Untrusted text as inline code: escaped, and without backticks that would end the span."""
    return "`" + mrkdwn(str(text).replace("`", "'")) + "`"


def single_line(text: object) -> str:
    """Collapse whitespace, so a multi-line annotation cannot add its own quote or list lines."""
    return " ".join(str(text).split())
