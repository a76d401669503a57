"""The FastAPI application: webhook intake, incident search, health and readiness."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client.exposition import choose_encoder
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from rca import metrics
from rca.api import access_log, incidents, scan, slack, stats, webhook
from rca.api.auth import require_read
from rca.api.body import BodyLimits
from rca.api.database import database_error
from rca.api.docs import install_docs
from rca.api.errors import validation_failed
from rca.api.methods import http_error
from rca.api.schemas import ReadinessOut
from rca.config import Settings
from rca.domain.waiting import Waiting
from rca.incidents import notices
from rca.jobs.dispatch import Dispatcher, create_dispatcher
from rca.jobs.queues import INVESTIGATIONS_QUEUE, SLACK_QUEUE
from rca.startup import prometheus_problem
from rca.store import investigations
from rca.store.db import ping, session_scope

log = logging.getLogger(__name__)


def _broker_ping(settings: Settings) -> None:
    if not settings.broker_url:  # `settings.embedded_queue`: there is no broker to reach
        return
    from kombu import Connection

    with Connection(settings.broker_url, connect_timeout=2) as conn:
        conn.ensure_connection(max_retries=1)


def create_app(settings: Settings, dispatcher: Dispatcher | None = None) -> FastAPI:
    """Build the app; the dispatcher is created at start-up unless one is given (tests, demo)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = dispatcher is None
        app.state.dispatcher = dispatcher or create_dispatcher(settings)
        app.state.intake_batcher = webhook.make_batcher(settings, app.state.dispatcher)
        yield
        if owned:
            app.state.dispatcher.close()

    # The docs pages load vendored assets, not FastAPI's CDN defaults (rca/api/docs.py).
    app = FastAPI(
        title="LLM-serving RCA",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        description="Root-cause analysis for LLM inference fleets, driven by Alertmanager.",
        # FastAPI's OpenTelemetry hooks: the service's metrics are its own (docs/metrics.md), and with
        # no provider configured the hooks only looked the global providers up on every request
        # (a tenth of what a webhook refused 401 costs the app).
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.settings = settings
    install_docs(app)
    app.include_router(webhook.router, tags=["intake"])
    app.include_router(incidents.router, tags=["incidents"])
    app.include_router(stats.router, tags=["stats"])
    app.include_router(scan.router, tags=["scan"])
    app.include_router(slack.router, tags=["slack"])

    generate_openapi = app.openapi

    def openapi_with_webhook_models() -> dict[str, Any]:
        """The webhook body's nested models, which FastAPI does not collect for a hand-read body."""
        schema = app.openapi_schema
        if schema is None:
            schema = generate_openapi()  # which also caches it as app.openapi_schema
            schema.setdefault("components", {}).setdefault("schemas", {}).update(webhook.BODY_DEFS)
        return schema

    # Replacing `app.openapi` is FastAPI's documented way to extend the schema; mypy forbids
    # assigning to a method.
    app.openapi = openapi_with_webhook_models  # type: ignore[method-assign]

    app.add_exception_handler(DBAPIError, database_error)
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, validation_failed)  # type: ignore[arg-type]
    app.add_middleware(
        BodyLimits, max_bytes=settings.webhook_max_body_bytes, timeout_seconds=settings.request_body_timeout_seconds
    )
    access_log.install()

    @app.get("/healthz", tags=["health"], summary="The process is up")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    async def reachable(name: str, check: Callable[[], object]) -> str:
        try:
            await run_in_threadpool(check)
            return "ok"
        except Exception as exc:
            # Unauthenticated: the error's text names hosts, ports and users. Only the log has it.
            log.warning("readiness: %s unavailable: %s: %s", name, type(exc).__name__, str(exc)[:300])
            return "unavailable"

    async def prometheus() -> str:
        if not settings.prometheus_url:
            return "not configured"
        problem = await run_in_threadpool(prometheus_problem, settings)
        if problem is None:
            return "ok"
        log.warning("readiness: %s", problem)
        return "unavailable"

    @app.get(
        "/readyz",
        tags=["health"],
        summary="Database and broker are reachable; Prometheus too, or investigations are blind",
        response_model=ReadinessOut,
        responses={
            503: {
                "model": ReadinessOut,
                "description": "the database or the broker is unreachable; `checks` says which (the reason is "
                "in the service's log, not in this unauthenticated answer)",
            }
        },
    )
    async def readyz() -> JSONResponse:
        database, broker, metrics_source = await asyncio.gather(
            reachable("database", lambda: ping(settings.effective_database_url)),
            reachable("broker", lambda: _broker_ping(settings)),
            prometheus(),
        )
        checks = {
            "database": database,
            "broker": broker,
            "queue": "embedded (in-process)" if settings.embedded_queue else "celery",
            "prometheus": metrics_source,
        }
        if database != "ok" or broker != "ok":
            return JSONResponse({"status": "not ready", "checks": checks}, status_code=503)
        # Without Prometheus the service still takes and keeps every alert: degraded, not down.
        return JSONResponse({"status": "ready" if metrics_source == "ok" else "degraded", "checks": checks})

    def waiting() -> dict[str, Waiting]:
        with session_scope(settings.effective_database_url) as session:
            return {INVESTIGATIONS_QUEUE: investigations.queued(session), SLACK_QUEUE: notices.owed(session)}

    scrape = metrics.scrape_registry(waiting)

    # Left out of the OpenAPI document: Prometheus' text format, not part of the JSON API.
    @app.get(
        "/metrics",
        tags=["health"],
        summary="The service's own metrics (docs/metrics.md)",
        dependencies=[Depends(require_read)],
        include_in_schema=False,
    )
    def prometheus_metrics(request: Request) -> Response:
        encode, content_type = choose_encoder(request.headers.get("accept", ""))  # as the worker's port does
        return Response(encode(scrape), media_type=content_type)

    return app
