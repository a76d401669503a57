"""A fault-injecting HTTP proxy on loopback, in front of one of the protocol-faithful fakes
(tests/fakes: Prometheus, Jaeger, Tempo, the LLM). Healthy, it relays every request to the fake and
its answer back; a test switches it to a fault at any time:

  down         the port is closed: every connection is refused, as for a stopped server
  slow         each answer waits `slow_seconds` (longer than the service's client timeout)
  garbage      200 with a body that is not JSON, under a JSON content type
  html         502 with an HTML error page, as a reverse proxy in front of a dead backend sends
  wrong_shape  200 with JSON that is not the protocol's answer (`wrong_shape` of each dependency)
  nul          the fake's real answer with NUL characters put into its text (`poison` of each
               dependency: label values, operation names, what the model wrote)

The port stays the same across `down` and back, so the service under test keeps its URL."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import urlsplit

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
HTML_502 = (
    b"<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center></body></html>"
)
SPAN_NAMES = ("operationName", "name", "rootTraceName")
GARBAGE = b'{"status": "success", "data": \x00\xff not json at all'


class Fault(StrEnum):
    HEALTHY = "healthy"
    DOWN = "down"
    SLOW = "slow"
    GARBAGE = "garbage"
    HTML = "html"
    WRONG_SHAPE = "wrong_shape"
    NUL = "nul"


class QuietServer(ThreadingHTTPServer):
    """A threading server with a listen backlog for a client's concurrent queries (the default 5
    drops connections under eight at once, which a 1 s client timeout reads as an outage)."""

    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gave up on a slow answer is expected here


def deepen_backlog(fake: Any) -> Any:
    """A fake (a LoopbackServer) with a listen backlog for the eight queries the proxy relays at
    once: the default 5 drops connections, which a 1 s client timeout reads as the dependency
    timing out. Listening again on a listening socket only changes its backlog."""
    fake.server.socket.listen(QuietServer.request_queue_size)
    return fake


def relay(
    upstream: tuple[str, int], method: str, path: str, headers: dict[str, str], body: bytes
) -> tuple[int, dict[str, str], bytes]:
    """One request to the server at `upstream`, answered with its status, headers and body."""
    conn = http.client.HTTPConnection(*upstream, timeout=30)
    try:
        conn.request(method, path, body=body or None, headers=headers)
        response = conn.getresponse()
        kept = {k: v for k, v in response.getheaders() if k.lower() not in HOP_HEADERS}
        return response.status, kept, response.read()
    finally:
        conn.close()


class FaultProxy:
    """Relays to `upstream` (a fake's base URL) unless `fault` says otherwise.

    `wrong_shape`: the JSON document answered in that mode. `poison`: turns the fake's decoded
    JSON answer into one with NUL characters in it, for the `nul` mode. `requests` counts what
    arrived, whatever the mode (a test can tell the dependency was asked)."""

    def __init__(
        self,
        upstream: str,
        name: str,
        wrong_shape: Any,
        poison: Callable[[str, Any], Any],
        slow_seconds: float = 3.0,
    ) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.name, self.wrong_shape, self.poison = name, wrong_shape, poison
        self.slow_seconds = slow_seconds
        self.fault = Fault.HEALTHY
        self.requests = 0
        self._lock = threading.Lock()
        self._server: QuietServer | None = None
        self._thread: threading.Thread | None = None
        self.port = self._listen(0)
        self.url = f"http://127.0.0.1:{self.port}"

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def set(self, fault: Fault) -> None:
        """Switch to `fault`; `down` closes the port, any other mode (re)opens it."""
        if fault == Fault.DOWN:
            self._close()
        elif self._server is None:
            self._listen(self.port)
        self.fault = fault

    def _listen(self, port: int) -> int:
        server = QuietServer(("127.0.0.1", port), self._handler())
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"fault-{self.name}", daemon=True
        )
        self._thread.start()
        return server.server_address[1]

    def _close(self) -> None:
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is not None and thread is not None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

    # ------------------------------------------------------------------ answering

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.requests += 1
        fault = self.fault
        json_type = {"Content-Type": "application/json"}
        if fault == Fault.GARBAGE:
            return 200, json_type, GARBAGE
        if fault == Fault.HTML:
            return 502, {"Content-Type": "text/html"}, HTML_502
        if fault == Fault.WRONG_SHAPE:
            return 200, json_type, json.dumps(self.wrong_shape).encode()
        if fault == Fault.SLOW:
            time.sleep(self.slow_seconds)
        status, kept, data = relay(self.upstream, method, path, headers, body)
        if fault == Fault.NUL and status == 200:
            data = json.dumps(self.poison(path, json.loads(data))).encode()
        return status, kept, data

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                status, kept, data = proxy.answer(self.command, self.path, headers, body)
                try:
                    self.send_response(status)
                    for name, value in kept.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client's timeout came first

            do_GET = do_POST = _any  # noqa: N815 (http.server's naming)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def with_nul(text: str) -> str:
    """`text` with a NUL character in the middle and at the end."""
    middle = len(text) // 2
    return f"{text[:middle]}\x00{text[middle:]}\x00"


def prometheus_poison(_path: str, answer: Any) -> Any:
    """Every label value of every series (and every label name) with NUL characters in it."""
    for item in answer.get("data", {}).get("result", []):
        if isinstance(item, dict) and isinstance(item.get("metric"), dict):
            item["metric"] = {with_nul(k): with_nul(str(v)) for k, v in item["metric"].items()} or {"job": "v\x00"}
    return answer


def traces_poison(_path: str, answer: Any) -> Any:
    """Every span's name (Jaeger's `operationName`, OTLP's `name`) and every root span's name in a
    Tempo search with NUL characters in it; services keep theirs, so the alert's service is found."""

    def poison(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: with_nul(v) if k in SPAN_NAMES and isinstance(v, str) else poison(v) for k, v in value.items()}
        if isinstance(value, list):
            return [poison(v) for v in value]
        return value

    return poison(answer)


def llm_poison(_path: str, answer: Any) -> Any:
    """What the model wrote, with NUL characters inside its JSON strings (as `\\u0000` once the
    server encodes it): the answer stays valid, the text does not fit a PostgreSQL column."""
    for choice in answer.get("choices", []):
        content = choice.get("message", {}).get("content")
        if isinstance(content, str):
            choice["message"]["content"] = content.replace('": "', '": "\x00')
    return answer
