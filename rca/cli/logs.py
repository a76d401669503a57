"""The commands' logging: one short line per event, libraries' per-request chatter kept out."""

from __future__ import annotations

import logging
import os

from rca.config import Settings
from rca.domain.answer import answer_line

# Libraries that log every request at INFO (with its full URL): the demo's polling and each trace
# or LLM call would flood the log. The openai client sends through httpx2 (a fork of httpx with its
# own logger names); its own "openai" logger announces retries with the URL.
CHATTY_LOGGERS = ("httpx", "httpcore", "httpx2", "httpcore2", "openai")
# Alembic announces each of its plugins at INFO on import, and its migration context at INFO
# whenever the schema's revision is read (every `serve`, `worker`, `token`): noise around our
# one-line errors. `rca migrate` shows the steps it runs.
ALEMBIC_LOGGERS = ("alembic.runtime.plugins", "alembic.runtime.migration")
RETRY_LOGGER = "urllib3.connectionpool"
URLLIB3_RETRY = "Retrying (%r) after connection broken by '%r': %s"  # urllib3 2.x's own format
PROMQL_SHOWN = 80  # characters of a retried request's PromQL in the log


class ShortRetryWarnings(logging.Filter):
    """urllib3's warning of each retried request in one short line: the path with its PromQL
    decoded and cut, and the error's own words, instead of the retry state's repr, the error's
    nested reprs and the whole URL-encoded query."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == URLLIB3_RETRY and isinstance(record.args, tuple) and len(record.args) == 3:
            _, error, url = record.args
            record.msg, record.args = "retrying %s after %s", (_short_request(str(url)), _short_cause(error))
        return True


def _short_request(url: str) -> str:
    """`/api/v1/query (sum(rate(vllm:...)…)`: the path, and the PromQL it asked, cut."""
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(url)
    query = " ".join(parse_qs(parts.query).get("query", [""])[0].split())
    if len(query) > PROMQL_SHOWN:
        query = query[: PROMQL_SHOWN - 1] + "…"
    return f"{parts.path} ({query})" if query else parts.path


def _short_cause(error: object) -> str:
    """`NewConnectionError: ... [Errno 111] Connection refused`, on one line, cut."""
    return f"{type(error).__name__}: {answer_line(str(error))}"


def quiet_library_loggers() -> None:
    """Libraries' per-request logs at WARNING and above only, whatever RCA_LOG_LEVEL says, and
    urllib3's retries in one short line each. Called by every entry point that runs the service
    (`rca ...`, `celery -A workers.app`)."""
    for name in (*ALEMBIC_LOGGERS, *CHATTY_LOGGERS):
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.root.level))
    retries = logging.getLogger(RETRY_LOGGER)
    if not any(isinstance(f, ShortRetryWarnings) for f in retries.filters):
        retries.addFilter(ShortRetryWarnings())


def report_logging() -> None:
    """The output of `investigate`, `backtest` and `demo` is their report, not the service's log:
    warnings only unless RCA_LOG_LEVEL is set, and not urllib3's per-retry warnings, which would
    bury the one line that says Prometheus is unreachable (RCA_LOG_LEVEL=DEBUG shows them)."""
    if "RCA_LOG_LEVEL" not in os.environ:
        logging.getLogger().setLevel(logging.WARNING)
    if logging.root.level > logging.DEBUG:
        logging.getLogger(RETRY_LOGGER).setLevel(logging.ERROR)


def setup_logging(settings: Settings) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_library_loggers()
