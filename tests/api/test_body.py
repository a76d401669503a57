"""Request bodies (rca/api/body.py): one that arrives too slowly is answered 408 and its connection
closed, whatever length or chunk size it declared, so no client can hold a connection and its
handler forever; one over the limit is answered 413 as soon as that is known. Through a real
uvicorn and a raw socket, since an HTTP client library sends its body at once."""

from __future__ import annotations

import json
import logging
import socket
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rca import metrics
from rca.api.app import create_app
from rca.api.body import declared_length
from tests.helpers.databases import count_rows
from tests.helpers.service import WEBHOOK_TOKEN, LiveServer, RecordingDispatcher, make_settings

TIMEOUT = 1.0


def request_head(port: int, framing: str) -> bytes:
    return (
        f"POST /api/v1/alertmanager HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {WEBHOOK_TOKEN}\r\nContent-Type: application/json\r\n{framing}\r\n"
    ).encode()


def answer_of(sock: socket.socket, within: float) -> tuple[bytes, float, bool]:
    """What the server sent before it closed the connection, how long that took, and whether it closed."""
    sock.settimeout(within)
    started = time.monotonic()
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        return received, time.monotonic() - started, False
    return received, time.monotonic() - started, True


@pytest.mark.parametrize(
    ("framing", "start"),
    [
        ("Content-Length: 1000\r\n", b'{"version": "4", '),
        # a chunk size that declares far more than it ever sends
        ("Transfer-Encoding: chunked\r\n", b'7fffffff\r\n{"version": "4", '),
    ],
    ids=["content-length", "huge-chunk-size"],
)
def test_a_body_that_never_finishes_is_answered_408_and_the_connection_closed(
    pg_db: str, tmp_path: Path, framing: str, start: bytes
) -> None:
    recorder = RecordingDispatcher()
    settings = make_settings(pg_db, tmp_path, request_body_timeout_seconds=TIMEOUT)
    with (
        LiveServer(create_app(settings, dispatcher=recorder)) as server,
        socket.create_connection(("127.0.0.1", server.port)) as sock,
    ):
        sock.sendall(request_head(server.port, framing) + start)
        time.sleep(0.3)
        sock.sendall(b'"status"')  # still trickling: the deadline is for the whole body
        received, waited, closed = answer_of(sock, within=TIMEOUT + 5)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), received
    assert b"connection: close" in head.lower()
    assert "RCA_REQUEST_BODY_TIMEOUT_SECONDS" in json.loads(body)["detail"]
    assert closed and waited < TIMEOUT + 2
    assert count_rows(pg_db)["notifications"] == 0 and recorder.enqueued == []


def test_a_chunked_body_over_the_limit_is_answered_413_before_the_rest_arrives(pg_db: str, tmp_path: Path) -> None:
    settings = make_settings(pg_db, tmp_path, webhook_max_body_bytes=2048, request_body_timeout_seconds=30)
    with (
        LiveServer(create_app(settings, dispatcher=RecordingDispatcher())) as server,
        socket.create_connection(("127.0.0.1", server.port)) as sock,
    ):
        sock.sendall(request_head(server.port, "Transfer-Encoding: chunked\r\n") + b"7fffffff\r\n" + b" " * 4096)
        received, waited, closed = answer_of(sock, within=10)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), received
    assert "exceeds the limit of 2048 bytes" in json.loads(body)["detail"]
    assert closed and waited < 5  # not the 30 s timeout: the size alone decided


@pytest.mark.parametrize("declared", [b"9" * 5000, b"9" * 19], ids=["5000-digits", "19-digits"])
def test_a_content_length_python_cannot_convert_is_413_not_a_server_error(
    pg_db: str, tmp_path: Path, declared: bytes
) -> None:
    """Found by the fuzzer (tests/api/test_fuzz.py), through the ASGI interface (uvicorn's parser
    refuses such a header itself, other servers may not): int() refuses 5,000 digits."""
    settings = make_settings(pg_db, tmp_path)
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher()), raise_server_exceptions=False) as client:
        headers = [(b"authorization", f"Bearer {WEBHOOK_TOKEN}".encode()), (b"content-length", declared)]
        reply = client.post("/api/v1/alertmanager", content=b"{}", headers=headers)
    assert reply.status_code == 413, reply.text
    assert "exceeds the limit of 1048576 bytes" in reply.json()["detail"]
    assert count_rows(pg_db)["notifications"] == 0


def test_only_ascii_digits_are_a_content_length() -> None:
    """str.isdigit() takes "²" and "٣", and int() refuses the first: neither is a length."""
    assert declared_length("²") == (None, False) and declared_length("٣") == (None, False)
    assert declared_length("0042") == (42, False) and declared_length("-1") == (None, False)


def server_errors_counted() -> float:
    """The webhook's 500s in rca_webhook_requests_total."""
    return sum(
        sample.value
        for family in metrics.WEBHOOK_REQUESTS.collect()
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels.get("code") == "500"
    )


def test_a_client_that_hangs_up_mid_body_is_no_server_error(
    pg_db: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by the fuzzer (tests/api/test_fuzz.py): a client that declared more than it sent and
    closed its side left Starlette's ClientDisconnect unhandled: the webhook counted a 500 and uvicorn
    logged "Exception in ASGI application" with a traceback for a request nobody could be answered."""
    server = LiveServer(create_app(make_settings(pg_db, tmp_path), dispatcher=RecordingDispatcher()))
    errors = logging.getLogger("uvicorn.error")  # after uvicorn's Config has set up its logging
    errors.addHandler(caplog.handler)
    before = server_errors_counted()
    try:
        with server:
            for path in ("/api/v1/alertmanager", "/api/v1/incidents/1/feedback"):
                with socket.create_connection(("127.0.0.1", server.port)) as sock:
                    head = request_head(server.port, "Content-Length: 1000\r\n")
                    sock.sendall(head.replace(b"/api/v1/alertmanager", path.encode()) + b'{"version": "4", ')
                    sock.shutdown(socket.SHUT_WR)
                    answer_of(sock, within=5)
            time.sleep(0.2)  # the handler runs on after the socket closed
    finally:
        errors.removeHandler(caplog.handler)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert server_errors_counted() == before
    assert count_rows(pg_db)["notifications"] == 0
