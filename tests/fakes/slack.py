"""A local HTTP server that speaks the two Slack protocols the service uses, and checks every
payload it receives against Block Kit's limits.

Web API (`POST /api/chat.postMessage`, `POST /api/chat.update`), as slack_sdk sends them (JSON,
or form fields with `blocks` and `metadata` as JSON strings), with `Authorization: Bearer
xoxb-...`. Answers HTTP 200 with `{"ok": true, "channel": ..., "ts": ..., "message": {...}}` or
`{"ok": false, "error": "..."}`; chat.update needs the channel id and the ts that
chat.postMessage returned. A message's `ts` is the time it was posted (seconds.microseconds,
unique in the channel), and the message keeps the `metadata` it was posted with
(`{"event_type": ..., "event_payload": {...}}`).
  https://docs.slack.dev/reference/methods/chat.postMessage
  https://docs.slack.dev/reference/methods/chat.update
  https://docs.slack.dev/messaging/message-metadata
Reading a channel (`conversations.history`) or a thread (`conversations.replies`), by GET query,
as slack_sdk sends them, or POST form/JSON: `channel` must be a conversation ID (a `#name` is
`channel_not_found`); `oldest`/`latest` bound the `ts` (exclusive unless `inclusive`), `limit`
(default 100, at most 999) and `cursor` page. The answer is `{"ok": true, "messages": [...],
"has_more": ..., "response_metadata": {"next_cursor": ...}}`: history has the channel's top-level
messages newest first, replies the thread's parent first and then its replies oldest first. A
message carries `metadata` only when `include_all_metadata` is set. Both need the token to have
`channels:history`; without it `{"ok": false, "error": "missing_scope", "needed": ...,
"provided": ...}` (`scopes` models the token's scopes).
  https://docs.slack.dev/reference/methods/conversations.history
  https://docs.slack.dev/reference/methods/conversations.replies
Incoming webhook (`POST /services/T.../B.../secret`): 200 with the plain-text body `ok`;
`invalid_payload` 400, `no_service` 404, plain-text error bodies.
  https://api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks
A click's `response_url` (`POST /actions/T.../.../secret`, JSON): `response_type`
`ephemeral` or `in_channel`, `replace_original`/`delete_original` booleans, and text or blocks;
200 with `{"ok": true}`, or `{"ok": false, "error": "..."}` (an unknown URL: 404 `expired_url`).
  https://docs.slack.dev/interactivity/handling-user-interaction#message_responses
Rate limits: HTTP 429 with `Retry-After: <seconds>`.
  https://docs.slack.dev/apis/web-api/rate-limits
Block Kit limits: 50 blocks a message, header plain_text 150, section text 3,000, section fields
10 of 2,000, context 10 elements, actions 25 elements, button text 75, URL 3,000, block_id 255.
  https://docs.slack.dev/reference/block-kit/blocks
"""

from __future__ import annotations

import base64
import json
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.helpers.loopback import LoopbackServer

TOKEN = "xoxb-fake-secret-token-0123456789"
WEBHOOK_PATH = "/services/T0000TEST/B0000TEST/fakeWebhookSecretXyz"
RESPONSE_PATH = "/actions/T0000TEST/1234567890/fakeResponseSecretXyz"
TEXT_OBJECT_TYPES = ("plain_text", "mrkdwn")
BOT_SCOPES = frozenset({"chat:write", "channels:history"})
READ_METHODS = ("conversations.history", "conversations.replies")
JSON_FIELDS = ("blocks", "metadata")  # sent as JSON strings inside form bodies


def _text_problems(where: str, obj: Any, limit: int, kinds: tuple[str, ...] = TEXT_OBJECT_TYPES) -> list[str]:
    if not isinstance(obj, dict) or obj.get("type") not in kinds or not isinstance(obj.get("text"), str):
        return [f"{where}: not a text object of type {'/'.join(kinds)}"]
    if not obj["text"]:
        return [f"{where}: empty text"]
    if len(obj["text"]) > limit:
        return [f"{where}: {len(obj['text'])} characters, more than {limit}"]
    return []


def _element_problems(where: str, item: dict[str, Any]) -> list[str]:
    """A button (text 75, url 3,000, value 2,000) or a static_select (placeholder 150, 1 to 100
    options of text 75 and value 150); action_id at most 255."""
    problems = [] if len(item.get("action_id", "")) <= 255 else [f"{where}.action_id longer than 255"]
    if item.get("type") == "static_select":
        problems += _text_problems(f"{where}.placeholder", item.get("placeholder"), 150, ("plain_text",))
        options = item.get("options") or []
        if not 1 <= len(options) <= 100:
            problems.append(f"{where}.options: {len(options)} (1 to 100)")
        for k, option in enumerate(options):
            problems += _text_problems(f"{where}.options[{k}].text", option.get("text"), 75, ("plain_text",))
            if not 1 <= len(option.get("value", "")) <= 150:
                problems.append(f"{where}.options[{k}].value: 1 to 150 characters")
        return problems
    if item.get("type") != "button":
        return problems + [f"{where}: unexpected element type {item.get('type')!r}"]
    problems += _text_problems(f"{where}.text", item.get("text"), 75, ("plain_text",))
    if len(item.get("url", "")) > 3000:
        problems.append(f"{where}.url longer than 3,000")
    if len(item.get("value", "")) > 2000:
        problems.append(f"{where}.value longer than 2,000")
    if item.get("style") not in (None, "primary", "danger"):
        problems.append(f"{where}.style: {item['style']!r} (primary or danger)")
    return problems


def block_kit_problems(payload: dict[str, Any]) -> list[str]:
    """Everything in a message payload that breaks Block Kit's documented limits."""
    problems = []
    text, blocks = payload.get("text"), payload.get("blocks")
    if not text and not blocks:
        problems.append("neither text nor blocks")
    if text is not None and (not isinstance(text, str) or len(text) > 40000):
        problems.append("text is not a string of at most 40,000 characters")
    if blocks is None:
        return problems
    if not isinstance(blocks, list) or len(blocks) > 50:
        return problems + [f"blocks: {len(blocks) if isinstance(blocks, list) else 'not a list'} (at most 50)"]
    for i, block in enumerate(blocks):
        kind, where = block.get("type"), f"blocks[{i}]"
        if len(block.get("block_id", "")) > 255:
            problems.append(f"{where}.block_id longer than 255")
        if kind == "header":
            problems += _text_problems(f"{where}.text", block.get("text"), 150, ("plain_text",))
        elif kind == "section":
            if "text" not in block and "fields" not in block:
                problems.append(f"{where}: a section needs text or fields")
            if "text" in block:
                problems += _text_problems(f"{where}.text", block["text"], 3000)
            for j, item in enumerate(block.get("fields", [])):
                problems += _text_problems(f"{where}.fields[{j}]", item, 2000)
            if len(block.get("fields", [])) > 10:
                problems.append(f"{where}.fields: more than 10")
        elif kind == "context":
            elements = block.get("elements") or []
            if not 1 <= len(elements) <= 10:
                problems.append(f"{where}.elements: {len(elements)} (1 to 10)")
            for j, item in enumerate(elements):
                problems += _text_problems(f"{where}.elements[{j}]", item, 3000)
        elif kind == "actions":
            elements = block.get("elements") or []
            if not 1 <= len(elements) <= 25:
                problems.append(f"{where}.elements: {len(elements)} (1 to 25)")
            for j, item in enumerate(elements):
                problems += _element_problems(f"{where}.elements[{j}]", item)
        elif kind != "divider":
            problems.append(f"{where}: unexpected block type {kind!r}")
    return problems


@dataclass
class Received:
    at: float  # time.monotonic() when answered
    path: str
    payload: dict[str, Any]
    status: int
    answer: str


@dataclass
class Failure:
    status: int
    retry_after: int | None = None
    error: str = "service_unavailable"


@dataclass
class FakeSlack(LoopbackServer):
    """Start with `with FakeSlack() as slack:`; script failures with `fail_next`; set `down` for an outage."""

    received: list[Received] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    messages: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    down: bool = False
    delay: float = 0.0  # seconds before each answer, to make concurrent calls overlap
    arrived: int = 0  # requests read so far, answered or not (a test can wait for one in flight)
    scopes: frozenset[str] = BOT_SCOPES  # what the bot token was granted
    # Called with (method, answer) once a Web API method succeeded (("webhook", {}) for an incoming
    # webhook's post), before the answer is sent: a test strikes a fault at the moment Slack has
    # accepted a message and the sender not yet heard.
    on_accepted: Callable[[str, dict[str, Any]], None] | None = None

    def __post_init__(self) -> None:
        self._failures: deque[Failure] = deque()
        self._last_ts = 0.0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self._serve(self.rfile.read(int(self.headers.get("content-length") or 0)))

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self._serve(None)

            def _serve(self, body: bytes | None) -> None:
                with fake._lock:
                    fake.arrived += 1
                time.sleep(fake.delay)
                path = urlsplit(self.path).path
                status, headers, answer, payload = fake.answer(self.path, dict(self.headers), body)
                if fake.on_accepted is not None and status == 200 and path.startswith("/api/"):
                    result = json.loads(answer)
                    if result.get("ok"):
                        fake.on_accepted(path.removeprefix("/api/"), result)
                elif fake.on_accepted is not None and status == 200 and path == WEBHOOK_PATH:
                    fake.on_accepted("webhook", {})  # its answer is the body `ok`
                # Recorded before answering: a sender that saw the answer may already have said so
                # in Postgres, and a test that reads that must find the request here too.
                with fake._lock:
                    fake.received.append(Received(time.monotonic(), path, payload, status, answer))
                data = answer.encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler, name="fake-slack")
        self.api_url = f"{self.base}/api/"
        self.webhook_url = f"{self.base}{WEBHOOK_PATH}"
        self.response_url = f"{self.base}{RESPONSE_PATH}"

    def reset(self) -> None:
        """Forget what was received, for the next test on a server shared by a module."""
        with self._lock:
            self.received.clear()
            self.problems.clear()
            self.messages.clear()
            self._failures.clear()
            self.arrived = 0
        self.down, self.delay, self.scopes, self.on_accepted = False, 0.0, BOT_SCOPES, None

    def fail_next(self, *failures: Failure) -> None:
        self._failures.extend(failures)

    # ------------------------------------------------------------------ what tests look at

    def calls(self, path_end: str, ok_only: bool = True) -> list[Received]:
        return [
            r
            for r in self.received
            if r.path.endswith(path_end)
            and (r.status == 200 or not ok_only)
            and (not ok_only or '"ok": false' not in r.answer)
        ]

    def posts(self) -> list[Received]:
        """Accepted chat.postMessage calls that started a message (not thread replies)."""
        return [r for r in self.calls("chat.postMessage") if not r.payload.get("thread_ts")]

    def replies(self) -> list[Received]:
        return [r for r in self.calls("chat.postMessage") if r.payload.get("thread_ts")]

    def updates(self) -> list[Received]:
        return self.calls("chat.update")

    def webhook_posts(self) -> list[Received]:
        return self.calls(WEBHOOK_PATH)

    def responses(self) -> list[Received]:
        """What was said at a click's response_url."""
        return self.calls(RESPONSE_PATH)

    def reads(self) -> list[Received]:
        """conversations.history and conversations.replies calls, answered or not."""
        return [r for r in self.received if r.path.removeprefix("/api/") in READ_METHODS]

    # ------------------------------------------------------------------ the protocol

    def answer(self, path: str, headers: dict[str, str], body: bytes | None) -> tuple[int, dict[str, str], str, dict]:
        url = urlsplit(path)
        path = url.path
        payload = self._parse(headers, body) if body is not None else self._query(url.query)
        api = path.startswith("/api/")
        plain = {"Content-Type": "text/html"}  # what hooks.slack.com sends with its string bodies
        jsonh = {"Content-Type": "application/json; charset=utf-8"}
        if self.down:
            return 503, plain, "<html><body>503 Service Unavailable</body></html>", payload
        with self._lock:
            failure = self._failures.popleft() if self._failures else None
        if failure is not None:
            extra = {"Retry-After": str(failure.retry_after)} if failure.retry_after is not None else {}
            if failure.status == 429:
                body_text = json.dumps({"ok": False, "error": "ratelimited"}) if api else "rate_limited"
                return 429, {**(jsonh if api else plain), **extra}, body_text, payload
            return failure.status, {**plain, **extra}, failure.error, payload
        if payload is None:
            return (
                (200, jsonh, json.dumps({"ok": False, "error": "invalid_json"}), {})
                if api
                else (400, plain, "invalid_payload", {})
            )
        if path == RESPONSE_PATH or path.startswith("/actions/"):
            return self._respond(path, payload)
        problems = [] if path.removeprefix("/api/") in READ_METHODS else block_kit_problems(payload)
        if problems:
            self.problems += problems
            return (
                (200, jsonh, json.dumps({"ok": False, "error": "invalid_blocks"}), payload)
                if api
                else (400, plain, "invalid_blocks", payload)
            )
        if not api:
            if path != WEBHOOK_PATH:
                return 404, plain, "no_service", payload
            return 200, plain, "ok", payload
        if headers.get("Authorization") != f"Bearer {TOKEN}":
            return 200, jsonh, json.dumps({"ok": False, "error": "invalid_auth"}), payload
        method = path.removeprefix("/api/")
        handlers = {
            "chat.postMessage": self._post,
            "chat.update": self._update,
            "conversations.history": self._history,
            "conversations.replies": self._replies,
        }
        needed = "channels:history" if method in READ_METHODS else "chat:write"
        if method not in handlers:
            result = {"ok": False, "error": "unknown_method"}
        elif needed not in self.scopes:
            result = {
                "ok": False,
                "error": "missing_scope",
                "needed": needed,
                "provided": ",".join(sorted(self.scopes)),
            }
        else:
            with self._lock:
                result = handlers[method](payload)
        return 200, jsonh, json.dumps(result), payload

    def _respond(self, path: str, payload: dict[str, Any]) -> tuple[int, dict[str, str], str, dict]:
        jsonh = {"Content-Type": "application/json; charset=utf-8"}
        if path != RESPONSE_PATH:
            return 404, jsonh, json.dumps({"ok": False, "error": "expired_url"}), payload
        problems = block_kit_problems(payload)
        if payload.get("response_type") not in (None, "ephemeral", "in_channel"):
            problems.append(f"response_type {payload.get('response_type')!r}")
        for flag in ("replace_original", "delete_original"):
            if flag in payload and not isinstance(payload[flag], bool):
                problems.append(f"{flag} is not a boolean")
        if problems:
            self.problems += problems
            return 200, jsonh, json.dumps({"ok": False, "error": "invalid_blocks"}), payload
        return 200, jsonh, json.dumps({"ok": True}), payload

    @staticmethod
    def _parse(headers: dict[str, str], body: bytes) -> dict[str, Any] | None:
        kind = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
        try:
            if kind.startswith("application/json"):
                data = json.loads(body)
                return data if isinstance(data, dict) else None
            form: dict[str, Any] = {k: v[0] for k, v in parse_qs(body.decode()).items()}
            for name in JSON_FIELDS:
                if name in form:
                    form[name] = json.loads(form[name])
            return form
        except (ValueError, UnicodeDecodeError):
            return None

    @staticmethod
    def _query(query: str) -> dict[str, Any]:
        """A GET's arguments, as slack_sdk sends conversations.history and .replies."""
        return {k: v[0] for k, v in parse_qs(query).items()}

    @staticmethod
    def channel_id(channel: str) -> str:
        """Slack answers with the channel's id even when given its name."""
        return channel if channel.startswith("C") else f"C{zlib.crc32(channel.encode()):010d}"

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        channel = payload.get("channel")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        channel = self.channel_id(channel)
        thread_ts = payload.get("thread_ts")
        if thread_ts and (channel, thread_ts) not in self.messages:
            return {"ok": False, "error": "thread_not_found"}
        metadata = payload.get("metadata")
        if metadata is not None and not (
            isinstance(metadata, dict)
            and isinstance(metadata.get("event_type"), str)
            and isinstance(metadata.get("event_payload"), dict)
        ):
            return {"ok": False, "error": "invalid_metadata_format"}
        ts = self._next_ts()
        if thread_ts:  # a parent shows that it has a thread
            self.messages[(channel, thread_ts)]["thread_ts"] = thread_ts
        message = {
            "type": "message",
            "text": payload.get("text", ""),
            "blocks": payload.get("blocks", []),
            "ts": ts,
            "bot_id": "B0FAKE",
            **({"thread_ts": thread_ts} if thread_ts else {}),
            **({"metadata": metadata} if metadata is not None else {}),
        }
        self.messages[(channel, ts)] = message
        return {"ok": True, "channel": channel, "ts": ts, "message": self._shown(message, True)}

    def _next_ts(self) -> str:
        """The time now as Slack writes a message's ts, one microsecond on if that one is taken."""
        self._last_ts = max(round(time.time(), 6), round(self._last_ts + 0.000001, 6))
        return f"{self._last_ts:.6f}"

    @staticmethod
    def _shown(message: dict[str, Any], metadata: bool) -> dict[str, Any]:
        return message if metadata else {k: v for k, v in message.items() if k != "metadata"}

    def _window(self, payload: dict[str, Any]) -> tuple[Callable[[str], bool], int, int] | dict[str, Any]:
        """The ts filter, the page size and the offset of a read; or Slack's error about them."""
        inclusive = str(payload.get("inclusive", "")).lower() in ("1", "true")
        try:
            oldest = float(payload.get("oldest") or 0)
        except ValueError:
            return {"ok": False, "error": "invalid_ts_oldest"}
        try:
            latest = float(payload.get("latest") or time.time() + 1)
        except ValueError:
            return {"ok": False, "error": "invalid_ts_latest"}
        try:
            limit = min(max(int(payload.get("limit") or 100), 1), 999)
        except ValueError:
            return {"ok": False, "error": "invalid_limit"}
        offset = 0
        if payload.get("cursor"):
            try:
                offset = int(base64.b64decode(str(payload["cursor"]), validate=True).decode().removeprefix("offset:"))
            except ValueError:
                return {"ok": False, "error": "invalid_cursor"}

        def within(ts: str) -> bool:
            t = float(ts)
            return (oldest <= t <= latest) if inclusive else (oldest < t < latest)

        return within, limit, offset

    @staticmethod
    def _page(messages: list[dict[str, Any]], limit: int, offset: int, metadata: bool) -> dict[str, Any]:
        page = messages[offset : offset + limit]
        more = offset + limit < len(messages)
        cursor = base64.b64encode(f"offset:{offset + limit}".encode()).decode() if more else ""
        return {
            "ok": True,
            "messages": [FakeSlack._shown(m, metadata) for m in page],
            "has_more": more,
            "pin_count": 0,
            "response_metadata": {"next_cursor": cursor},
        }

    def _history(self, payload: dict[str, Any]) -> dict[str, Any]:
        channel = str(payload.get("channel") or "")
        window = self._window(payload)
        if isinstance(window, dict):
            return window
        if not channel.startswith("C"):
            return {"ok": False, "error": "channel_not_found"}  # a name is not an ID
        within, limit, offset = window
        found = [
            m for (c, ts), m in self.messages.items() if c == channel and m.get("thread_ts", ts) == ts and within(ts)
        ]
        found.sort(key=lambda m: float(m["ts"]), reverse=True)  # newest first
        metadata = str(payload.get("include_all_metadata", "")).lower() in ("1", "true")
        return self._page(found, limit, offset, metadata)

    def _replies(self, payload: dict[str, Any]) -> dict[str, Any]:
        channel, parent_ts = str(payload.get("channel") or ""), str(payload.get("ts") or "")
        window = self._window(payload)
        if isinstance(window, dict):
            return window
        parent = self.messages.get((channel, parent_ts))
        if parent is None:
            return {"ok": False, "error": "thread_not_found"}
        within, limit, offset = window
        thread = [m for (c, ts), m in self.messages.items() if c == channel and m.get("thread_ts") == parent_ts]
        thread = [m for m in thread if m["ts"] != parent_ts and within(m["ts"])]
        thread.sort(key=lambda m: float(m["ts"]))  # the parent, then its replies oldest first
        metadata = str(payload.get("include_all_metadata", "")).lower() in ("1", "true")
        return self._page([parent, *thread], limit, offset, metadata)

    def _update(self, payload: dict[str, Any]) -> dict[str, Any]:
        key = (payload.get("channel", ""), payload.get("ts", ""))
        if key not in self.messages:  # a channel name instead of its id also lands here, as on Slack
            return {"ok": False, "error": "message_not_found"}
        self.messages[key].update(text=payload.get("text", ""), blocks=payload.get("blocks", []))
        return {
            "ok": True,
            "channel": key[0],
            "ts": key[1],
            "text": payload.get("text", ""),
            "message": self.messages[key],
        }
