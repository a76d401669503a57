"""A stub Prometheus on loopback for tests that need a collection to succeed, not particular data."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.helpers.loopback import LoopbackServer


class StubPrometheus(LoopbackServer):
    """A loopback HTTP server speaking enough of Prometheus' query API for a collection: every
    probe finds series and every range query returns one flat series."""

    VALUE = "0.5"

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.delay = 0.0  # seconds before each answer: a slow Prometheus makes a long investigation
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("content-length") or 0)
                params = parse_qs(parts.query) | parse_qs(self.rfile.read(length).decode())
                query = params.get("query", [""])[0]
                stub.queries.append(query)
                time.sleep(stub.delay)
                now = time.time()
                if parts.path.endswith("/query_range"):
                    start, end = float(params["start"][0]), float(params["end"][0])
                    step = float(params["step"][0].rstrip("s"))
                    count = int((end - start) // step) + 1
                    values = [[start + i * step, stub.VALUE] for i in range(count)]
                    data = {
                        "resultType": "matrix",
                        "result": [{"metric": {"instance": "gpu-node-1:8000"}, "values": values}],
                    }
                elif parts.path.endswith("/query"):
                    data = {"resultType": "vector", "result": [{"metric": {}, "value": [now, "1"]}]}
                else:
                    self.send_error(404)
                    return
                body = json.dumps({"status": "success", "data": data}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler, name="stub-prometheus")
        self.url = self.base
