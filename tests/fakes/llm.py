"""A fake OpenAI-compatible endpoint (a hosted LLM is an external boundary) and findings to feed it.

`FakeLLM` is a real HTTP server on a free 127.0.0.1 port answering `POST /v1/chat/completions`
with the documented shapes:
  - success: the chat completion object (OpenAI API reference, "The chat completion object":
    id, object "chat.completion", created, model, choices[index, message{role, content, refusal},
    logprobs, finish_reason], usage{prompt_tokens, completion_tokens, total_tokens});
  - errors: `{"error": {"message", "type", "param", "code"}}` (OpenAI API reference, "Error codes";
    llama-cpp-python wraps its own errors the same way in llama_cpp/server/errors.py,
    `ErrorResponseFormatters.error_message_wrapper`, status 500), 429 with a Retry-After header.
Each test scripts the replies with a function of the parsed request.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

from rca.collect.target import Target
from rca.diagnosis.ranking import rank
from rca.domain.evidence import Finding
from tests.helpers import factories
from tests.helpers.loopback import LoopbackServer

# What llama-cpp-python 0.3.x answers to response_format json_schema (reference/local_llm.md).
LLAMA_CPP_JSON_SCHEMA_ERROR = (
    "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n  Input should be 'text' or "
    "'json_object' [type=literal_error, input_value='json_schema', input_type=str]"
)
# What OpenAI answers a model without structured outputs (400 invalid_request_error).
OPENAI_JSON_SCHEMA_ERROR = (
    "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."
)


@dataclass
class Answer:
    """One scripted reply."""

    status: int = 200
    content: str | None = None
    finish_reason: str = "stop"
    error: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    completion_tokens: int | None = None


def error(status: int, message: str, type_: str, code: str | None = None, **headers: str) -> Answer:
    return Answer(
        status=status, error={"message": message, "type": type_, "param": None, "code": code}, headers=headers
    )


def completion(content: str, **kw: Any) -> Answer:
    return Answer(content=content, **kw)


class FakeLLM(LoopbackServer):
    """The fake endpoint; `requests` holds every parsed request body, `headers` their headers (lower-cased)."""

    def __init__(self, reply: Callable[[dict[str, Any]], Answer]) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                fake.requests.append(body)
                fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path != "/v1/chat/completions":
                    self._send(
                        404,
                        {
                            "error": {
                                "message": f"unknown path {self.path}",
                                "type": "invalid_request_error",
                                "param": None,
                                "code": None,
                            }
                        },
                        {},
                    )
                    return
                answer = fake.reply(body)
                if answer.delay:
                    time.sleep(answer.delay)
                if answer.error is not None:
                    self._send(answer.status, {"error": answer.error}, answer.headers)
                    return
                prompt_tokens = sum(len(m["content"]) for m in body["messages"]) // 4
                completion_tokens = answer.completion_tokens
                if completion_tokens is None:
                    completion_tokens = len(answer.content or "") // 4
                self._send(
                    answer.status,
                    {
                        "id": f"chatcmpl-{len(fake.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body["model"],
                        "system_fingerprint": "fp_fake",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": answer.content, "refusal": None},
                                "logprobs": None,
                                "finish_reason": answer.finish_reason,
                            }
                        ],
                        "usage": {
                            "prompt_tokens": prompt_tokens,
                            "completion_tokens": completion_tokens,
                            "total_tokens": prompt_tokens + completion_tokens,
                        },
                    },
                    answer.headers,
                )

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler, name="fake-llm")
        self.base_url = f"{self.base}/v1"

    def user_prompt(self, index: int = 0) -> str:
        return next(m["content"] for m in self.requests[index]["messages"] if m["role"] == "user")


# --------------------------------------------------------------------------- evidence


def finding(
    key: str,
    status: str,
    value: float | None = None,
    baseline: float | None = None,
    threshold: float | None = None,
    comparison: str = ">",
    unit: str = "count",
    onset_minutes_ago: float | None = None,
) -> Finding:
    onset = datetime.now(UTC) - timedelta(minutes=onset_minutes_ago) if onset_minutes_ago else None
    detail = f"{key} is {value}" if status in ("breached", "ok") else "data unavailable: no samples"
    return factories.finding(
        key,
        status=status,
        value=value,
        baseline=baseline,
        threshold=threshold,
        comparison=comparison,
        unit=unit,
        onset=onset,
        query=f"vector({value})",
        source="test",
        detail=detail,
    )


def surge_findings() -> list[Finding]:
    """An arrival surge: queue and request rate up; prompts normal; one exporter missing."""
    return [
        finding("queue_median", "breached", 14.0, 1.0, 4.7, onset_minutes_ago=25),
        finding("request_rate", "breached", 18.0, 8.0, 10.4, onset_minutes_ago=26),
        finding("kv_cache_usage", "breached", 0.8, 0.55, 0.75, unit="ratio", onset_minutes_ago=24),
        finding("ttft_p95", "breached", 0.6, 0.12, 0.3, unit="s", onset_minutes_ago=24),
        finding("prompt_tokens_p95", "ok", 600.0, 600.0, 900.0),
        finding("prefix_cache_hit_rate", "ok", 0.78, 0.78, 0.61, comparison="<", unit="ratio"),
        finding("sm_clock", "ok", 1980.0, 1980.0, 1500.0, comparison="<"),
        finding("gpu_temperature", "ok", 62.0, 62.0, 85.0),
        finding("xid_errors", "ok", 0.0, 0.0, 0.0),
        finding("gpu_throttle_reasons", "ok", 0.0, 0.0, 0.0),
        finding("cpu_bound_ratio", "unavailable"),
        finding("numa_miss_rate", "unavailable"),
    ]


def surge_target() -> Target:
    return Target(
        host="gpu-node-1",
        labels={"instance": "gpu-node-1:8000", "model_name": "llama-3-8b"},
        alert_start=datetime.now(UTC) - timedelta(minutes=20),
        alertnames=["LLMRequestQueueMedianHigh"],
        hosts=["gpu-node-1"],
        instance="gpu-node-1:8000",
    )


def surge_rules() -> list[Any]:
    return rank(surge_findings())


def answer_json(*hypotheses: dict[str, Any]) -> str:
    return json.dumps({"hypotheses": list(hypotheses)})


def hypothesis(category: str, evidence: list[str], rank_: int = 1, confidence: float = 0.7) -> dict[str, Any]:
    return {
        "rank": rank_,
        "category": category,
        "title": f"{category} title",
        "confidence": confidence,
        "evidence": evidence,
        "explanation": "Because the queue grew with the request rate.",
        "next_steps": ["Check the request rate per tenant."],
    }


SURGE_ANSWER = answer_json(
    hypothesis("arrival_surge", ["queue_median", "request_rate"]),
    hypothesis("kv_memory_pressure", ["kv_cache_usage"], rank_=2, confidence=0.2),
)
