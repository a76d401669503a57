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


def service_for(alert_labels: list[dict[str, str]], config: TracesConfig) -> str | None:
    """The traced service the alerts name: the first configured label on which every alert that
    carries it agrees, translated through `services` when the backend spells it differently."""
    for name in config.service_labels:
        values = {labels[name] for labels in alert_labels if labels.get(name)}
        if len(values) == 1:
            value = values.pop()
            return config.services.get(value, value)
    return None


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
) -> list[Finding]:
    """Findings from a bounded sample of the service's traces in [start, end]."""
    if settings.traces_backend == "none":
        return unavailable("no trace backend configured (set RCA_TRACES_BACKEND=jaeger|tempo and RCA_TRACES_URL)")
    service = service_for(alert_labels, config)
    if service is None:
        return unavailable(
            f"the alert names no traced service (labels tried: {', '.join(config.service_labels)})",
            status=FindingStatus.NOT_MEASURABLE,
            source=settings.traces_backend,
        )
    source = open_source(settings, config)
    query = source.describe_query(service)
    try:
        known = source.services()
        if service not in known:
            shown = ", ".join(sorted(known)[:10]) or "none"
            return unavailable(
                f"service {service!r} is not known to {source.name} (it has: {shown})",
                status=FindingStatus.NOT_MEASURABLE,
                source=source.name,
                query=query,
            )
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
