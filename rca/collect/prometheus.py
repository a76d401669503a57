"""Pull the investigation window from Prometheus: probe the scopes, then run every signal's
range query concurrently. Failures become data (`SeriesResult.error`), never exceptions, so a
missing series, a Prometheus outage or an answer that is not Prometheus' (a proxy's error page,
JSON of another shape) turns into an "unavailable" finding."""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from rca import metrics
from rca.collect.aliases import resolve_aliases
from rca.collect.health import failure_kind, short_error
from rca.collect.peers import fleet_facts
from rca.collect.profile import PARAMETERS, IdentitySpec, Profile, SignalSpec
from rca.config import Settings
from rca.domain.answer import answer_line
from rca.domain.factor import HostFacts

# Prometheus' retry policy, urllib3's inside prometheus-api-client's session (every query of an
# investigation and of the scan): one retry, at once, after a refused connection or a 502, 503 or
# 504 (urllib3 waits nothing before a first retry, so no backoff applies). A query has seconds,
# not minutes: a Prometheus that fails twice in a row is reported (an `unavailable` finding, the
# scan's error), not waited for. The last 5xx comes back as an answer (raise_on_status=False), so
# that the error quotes it rather than urllib3's "too many 503 error responses".
PROMETHEUS_RETRY = Retry(
    total=1, connect=1, status_forcelist=[502, 503, 504], allowed_methods=None, raise_on_status=False
)

Samples = list[tuple[float, float]]
Series = list[tuple[dict[str, str], Samples]]


class MalformedAnswer(PrometheusApiClientException):
    """A 200 whose JSON is not a Prometheus query answer: handled as a failed query."""


class RefusedAnswer(PrometheusApiClientException):
    """An answer other than 200, with what the server said in one line: the library's own
    exception carries the whole body (a proxy's HTML page, Prometheus' JSON error as bytes)."""


def _refuse_non_200(response: requests.Response, *args: object, **kwargs: object) -> None:
    """A response hook of the client's session: after the retries, every answer but a 200 (or a
    redirect, which the session follows) raises `RefusedAnswer`, quoting the server's words."""
    if response.status_code != 200 and not response.is_redirect:
        raise RefusedAnswer(f"HTTP {response.status_code}: {answer_line(response.content)}")


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime
    step_seconds: int


def choose_window(alert_start: datetime, now: datetime, lookback: timedelta, max_points: int, min_step: int) -> Window:
    """[alert start - lookback, now] at a step that keeps every series under `max_points`
    (Prometheus refuses more than 11,000 points per series)."""
    start = min(alert_start, now) - lookback
    seconds = (now - start).total_seconds()
    step = max(min_step, math.ceil(seconds / max_points))
    return Window(start=start, end=now, step_seconds=step)


@dataclass
class SeriesResult:
    """The data one signal got: which query and source answered, its series, or why none."""

    spec: SignalSpec
    promql: str | None = None
    source: str | None = None
    series: list[tuple[dict[str, str], Samples]] = field(default_factory=list)
    error: str | None = None
    not_measurable: bool = False  # the detected stack exports no source for this signal


@dataclass
class Collection:
    window: Window
    selectors: dict[str, str | None]
    results: list[SeriesResult]
    prometheus_error: str | None = None
    stack: str | None = None


class PrometheusSource:
    """A thin wrapper over prometheus-api-client with short, bounded retries; an answer other
    than 200 raises `RefusedAnswer` with the server's words in one line."""

    def __init__(self, url: str, timeout: float, concurrency: int) -> None:
        session = requests.Session()
        session.hooks["response"].append(_refuse_non_200)
        self.url = url
        self.timeout = timeout
        self.concurrency = concurrency
        self.client = PrometheusConnect(
            url=url, retry=PROMETHEUS_RETRY, timeout=timeout, method="POST", session=session
        )

    @classmethod
    def configured(cls, settings: Settings) -> PrometheusSource | None:
        """The Prometheus RCA_PROMETHEUS_URL names, with its timeout and query concurrency; None when unset."""
        if not settings.prometheus_url:
            return None
        return cls(settings.prometheus_url, settings.prometheus_timeout_seconds, settings.query_concurrency)

    def _instant(self, promql: str, at: datetime) -> list[dict[str, Any]]:
        """The instant vector's elements, each with its `metric` labels."""
        with counted_errors():
            return _elements(self.client.custom_query(promql, params={"time": at.timestamp()}), "value")

    def _range(self, promql: str, window: Window) -> Series:
        """Each series of the range query with its finite samples."""
        with counted_errors():
            data = self.client.custom_query_range(
                promql, start_time=window.start, end_time=window.end, step=f"{window.step_seconds}s"
            )
            return [(item["metric"], _samples(item["values"])) for item in _elements(data, "values")]

    def aliases(
        self, identities: list[IdentitySpec], hosts: list[str], window: Window, pod: dict[str, str] | None = None
    ) -> list[str]:
        """Other spellings of the hosts (and the machine of the alert's pod), from the profile's
        identity series. Best effort: a failed lookup returns none, and collection reports the
        outage with every signal."""
        lookback = max(60, int((window.end - window.start).total_seconds()))
        try:
            return resolve_aliases(lambda promql: self._instant(promql, window.end), identities, hosts, lookback, pod)
        except (requests.RequestException, PrometheusApiClientException):
            return []

    def fleet_facts(self, serving_probe: str, hosts: list[str], at: datetime) -> list[HostFacts] | None:
        """What the metrics know about the affected `hosts` and their healthy peers at `at`
        (rca.collect.peers); None when Prometheus could not be read: no factor is then judged."""
        try:
            return fleet_facts(lambda promql: self._instant(promql, at), serving_probe, hosts)
        except (requests.RequestException, PrometheusApiClientException):
            return None

    def _probe(self, probe: str, candidates: list[str], window: Window) -> str | None:
        """The first candidate selector under which any probe metric has data in the window."""
        lookback = max(60, int((window.end - window.start).total_seconds()))
        for selector in candidates:
            promql = f'count(last_over_time({{__name__=~"{probe}",{selector}}}[{lookback}s]))'
            if self._instant(promql, window.end):
                return selector
        return None

    def _detect_stack(self, profile: Profile, selector: str | None, window: Window) -> str | None:
        """The first stack whose own metric names exist for the serving target."""
        if selector is None:
            return None
        for name, stack in profile.stacks.items():
            if self._probe(stack.probe, [selector], window):
                return name
        return None

    def _fetch(
        self,
        spec: SignalSpec,
        selectors: dict[str, str | None],
        window: Window,
        stack: str | None,
        params: dict[str, str] | None = None,
    ) -> SeriesResult:
        """Try the signal's alternatives in order; the first that returns data wins.

        Each alternative runs in its own scope (default: the signal's). One whose scope has no
        selector for this target, or that names a parameter the operator did not set, is skipped
        and the next one is tried; an alternative is never rendered with a missing placeholder.
        """
        result = SeriesResult(spec=spec)
        alternatives = [a for a in spec.queries if stack is None or a.stacks is None or stack in a.stacks]
        if not alternatives:
            result.not_measurable = True
            result.error = f"not measurable on this stack ({stack}): it exports no source for this signal"
            return result
        values = {scope: sel for scope, sel in selectors.items() if sel is not None} | (params or {})
        tried: list[str] = []
        skipped: list[str] = []
        first_promql: str | None = None
        for alternative in alternatives:
            missing = sorted(alternative.placeholders() - values.keys())
            if missing:
                scopes = [m for m in missing if m not in PARAMETERS]
                why = f"no {scopes[0]} series match this target" if scopes else f"{missing[0]} not configured"
                skipped.append(f"{alternative.source} ({why})")
                continue
            promql = alternative.render(values)
            first_promql = first_promql or promql
            try:
                series = [(labels, values_) for labels, values_ in self._range(promql, window) if values_]
            except (requests.RequestException, PrometheusApiClientException) as exc:
                result.promql, result.error = promql, f"query failed: {short_error(exc)}"
                return result
            if series:
                result.promql, result.source, result.series = promql, alternative.source, series
                return result
            tried.append(alternative.source)
        result.promql = first_promql
        if not tried:
            if selectors.get(spec.scope) is None:
                result.error = f"no {spec.scope} series match this target"
            else:
                result.error = "no query could run: " + "; ".join(skipped)
            return result
        result.error = "no data from: " + "; ".join(tried)
        return result

    def collect(
        self,
        profile: Profile,
        candidates: dict[str, list[str]],
        window: Window,
        stack: str | None = None,
        params: dict[str, str] | None = None,
    ) -> Collection:
        """Probe the scopes (and the serving stack unless given), then pull every signal.
        `params` fills operator placeholders such as `$pinned_cpus` (see `profile.PARAMETERS`)."""
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            try:
                probes = {
                    scope: pool.submit(self._probe, spec.probe, candidates.get(scope, []), window)
                    for scope, spec in profile.scopes.items()
                }
                selectors: dict[str, str | None] = {scope: future.result() for scope, future in probes.items()}
                stack = stack or self._detect_stack(profile, selectors.get("serving"), window)
            except (requests.RequestException, PrometheusApiClientException) as exc:
                error = f"Prometheus at {self.url} is unavailable: {short_error(exc)}"
                results = [SeriesResult(spec=spec, error=error) for spec in profile.signals]
                return Collection(window=window, selectors={}, results=results, prometheus_error=error)
            futures = [pool.submit(self._fetch, spec, selectors, window, stack, params) for spec in profile.signals]
            results = [future.result() for future in futures]
        return Collection(window=window, selectors=selectors, results=results, stack=stack)


def _elements(result: Any, samples_key: str) -> list[dict[str, Any]]:
    """The `result` of a vector or matrix answer, checked: a list of objects, each with its labels
    under `metric` and its sample(s) under `samples_key` (TypeError otherwise)."""
    if not isinstance(result, list):
        raise TypeError(f"result is {type(result).__name__}, not a list")
    for item in result:
        if not (isinstance(item, dict) and isinstance(item.get("metric"), dict) and samples_key in item):
            raise TypeError(f"a result element is not an object with 'metric' and {samples_key!r}: {str(item)[:80]}")
    return result


def _samples(values: Any) -> Samples:
    """[timestamp, "value"] pairs as floats, without NaN and infinities (ValueError or TypeError
    when they are not pairs of numbers)."""
    out: Samples = []
    for ts, raw in values:
        value = float(raw)
        if math.isfinite(value):
            out.append((float(ts), value))
    return out


QUERY_ERRORS = (requests.RequestException, PrometheusApiClientException)


def error_reason(exc: BaseException) -> str:
    """The `reason` label of a failed query: what a request that got no answer ran into
    (`failure_kind`), else what was wrong with the answer; every answer but a 200, a 5xx retried
    out included, arrives as `RefusedAnswer`."""
    kind = failure_kind(exc)
    if kind is not None:
        return kind
    if isinstance(exc, requests.JSONDecodeError):
        return "bad_response"
    if isinstance(exc, PrometheusApiClientException):
        return "http_status"
    return "connection"


@contextmanager
def counted_errors() -> Iterator[None]:
    """Count a failed query in `rca_prometheus_query_errors_total`; the error goes on to the caller."""
    try:
        yield
    except QUERY_ERRORS as exc:
        metrics.PROMETHEUS_QUERY_ERRORS.labels(reason=error_reason(exc)).inc()
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a 200 whose JSON is no Prometheus answer
        metrics.PROMETHEUS_QUERY_ERRORS.labels(reason="bad_response").inc()
        raise MalformedAnswer(f"not a Prometheus answer ({type(exc).__name__}: {exc})") from None
