"""One lifecycle for every fake or stub HTTP server the tests run: a ThreadingHTTPServer on a
free 127.0.0.1 port, served from a daemon thread inside `with`, shut down and joined after."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LoopbackServer:
    def __init__(
        self,
        handler: type[BaseHTTPRequestHandler],
        name: str,
        server_class: type[ThreadingHTTPServer] = ThreadingHTTPServer,
        poll_interval: float = 0.5,
    ) -> None:
        self.server = server_class(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": poll_interval}, name=name, daemon=True
        )

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
