"""A failed request named for what happened (issue 35): a hung server is a timeout, not "refused";
nothing listening is refused; a plain-HTTP server asked over HTTPS is a TLS failure. Each made
for real on loopback through the client the service uses (PrometheusSource: requests with
urllib3's retries, which wrap a read timeout into a ConnectionError); a name that does not resolve
is built as requests raises it, since tests resolve no names."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import requests
import urllib3

from rca.collect.health import failure_kind, short_error
from rca.collect.prometheus import PrometheusSource, error_reason
from tests.fakes.html import HtmlServer


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A server that accepts connections and never answers (a hung Prometheus)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


def failure(url: str, timeout: float = 5) -> BaseException:
    with pytest.raises((requests.RequestException, urllib3.exceptions.HTTPError)) as caught:
        PrometheusSource(url, timeout=timeout, concurrency=1)._instant("1", datetime.now(UTC))
    return caught.value


def test_a_hung_prometheus_is_a_timeout_not_a_refusal(silent_port: int) -> None:
    exc = failure(f"http://127.0.0.1:{silent_port}", timeout=0.5)
    assert isinstance(exc, requests.ConnectionError)  # how requests hands over a read timeout retried out
    assert failure_kind(exc) == "timeout" and error_reason(exc) == "timeout"
    assert short_error(exc) == "timed out (no answer in time)"


def test_nothing_listening_is_refused() -> None:
    exc = failure("http://127.0.0.1:1")
    assert failure_kind(exc) == "refused" and short_error(exc) == "connection refused (nothing listening)"


def test_https_to_a_plain_http_server_is_a_tls_failure() -> None:
    with HtmlServer() as server:
        exc = failure(server.url.replace("http://", "https://"))
    assert failure_kind(exc) == "tls" and short_error(exc) == "TLS handshake failed"


def test_a_name_that_does_not_resolve_is_dns() -> None:
    pool = urllib3.HTTPConnectionPool("prometheus.invalid", 9090)
    resolved = urllib3.exceptions.NameResolutionError("prometheus.invalid", None, socket.gaierror(-2, "not known"))
    exc = requests.ConnectionError(urllib3.exceptions.MaxRetryError(pool, "/api/v1/query", reason=resolved))
    assert failure_kind(exc) == "dns" and short_error(exc) == "host name not found"


def test_an_answer_is_no_transport_failure() -> None:
    assert failure_kind(requests.HTTPError("500")) is None
    assert failure_kind(ValueError("x")) is None
