"""The HTTP side shared by both backends: one httpx client with timeouts, the operator's auth
headers, and a cap on response size so a huge answer fails clearly instead of filling memory."""

from __future__ import annotations

import json
from typing import Any

import httpx

from rca import metrics
from rca.domain.answer import answer_line
from rca.traces.model import TraceSourceError

MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class TraceHTTP:
    """GET JSON from a trace backend. Header values are never logged or put in errors."""

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        timeout: float,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        concurrency: int = 8,
        backend: str = "unknown",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.backend = backend  # jaeger | tempo: the `backend` label of the error metric
        # What errors and findings show: the URL without any user:password it may carry.
        self.shown_url = str(httpx.URL(self.base_url).copy_with(userinfo=b"")).rstrip("/")
        self.max_response_bytes = max_response_bytes
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self.client = httpx.Client(
            base_url=self.base_url,
            headers={"Accept": "application/json", **headers},
            timeout=httpx.Timeout(timeout),
            limits=limits,
        )

    def close(self) -> None:
        self.client.close()

    def get_json(self, path: str, params: dict[str, Any] | None = None, missing_ok: bool = False) -> Any:
        """The decoded JSON body; None on 404 when `missing_ok`. Raises TraceSourceError, counted
        in `rca_trace_query_errors_total`."""
        try:
            return self._get_json(path, params, missing_ok)
        except TraceSourceError as exc:
            metrics.TRACE_QUERY_ERRORS.labels(backend=self.backend, reason=exc.reason).inc()
            raise

    def _get_json(self, path: str, params: dict[str, Any] | None, missing_ok: bool) -> Any:
        try:
            with self.client.stream("GET", path, params=params) as response:
                if response.status_code == 404 and missing_ok:
                    return None
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > self.max_response_bytes:
                        raise TraceSourceError(
                            f"{path}: response larger than {self.max_response_bytes} bytes", "too_large"
                        )
        except httpx.TimeoutException:
            raise TraceSourceError(f"{self.shown_url}{path}: timed out", "timeout") from None
        except httpx.HTTPError as exc:
            raise TraceSourceError(f"{self.shown_url}{path}: {type(exc).__name__}: {exc}", "connection") from None
        if response.status_code in (401, 403):
            raise TraceSourceError(
                f"{self.shown_url}{path}: HTTP {response.status_code} (check RCA_TRACES_HEADERS)", "http_status"
            )
        if response.status_code != 200:
            said = answer_line(bytes(body))
            raise TraceSourceError(f"{self.shown_url}{path}: HTTP {response.status_code}: {said}", "http_status")
        try:
            return json.loads(body)
        except ValueError:
            raise TraceSourceError(f"{self.shown_url}{path}: answer is not JSON") from None
