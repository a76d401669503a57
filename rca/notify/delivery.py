"""Talk to Slack with `slack_sdk`: an incoming webhook, or the Web API with a bot token.

Every call returns a `SendResult` (never raises for Slack or network trouble) so the caller can
record the attempt and decide about retries itself: the clients' own retry handlers are turned
off, because a retry must be a new Celery attempt that is stored and visible in the API.

Protocols followed:
- incoming webhooks answer 200 with the body `ok`, or an HTTP error with a short string body
  (`invalid_payload` 400, `no_service` 404, ...):
  https://api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks
- Web API methods answer JSON `{"ok": true, ...}` or `{"ok": false, "error": "..."}`:
  https://docs.slack.dev/reference/methods/chat.postMessage, https://docs.slack.dev/reference/methods/chat.update
- HTTP 429 carries `Retry-After` in seconds: https://docs.slack.dev/apis/web-api/rate-limits
- a bot's message carries our key in its `metadata` (`{"event_type": ..., "event_payload": {...}}`),
  and conversations.history / conversations.replies (scope `channels:history`) return it with
  `include_all_metadata`, newest first / parent first, paged by `response_metadata.next_cursor`:
  https://docs.slack.dev/messaging/message-metadata,
  https://docs.slack.dev/reference/methods/conversations.history,
  https://docs.slack.dev/reference/methods/conversations.replies

Secrets: the webhook URL and the bot token are handed to slack_sdk only. slack_sdk logs the
webhook URL at DEBUG, so the clients get a logger of their own that never logs below WARNING,
and error texts are built from Slack's error codes, never from exception messages with the URL.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web import WebClient
from slack_sdk.webhook import WebhookClient, WebhookResponse

from rca.config import Settings

SDK_LOG = logging.getLogger("rca.notify.slack_sdk")
SDK_LOG.setLevel(logging.WARNING)  # slack_sdk's DEBUG lines carry the webhook URL

# Web API errors that arrive with `ok: false` but mean "Slack had a problem; try again later".
RETRYABLE_ERRORS = frozenset(
    {"ratelimited", "rate_limited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
ERROR_CODE = re.compile(r"[a-z0-9_]{1,100}")
# Web API errors that mean the token is wrong, revoked or lacks a scope: an operator must act.
AUTH_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "token_revoked",
        "token_expired",
        "account_inactive",
        "missing_scope",
        "no_permission",
        "invalid_token",
    }
)
NETWORK_ERRORS = (OSError, SlackRequestError)  # URLError, timeouts and refused connections are OSErrors
METADATA_EVENT = "rca_notice"  # the event_type of our messages' metadata; the payload holds the key
FIND_PAGE_SIZE, FIND_PAGES = 200, 10  # a search reads at most 2,000 messages of the window


@dataclass(frozen=True)
class SendResult:
    ok: bool
    http_status: int | None = None
    error: str | None = None
    retry_after: float | None = None
    retryable: bool = False
    channel: str | None = None
    ts: str | None = None
    timed_out: bool = False  # a network failure that was a timeout
    refused: bool = False  # the connection was refused: the request never reached Slack

    @property
    def outcome(self) -> str:
        if self.ok:
            return "ok"
        if self.http_status == 429 or self.error in ("ratelimited", "rate_limited"):
            return "rate_limited"
        return "retry" if self.retryable else "failed"

    @property
    def failure_reason(self) -> str:
        """The `reason` label of `rca_slack_delivery_failures_total`: a fixed set, never Slack's
        free-form error code."""
        if self.http_status is None:
            return "timeout" if self.timed_out else "network"
        if self.outcome == "rate_limited":
            return "rate_limited"
        if self.http_status in (401, 403) or self.error in AUTH_ERRORS:
            return "auth"
        return "server_error" if self.retryable else "rejected"

    @property
    def maybe_delivered(self) -> bool:
        """Whether Slack may have acted on a call that did not succeed: no answer came (a timeout,
        a connection lost mid-request), or a server or gateway error that can come after the
        message was stored (500, 502, 504). A refused connection, a 503 (not served), a 429 and
        Slack's `ok: false` answers mean it did not."""
        if self.ok:
            return True
        if self.http_status is None:
            return not self.refused
        return self.http_status in (500, 502, 504)


def retry_after(headers: Mapping[str, Any] | None) -> float | None:
    """Seconds from a `Retry-After` header (Slack sends whole seconds), whatever the header's case."""
    for name, value in (headers or {}).items():
        if name.lower() == "retry-after":
            raw = value[0] if isinstance(value, list) else value
            try:
                return max(float(raw), 0.0)
            except (TypeError, ValueError):
                return None
    return None


def _http_failure(status: int, error: str | None, headers: Mapping[str, Any] | None) -> SendResult:
    if error is not None and not ERROR_CODE.fullmatch(error):
        error = None  # not one of Slack's error codes (an HTML error page, slack_sdk's decode note)
    retryable = status == 429 or status >= 500 or (error in RETRYABLE_ERRORS)
    return SendResult(
        ok=False,
        http_status=status,
        error=(error or f"HTTP {status}")[:200],
        retry_after=retry_after(headers),
        retryable=retryable,
    )


def _network_failure(exc: BaseException) -> SendResult:
    reason = getattr(exc, "reason", None)  # URLError(reason) names the socket error, not the URL
    detail = (
        type(reason).__name__ + (f": {reason.strerror}" if getattr(reason, "strerror", None) else "")
        if reason is not None
        else type(exc).__name__
    )
    timed_out = isinstance(exc, TimeoutError) or isinstance(reason, TimeoutError)
    refused = isinstance(exc, ConnectionRefusedError) or isinstance(reason, ConnectionRefusedError)
    return SendResult(ok=False, error=f"network error ({detail})", retryable=True, timed_out=timed_out, refused=refused)


def _webhook_result(response: WebhookResponse) -> SendResult:
    """A webhook's (or a response_url's) answer: 200, or an HTTP error with a short string body."""
    if response.status_code == 200:
        return SendResult(ok=True, http_status=200)
    body = (response.body or "").strip()
    return _http_failure(response.status_code, body.splitlines()[0] if body else None, response.headers)


@dataclass(frozen=True)
class Lookup:
    """A search of a channel or thread for the message that carries one of our keys: `result` is
    how the last read ended; `ts` and `key` the message when found; `complete` False when the
    window held more messages than one search reads (then nobody can say it is absent)."""

    result: SendResult
    ts: str | None = None
    key: str | None = None
    complete: bool = True


class Sender(Protocol):
    mode: str

    def post(
        self, channel: str | None, payload: dict[str, Any], thread_ts: str | None = None, key: str | None = None
    ) -> SendResult: ...

    def update(self, channel: str, ts: str, payload: dict[str, Any]) -> SendResult: ...

    def find(
        self, channel: str, keys: Collection[str], oldest: float, latest: float, thread_ts: str | None = None
    ) -> Lookup: ...


class WebhookSender:
    """An incoming webhook: posts only, to the channel it was created for; cannot edit or thread."""

    mode = "webhook"

    def __init__(self, url: str, timeout: float) -> None:
        # slack_sdk annotates `timeout` as int, but only hands it to urllib, which takes float seconds.
        self.client = WebhookClient(url, timeout=timeout, retry_handlers=[], logger=SDK_LOG)  # type: ignore[arg-type]

    def post(
        self, channel: str | None, payload: dict[str, Any], thread_ts: str | None = None, key: str | None = None
    ) -> SendResult:
        try:
            response = self.client.send(
                text=payload["text"], blocks=payload["blocks"], unfurl_links=False, unfurl_media=False
            )
        except NETWORK_ERRORS as exc:
            return _network_failure(exc)
        return _webhook_result(response)

    def update(self, channel: str, ts: str, payload: dict[str, Any]) -> SendResult:
        raise NotImplementedError("an incoming webhook cannot edit a message")

    def find(
        self, channel: str, keys: Collection[str], oldest: float, latest: float, thread_ts: str | None = None
    ) -> Lookup:
        raise NotImplementedError("an incoming webhook cannot read the channel")


class BotSender:
    """The Web API with a bot token: chat.postMessage, chat.update and thread replies."""

    mode = "bot"

    def __init__(self, token: str, base_url: str, timeout: float) -> None:
        # slack_sdk annotates `timeout` as int, but only hands it to urllib, which takes float seconds.
        self.client = WebClient(
            token=token,
            base_url=base_url,
            timeout=timeout,  # type: ignore[arg-type]
            retry_handlers=[],
            logger=SDK_LOG,
        )

    def _call(self, method: str, **kwargs: Any) -> SendResult:
        return self._answer(method, **kwargs)[0]

    def _answer(self, method: str, **kwargs: Any) -> tuple[SendResult, dict[str, Any]]:
        try:
            response = getattr(self.client, method)(**kwargs)
        except SlackApiError as exc:
            data = exc.response.data if isinstance(exc.response.data, dict) else {}
            return _http_failure(exc.response.status_code, data.get("error"), exc.response.headers), {}
        except NETWORK_ERRORS as exc:
            return _network_failure(exc), {}
        data = response.data if isinstance(response.data, dict) else {}
        result = SendResult(
            ok=True, http_status=response.status_code, channel=response.get("channel"), ts=response.get("ts")
        )
        return result, data

    def post(
        self, channel: str | None, payload: dict[str, Any], thread_ts: str | None = None, key: str | None = None
    ) -> SendResult:
        return self._call(
            "chat_postMessage",
            channel=channel,
            text=payload["text"],
            blocks=payload["blocks"],
            thread_ts=thread_ts,
            unfurl_links=False,
            unfurl_media=False,
            metadata={"event_type": METADATA_EVENT, "event_payload": {"key": key}} if key else None,
        )

    def find(
        self, channel: str, keys: Collection[str], oldest: float, latest: float, thread_ts: str | None = None
    ) -> Lookup:
        """The message carrying one of `keys` posted between `oldest` and `latest` (Unix seconds): in the
        channel's history, or in the thread of `thread_ts`. Reads at most FIND_PAGES pages."""
        method, where = ("conversations_replies", {"ts": thread_ts}) if thread_ts else ("conversations_history", {})
        cursor: str | None = None
        result = SendResult(ok=False)
        for _ in range(FIND_PAGES):
            result, data = self._answer(
                method,
                channel=channel,
                oldest=f"{oldest:.6f}",
                latest=f"{latest:.6f}",
                inclusive=True,
                include_all_metadata=True,
                limit=FIND_PAGE_SIZE,
                cursor=cursor,
                **where,
            )
            if not result.ok:
                return Lookup(result)
            for message in data.get("messages") or []:
                metadata = message.get("metadata") or {}
                key = (metadata.get("event_payload") or {}).get("key")
                if (
                    metadata.get("event_type") == METADATA_EVENT
                    and isinstance(key, str)
                    and key in keys
                    and message.get("ts")
                ):
                    return Lookup(result, ts=message["ts"], key=key)
            cursor = (data.get("response_metadata") or {}).get("next_cursor") or None
            if not data.get("has_more") or cursor is None:
                return Lookup(result)
        return Lookup(result, complete=False)

    def update(self, channel: str, ts: str, payload: dict[str, Any]) -> SendResult:
        return self._call("chat_update", channel=channel, ts=ts, text=payload["text"], blocks=payload["blocks"])


def respond(response_url: str, text: str, timeout: float) -> SendResult:
    """An ephemeral answer, seen only by who clicked, posted to the click's `response_url`
    (https://docs.slack.dev/interactivity/handling-user-interaction#message_responses): JSON with
    `response_type: ephemeral` and `replace_original: false`, so the incident's message stays."""
    # slack_sdk annotates `timeout` as int, but only hands it to urllib, which takes float seconds.
    client = WebhookClient(response_url, timeout=timeout, retry_handlers=[], logger=SDK_LOG)  # type: ignore[arg-type]
    try:
        response = client.send(text=text, response_type="ephemeral", replace_original=False)
    except NETWORK_ERRORS as exc:
        return _network_failure(exc)
    return _webhook_result(response)


def make_sender(settings: Settings) -> Sender | None:
    """The configured sender, or None when Slack is off."""
    if settings.slack_bot_token:
        return BotSender(
            settings.slack_bot_token.get_secret_value(), settings.slack_api_url, settings.slack_timeout_seconds
        )
    if settings.slack_webhook_url:
        return WebhookSender(settings.slack_webhook_url.get_secret_value(), settings.slack_timeout_seconds)
    return None
