"""Every request body arrives in time and within the size limit, or the request is answered.

Without this a client could hold a connection (and the handler waiting on it) forever: declare a
body (by Content-Length or a huge chunk size) and send it a byte at a time. This ASGI middleware
wraps `receive` for every route: the whole body must arrive within RCA_REQUEST_BODY_TIMEOUT_SECONDS
of the request's start (408), and may not exceed RCA_WEBHOOK_MAX_BODY_BYTES (413: the webhook's
payload is the largest body the API takes), refused as soon as the declared length or the bytes
received so far say so. FastAPI's own `max_body_size` answers a bare "Content Too Large" and has no
timeout, hence one small wrapper for both. Both answers close the connection: the rest of the body
is never read.
"""

from __future__ import annotations

import asyncio

from fastapi import HTTPException, status
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CLOSE = {"Connection": "close"}
GONE = "the client closed the connection before the whole body arrived"


def declared_length(text: str) -> tuple[int | None, bool]:
    """Content-Length as (its value, whether it is over any limit): (None, False) when it is no number.
    Only ASCII digits count (str.isdigit() also takes "²", which int() refuses), and a value of more
    than 18 digits is over every limit without converting it (Python will not convert 4,300)."""
    if not (text.isascii() and text.isdigit()):
        return None, False
    if len(text) > 18:
        return None, True
    return int(text), False


def too_large(limit: int, declared: int | None = None) -> HTTPException:
    size = f"body of {declared} bytes" if declared is not None else "body"
    return HTTPException(
        status.HTTP_413_CONTENT_TOO_LARGE,
        detail=f"{size} exceeds the limit of {limit} bytes (RCA_WEBHOOK_MAX_BODY_BYTES)",
        headers=CLOSE,
    )


class BodyLimits:
    """ASGI middleware: a deadline and a size limit on reading each request's body."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_seconds: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_seconds = timeout_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared, huge = declared_length(Headers(scope=scope).get("content-length", ""))
        deadline = asyncio.get_running_loop().time() + self.timeout_seconds
        received = 0
        complete = False

        async def guarded() -> Message:
            nonlocal received, complete
            if complete:  # after the body only a disconnect can come, and may take its time
                return await receive()
            if huge or declared is not None and declared > self.max_bytes:
                raise too_large(self.max_bytes, declared)
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise HTTPException(
                    status.HTTP_408_REQUEST_TIMEOUT,
                    detail=f"the body did not arrive within {self.timeout_seconds:g} s "
                    "(RCA_REQUEST_BODY_TIMEOUT_SECONDS)",
                    headers=CLOSE,
                ) from None
            if message["type"] == "http.disconnect":
                # Nobody is left to answer; an HTTPException still ends the request as a refusal in the
                # log and the metrics, where Starlette's ClientDisconnect was an unhandled exception.
                raise HTTPException(status.HTTP_400_BAD_REQUEST, detail=GONE, headers=CLOSE)
            if message["type"] != "http.request":
                complete = True
                return message
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise too_large(self.max_bytes)
            complete = not message.get("more_body", False)
            return message

        await self.app(scope, guarded, send)
