"""A server that answers HTML where a service's JSON API was expected: what RCA_PROMETHEUS_URL or
RCA_LLM_BASE_URL reach through a reverse proxy whose backend is down, or when they name a web UI."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.helpers.loopback import LoopbackServer

PROXY_PAGE = (
    "<!DOCTYPE html>\n<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n"
    "<center><h1>502 Bad Gateway</h1></center>\n<hr><center>nginx/1.24.0</center>\n"
    + "<!-- a padding to disable MSIE and Chrome friendly error page -->\n" * 6
    + "</body>\n</html>\n"
)


class HtmlServer(LoopbackServer):
    """What a service's URL may point at by mistake, or reach through a broken proxy: a server that
    answers every request with an HTML page (`status`: a reverse proxy's 502 in front of a dead
    backend; 200: a login page)."""

    def __init__(self, status: int = 502, page: str = PROXY_PAGE) -> None:
        self.status = status
        self.page = page
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                server.requests += 1
                self.rfile.read(int(self.headers.get("content-length") or 0))
                body = server.page.encode()
                self.send_response(server.status)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler, name="html-server")
        self.url = self.base
