"""The traces stage of an investigation: pick the service, sample the window, attribute, judge.

Every failure (no backend, unknown service, backend down, empty window) ends in a finding that
says so, never in an exception: the investigation goes on with metrics alone.
"""

from __future__ import annotations

import logging
from datetime import datetime

from rca.config import Settings, TracesConfig
from rca.domain.evidence import Finding
from rca.domain.status import FindingStatus
from rca.traces.attribution import compile_groups, time_trace
from rca.traces.client import TraceHTTP
from rca.traces.findings import attribution_findings, unavailable
from rca.traces.jaeger import JaegerSource
from rca.traces.model import TraceSourceError
from rca.traces.sampling import TraceSource, collect_sample, plan_sample
from rca.traces.tempo import TempoSource

log = logging.getLogger(__name__)


def service_candidates(alert_labels: list[dict[str, str]], config: TracesConfig, stack: str | None) -> list[str]:
    """The service names to look for, in order: each configured label on which every alert that
    carries it agrees (translated through `services` where the backend spells it differently), then
    the names the target's serving stack reports as by default (`stack_services`)."""
    candidates = []
    for name in config.service_labels:
        values = {labels[name] for labels in alert_labels if labels.get(name)}
        if len(values) == 1:
            value = values.pop()
            candidates.append(config.services.get(value, value))
    candidates += config.stack_services.get(stack or "", [])
    return list(dict.fromkeys(candidates))


def matched_service(candidates: list[str], known: list[str]) -> str | None:
    """The first candidate the trace backend knows."""
    return next((name for name in candidates if name in set(known)), None)


def open_source(settings: Settings, config: TracesConfig) -> TraceSource:
    headers = {name: value.get_secret_value() for name, value in settings.traces_headers.items()}
    http = TraceHTTP(
        settings.traces_url or "",
        headers,
        settings.traces_timeout_seconds,
        concurrency=settings.traces_concurrency,
        backend=settings.traces_backend,
    )
    if settings.traces_backend == "jaeger":
        return JaegerSource(http, settings.traces_max_spans_per_trace, config.phase_attributes)
    return TempoSource(http, settings.traces_max_spans_per_trace, settings.traces_concurrency, config.phase_attributes)


def trace_findings(
    settings: Settings,
    config: TracesConfig,
    alert_labels: list[dict[str, str]],
    alert_start: datetime,
    start: datetime,
    end: datetime,
    stack: str | None = None,
) -> list[Finding]:
    """Findings from a bounded sample of the service's traces in [start, end]: the service is the
    first of the alert's names and the stack's default names that the backend's service list (read
    once) has."""
    if settings.traces_backend == "none":
        return unavailable("no trace backend configured (set RCA_TRACES_BACKEND=jaeger|tempo and RCA_TRACES_URL)")
    candidates = service_candidates(alert_labels, config, stack)
    if not candidates:
        return unavailable(
            f"the alert names no traced service (labels tried: {', '.join(config.service_labels)}) and the "
            f"serving stack ({stack or 'not detected'}) has no default service names",
            status=FindingStatus.NOT_MEASURABLE,
            source=settings.traces_backend,
        )
    source = open_source(settings, config)
    query = source.describe_query(candidates[0])
    try:
        known = source.services()
        service = matched_service(candidates, known)
        if service is None:
            shown = ", ".join(sorted(known)[:10]) or "none"
            more = f" and {len(known) - 10} more" if len(known) > 10 else ""
            return unavailable(
                f"no traced service matched (tried: {', '.join(candidates)}; {source.name} has: {shown}{more})",
                status=FindingStatus.NOT_MEASURABLE,
                source=source.name,
                query=query,
            )
        query = source.describe_query(service)
        plan = plan_sample(int(start.timestamp() * 1e6), int(end.timestamp() * 1e6), settings.traces_sample_size)
        sample = collect_sample(source, service, plan, settings.traces_budget_seconds, settings.traces_sample_size)
    except TraceSourceError as exc:
        log.warning("traces unavailable: %s", exc)
        return unavailable(f"{source.name}: {exc}", source=source.name, query=query)
    finally:
        source.close()
    if not sample.traces:
        return unavailable(
            f"no traces of service {service!r} in {source.name} between {start:%H:%M} and {end:%H:%M} UTC",
            source=source.name,
            query=query,
        )
    groups = compile_groups(config.operations)
    timings = [time_trace(trace, groups) for trace in sample.traces]
    note = (
        f"Sample: {len(sample.traces)} traces of {service} from {sample.slices_read} of {len(plan.slices)} time slices"
    )
    if sample.cut_short:
        note += f", cut short by the {settings.traces_budget_seconds:g} s budget"
    if sample.slices_failed:
        note += f", {len(sample.slices_failed)} slices failed ({sample.slices_failed[0]})"
    if sample.dropped_spans:
        note += f", {sample.dropped_spans} spans over the per-trace cap left out"
    orphans, skewed = sum(t.orphans for t in timings), sum(t.skew_adjusted for t in timings)
    if orphans or skewed:
        note += f"; {orphans} spans without their parent, {skewed} moved inside their parent for clock skew"
    return attribution_findings(timings, plan.slices, alert_start, end, config, note + ".", source.name, query)
