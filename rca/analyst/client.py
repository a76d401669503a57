"""Chat completions against any OpenAI-compatible endpoint (OpenAI, Azure OpenAI's /openai/v1,
vLLM, Ollama, llama.cpp), with structured output negotiated per endpoint and a hard deadline.

Structured output, best first:
  1. `json_schema`: the standard OpenAI response format (OpenAI, Azure, vLLM, Ollama);
  2. `json_object` with a `schema` key: llama-cpp-python's server turns it into a grammar, and
     rejects `json_schema` (500, "Input should be 'text' or 'json_object'");
  3. `prompt`: no response format; the schema is written into the prompt and the JSON is
     extracted from the reply.
A mode counts as rejected when the server answers 400/422/500 naming the response format or
schema; the next mode is tried at once. What worked is remembered per (base URL, model) in this
process's memory: re-learning costs one fast rejected request per process start, needs no table or
Redis (so it works in the embedded mode too), and a restarted worker re-probes an endpoint that
may have been upgraded meanwhile.

Bounds: every request of one investigation shares one deadline (`RCA_LLM_TIMEOUT_SECONDS`), and
429, 5xx, timeouts and connection errors are retried at most `RCA_LLM_MAX_RETRIES` times, after the
server's Retry-After or the service's backoff with jitter (rca.domain.retry). The
openai library's own retries are off because they may sleep up to two minutes on a Retry-After
header; here a Retry-After longer than the time left ends the attempt instead.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypedDict

import openai
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionUserMessageParam,
)

from rca import metrics
from rca.domain.answer import answer_line
from rca.domain.retry import Backoff
from rca.domain.text import storable

MODES = ("json_schema", "json_object", "prompt")
SCHEMA_NAME = "rca_hypotheses"
RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}
FORMAT_WORDS = ("response_format", "json_schema", "schema")
BACKOFF = Backoff(base=0.5, cap=60.0)  # 0.5 s, 1 s, 2 s ... before jitter (rca.domain.retry)
BODY_KEPT = 20_000  # characters of a raw response kept for audit

_negotiated: dict[tuple[str, str], str] = {}
_negotiated_lock = threading.Lock()


def remembered_mode(base_url: str, model: str) -> str | None:
    with _negotiated_lock:
        return _negotiated.get((base_url, model))


def remember_mode(base_url: str, model: str, mode: str) -> None:
    with _negotiated_lock:
        _negotiated[(base_url, model)] = mode


def forget_modes() -> None:
    """Forget every negotiated mode (tests start each endpoint from scratch)."""
    with _negotiated_lock:
        _negotiated.clear()


class ChatMessage(TypedDict):
    """One message of the conversation: the investigation only ever sends plain text."""

    role: Literal["system", "user", "assistant"]
    content: str


def _wire_message(message: ChatMessage) -> ChatCompletionMessageParam:
    """The message as the openai library's type for its role (the same JSON object)."""
    if message["role"] == "system":
        return ChatCompletionSystemMessageParam(role="system", content=message["content"])
    if message["role"] == "assistant":
        return ChatCompletionAssistantMessageParam(role="assistant", content=message["content"])
    return ChatCompletionUserMessageParam(role="user", content=message["content"])


class LLMUnavailable(Exception):
    """The endpoint gave no usable reply in time; the message says why, for the investigation."""


@dataclass
class Call:
    """One HTTP exchange, kept verbatim for audit: the exact prompt and the raw response."""

    mode: str
    messages: list[ChatMessage]
    response_format: dict[str, Any] | None
    status: int | None = None
    raw_response: str | None = None
    error: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Reply:
    text: str
    finish_reason: str | None
    completion_tokens: int


def response_format(mode: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": False}}
    if mode == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


def _rejects_format(exc: openai.APIStatusError) -> bool:
    body = (exc.response.text or "").lower() if exc.response is not None else ""
    return exc.status_code in (400, 422, 500) and any(word in body for word in FORMAT_WORDS)


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class ChatClient:
    """One investigation's conversation with the endpoint; `calls` is its audit trail."""

    def __init__(
        self, base_url: str, model: str, api_key: str | None, timeout_seconds: float, max_retries: int, max_tokens: int
    ) -> None:
        self.base_url, self.model = base_url, model
        self.max_retries, self.max_tokens = max_retries, max_tokens
        self.deadline = time.monotonic() + timeout_seconds
        # Local servers need no key, but the library insists on one.
        self._openai = openai.OpenAI(
            base_url=base_url, api_key=api_key or "unused", max_retries=0, timeout=timeout_seconds
        )
        self.calls: list[Call] = []
        self.mode = remembered_mode(base_url, model) or MODES[0]

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def complete(
        self, messages: list[ChatMessage], schema: dict[str, Any], messages_for_prompt_mode: list[ChatMessage]
    ) -> Reply:
        """One reply, negotiating the structured-output mode; raises `LLMUnavailable`.

        `messages_for_prompt_mode` is the same conversation with the schema written into the
        prompt, used once the endpoint has refused both response formats.
        """
        retries = 0
        while True:
            mode = self.mode
            sent = messages_for_prompt_mode if mode == "prompt" else messages
            fmt = response_format(mode, schema)
            call = Call(mode=mode, messages=sent, response_format=fmt)
            self.calls.append(call)
            left = self.time_left()
            if left <= 0:
                call.error = "deadline reached before the request"
                raise LLMUnavailable(f"no reply within RCA_LLM_TIMEOUT_SECONDS ({len(self.calls) - 1} requests)")
            try:
                return self._send(call, left)
            except openai.APIStatusError as exc:
                call.status, call.raw_response = exc.status_code, exc.response.text[:BODY_KEPT]
                call.error = f"HTTP {exc.status_code}: {answer_line(exc.response.text)}"
                if mode != MODES[-1] and _rejects_format(exc):
                    metrics.LLM_REQUESTS.labels(outcome="format_rejected").inc()
                    self.mode = MODES[MODES.index(mode) + 1]
                    remember_mode(self.base_url, self.model, self.mode)
                    continue
                metrics.LLM_REQUESTS.labels(outcome="http_status").inc()
                if exc.status_code not in RETRYABLE_STATUS:
                    raise LLMUnavailable(call.error) from None
                wait = _retry_after(exc)
            except (openai.APITimeoutError, openai.APIConnectionError) as exc:
                timed_out = isinstance(exc, openai.APITimeoutError)  # a subclass of APIConnectionError
                metrics.LLM_REQUESTS.labels(outcome="timeout" if timed_out else "connection").inc()
                call.error = f"{type(exc).__name__}: {exc}"
                wait = None
            if retries >= self.max_retries:
                raise LLMUnavailable(f"{call.error} (after {retries} retries)")
            wait = BACKOFF.delay(retries) if wait is None else wait
            if wait >= self.time_left():
                raise LLMUnavailable(f"{call.error}; waiting {wait:g} s to retry would pass RCA_LLM_TIMEOUT_SECONDS")
            time.sleep(wait)
            retries += 1

    def _send(self, call: Call, timeout: float) -> Reply:
        started = time.perf_counter()
        # The response format goes into the body as built: the json_object variant carries a schema
        # (read by llama.cpp-style servers), which the library's ResponseFormat types do not describe.
        extra_body = {"response_format": call.response_format} if call.response_format else None
        try:
            raw = self._openai.with_options(timeout=timeout).chat.completions.with_raw_response.create(
                model=self.model,
                messages=[_wire_message(m) for m in call.messages],
                temperature=0,
                max_tokens=self.max_tokens,
                extra_body=extra_body,
            )
        finally:
            call.latency_seconds = round(time.perf_counter() - started, 4)
        call.status, call.raw_response = raw.status_code, raw.http_response.text[:BODY_KEPT]
        try:
            completion = raw.parse()
            choice = completion.choices[0]
            # What the model wrote may hold text no store or request can carry (NUL, a lone
            # surrogate from a `\ud800` escape): cleaned here, before validation or a repair turn.
            text = storable(choice.message.content or "")
        except Exception as exc:  # the body is not a chat completion: the library raises many types
            metrics.LLM_REQUESTS.labels(outcome="bad_response").inc()
            call.error = f"not a chat completion: {type(exc).__name__}: {exc}"[:2000]
            raise LLMUnavailable(call.error) from None
        call.finish_reason = choice.finish_reason
        if completion.usage is not None:
            call.prompt_tokens = completion.usage.prompt_tokens or 0
            call.completion_tokens = completion.usage.completion_tokens or 0
        remember_mode(self.base_url, self.model, call.mode)
        metrics.LLM_REQUESTS.labels(outcome="ok").inc()
        return Reply(text=text, finish_reason=choice.finish_reason, completion_tokens=call.completion_tokens)
