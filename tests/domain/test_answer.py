"""A server's answer in one short line (`rca.domain.answer`), on the answers servers really give:
a real Prometheus' API error, a reverse proxy's HTML page, a login page, plain text."""

from __future__ import annotations

import json

import httpx
import pytest

from rca.domain.answer import ANSWER_CHARS, answer_line
from tests.fakes.html import HtmlServer


def test_a_real_prometheus_error_is_its_type_and_sentence(empty_prometheus: str) -> None:
    reply = httpx.post(f"{empty_prometheus}/api/v1/query", data={"query": "sum(rate(vllm:x[5m]"}, timeout=10)
    assert reply.status_code == 400
    said = json.loads(reply.content)
    assert said["status"] == "error"
    line = answer_line(reply.content)
    assert line == f"{said['errorType']}: {said['error']}"
    assert line.startswith("bad_data: ") and "parse error" in line and "\n" not in line


def test_a_real_prometheus_404_is_its_own_words(empty_prometheus: str) -> None:
    reply = httpx.get(f"{empty_prometheus}/api/v1/no_such_api", timeout=10)
    assert reply.status_code == 404
    assert answer_line(reply.content) == " ".join(reply.text.split())  # "404 page not found", as it said


def test_a_proxys_html_error_page_is_its_title() -> None:
    with HtmlServer(502) as proxy:
        reply = httpx.get(proxy.url, timeout=10)
    assert reply.status_code == 502 and reply.text.count("\n") > 5
    assert answer_line(reply.content) == "an HTML page: 502 Bad Gateway"


def test_an_html_page_without_a_title_is_its_visible_text() -> None:
    page = (
        "<html><head><style>body { color: red }</style><script>var x = '<b>';</script></head>"
        "<body><h2>Sign in</h2>\n<p>to see &amp; query</p></body></html>"
    )
    with HtmlServer(200, page) as login:
        reply = httpx.get(login.url, timeout=10)
    assert answer_line(reply.content) == "an HTML page: Sign in to see & query"


@pytest.mark.parametrize(
    ("body", "line"),
    [
        ('{"error": {"message": "The engine is overloaded", "type": "server_error"}}', "The engine is overloaded"),
        ('{"detail": "Not authenticated"}', "Not authenticated"),
        (
            '{"status": "success", "data": {"resultType": "vector"}}',
            '{"status":"success","data":{"resultType":"vector"}}',
        ),
        (
            "upstream connect error\nor disconnect/reset before headers\n",
            "upstream connect error or disconnect/reset before headers",
        ),
        (b"bad \x00gateway\r\n\tfrom here", "bad gateway from here"),
        ("   ", "an empty answer"),
        (None, "an empty answer"),
        ("{not json", "{not json"),
    ],
)
def test_other_answers_are_said_on_one_line(body: str | bytes | None, line: str) -> None:
    assert answer_line(body) == line


def test_a_long_answer_is_cut_with_an_ellipsis() -> None:
    line = answer_line("word " * 200)
    assert len(line) == ANSWER_CHARS and line.endswith("…") and line.startswith("word word")
    assert len(answer_line("x" * 50, limit=20)) == 20
