"""Whether a Prometheus answers at all, and why a request failed in one short line. Start-up
(`rca serve`, `rca worker`) and `/readyz` ask, so that a blind investigation is never the first
sign of a missing or broken RCA_PROMETHEUS_URL. Apart from `prometheus.py`, which counts its errors
in the service's metrics: asking here loads no prometheus-client, which `rca worker` and
`rca serve --workers N` must set up (multiprocess mode) before it is imported (rca/cli/multiprocess.py)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import requests
import urllib3

from rca.domain.answer import answer_line


def unreachable(url: str, timeout: float) -> str | None:
    """Why Prometheus at `url` cannot be queried, in one short line; None when it answers a query
    as Prometheus does. One instant query (`1`), which every PromQL API serves."""
    try:
        reply = requests.get(f"{url.rstrip('/')}/api/v1/query", params={"query": "1"}, timeout=timeout)
        if reply.status_code != 200:
            return f"HTTP {reply.status_code}: {answer_line(reply.content)}"
        answer = reply.json()
    except requests.RequestException as exc:
        return short_error(exc)
    if not isinstance(answer, dict) or answer.get("status") != "success":
        return f"not a Prometheus query answer: {answer_line(reply.content)}"
    return None


# What a request that got no answer ran into, in words: the operator fixes each differently (a
# hung server, nothing listening, a wrong host name, a certificate).
FAILURE_WORDS = {
    "timeout": "timed out (no answer in time)",
    "refused": "connection refused (nothing listening)",
    "dns": "host name not found",
    "tls": "TLS handshake failed",
    "connection": "connection failed",
}


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception and what it wraps: requests wraps urllib3's error (`MaxRetryError.reason`),
    which wraps the socket's, in arguments, `reason` and the cause or context chain."""
    seen: set[int] = set()
    todo = [exc]
    while todo and len(seen) < 16:
        link = todo.pop(0)
        if id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        inner = [*link.args, getattr(link, "reason", None), link.__cause__, link.__context__]
        todo += [e for e in inner if isinstance(e, BaseException)]


def failure_kind(exc: BaseException) -> str | None:
    """What a request that got no answer ran into: "timeout", "refused", "dns", "tls" or
    "connection" (anything else on the way, a reset say); None when it got an answer. A read
    timeout retried out reaches us as requests' ConnectionError: its cause tells."""
    if not isinstance(exc, requests.ConnectionError | requests.Timeout):
        return None
    causes = list(_causes(exc))
    kinds = (
        ("dns", (urllib3.exceptions.NameResolutionError, socket.gaierror)),
        ("tls", (requests.exceptions.SSLError, urllib3.exceptions.SSLError, ssl.SSLError)),
        ("refused", (ConnectionRefusedError,)),
        ("timeout", (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)),
    )
    for kind, types in kinds:  # in this order: urllib3's failed connection is a ConnectTimeoutError too
        if any(isinstance(link, types) and not _only_a_connection(link, kind) for link in causes):
            return kind
    return "connection"


def _only_a_connection(link: BaseException, kind: str) -> bool:
    """urllib3's NewConnectionError (refused, unreachable, unresolved) subclasses its connect
    timeout for old callers' sake: it is a timeout only when its own cause is one."""
    return kind == "timeout" and isinstance(link, urllib3.exceptions.NewConnectionError)


def short_error(exc: BaseException) -> str:
    """Why a query (or anything else) failed, in one short line: requests' own messages carry the
    whole URL-encoded query, and an answer that is not JSON is quoted, not pasted."""
    kind = failure_kind(exc)
    if kind is not None:
        return FAILURE_WORDS[kind]
    if isinstance(exc, requests.JSONDecodeError):
        return f"the answer is not JSON: {answer_line(exc.doc)}"
    return answer_line(str(exc), limit=300)
