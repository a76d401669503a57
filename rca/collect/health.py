"""Whether a Prometheus answers at all, and why a request failed in one short line. Start-up
(`rca serve`, `rca worker`) and `/readyz` ask, so that a blind investigation is never the first
sign of a missing or broken RCA_PROMETHEUS_URL. Apart from `prometheus.py`, which counts its errors
in the service's metrics: asking here loads no prometheus-client, which `rca worker` and
`rca serve --workers N` must set up (multiprocess mode) before it is imported (rca/cli.py)."""

from __future__ import annotations

import requests

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


def short_error(exc: BaseException) -> str:
    """Why a query (or anything else) failed, in one short line: requests' own messages carry the
    whole URL-encoded query, and an answer that is not JSON is quoted, not pasted."""
    if isinstance(exc, requests.ConnectionError):
        return "connection refused or unreachable"
    if isinstance(exc, requests.Timeout):
        return "timed out"
    if isinstance(exc, requests.JSONDecodeError):
        return f"the answer is not JSON: {answer_line(exc.doc)}"
    return answer_line(str(exc), limit=300)
