"""Traces: Jaeger and Tempo clients against protocol-faithful fakes (tests/fakes/traces.py cites the
format sources), self-time attribution, sampling over the window and the findings they become."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime, timedelta

import pytest

from rca.config import ConfigError, Settings, TracesConfig, load_settings
from rca.diagnosis.ranking import rank
from rca.domain.evidence import Finding
from rca.startup import checked_settings
from rca.traces.attribution import compile_groups, summarise, time_trace
from rca.traces.client import TraceHTTP
from rca.traces.evidence import service_candidates, trace_findings
from rca.traces.findings import ERRORS_KEY, SUMMARY_KEY
from rca.traces.jaeger import JaegerSource
from rca.traces.model import Span, Trace, TraceSourceError
from rca.traces.sampling import collect_sample, plan_sample, visiting_order
from rca.traces.tempo import TempoSource, hex_id
from tests.fakes.traces import (
    HEALTHY,
    LORA_FAULT,
    PREFILL_FAULT,
    SERVICE,
    FakeBackend,
    FakeSpan,
    FakeTrace,
    Phases,
    Store,
    TraceFactory,
)
from tests.helpers import factories

LORA = "trace_lora_adapter_load_share"
PREFILL = "trace_prefill_share"
GROUPS = compile_groups(TracesConfig().operations)
T0 = 1_760_000_000_000_000  # microseconds


def fake_span(
    sid: int, parent: int | None, op: str, start_ms: float, dur_ms: float, service: str = "engine", error: bool = False
) -> FakeSpan:
    return FakeSpan(
        f"{sid:016x}",
        f"{parent:016x}" if parent is not None else None,
        service,
        op,
        T0 + int(start_ms * 1000),
        int(dur_ms * 1000),
        error,
    )


def fetch_one(kind: str, trace: FakeTrace, max_spans: int = 2000, canonical: bool = False) -> Trace:
    """The trace as our client reads it back from the fake server (whole wire round trip)."""
    store = Store([trace])
    with FakeBackend(kind, store, canonical_otlp=canonical) as fake:
        http = TraceHTTP(fake.url, {}, 5)
        source = JaegerSource(http, max_spans) if kind == "jaeger" else TempoSource(http, max_spans, 4)
        service = trace.spans[0].service
        [got] = source.search(service, trace.start_us - 1_000_000, trace.start_us + 1_000_000, 10)
        source.close()
    return got


BACKENDS = ["jaeger", "tempo", "tempo-otlp"]


def read_back(backend: str, trace: FakeTrace, max_spans: int = 2000) -> Trace:
    return fetch_one(backend.split("-")[0], trace, max_spans, canonical=backend == "tempo-otlp")


# ---- wire formats ------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_spans_parents_services_and_errors_survive_the_wire(backend: str) -> None:
    trace = FakeTrace(
        "00" + "ab" * 15,
        [
            fake_span(1, None, "POST /v1/chat/completions", 0, 100, service="gateway"),
            fake_span(2, 1, "llm_request", 5, 90),
            fake_span(3, 2, "decode", 40, 50, error=True),
        ],
    )
    got = read_back(backend, trace)
    assert got.trace_id == trace.trace_id  # Tempo search drops leading zeros; ids are read back as 32 hex
    spans = {s.span_id: s for s in got.spans}
    assert spans["0000000000000003"].parent_id == "0000000000000002"
    assert spans["0000000000000001"].parent_id is None
    assert spans["0000000000000001"].service == "gateway" and spans["0000000000000002"].service == "engine"
    assert spans["0000000000000003"].error and not spans["0000000000000002"].error
    assert spans["0000000000000003"].start_us == T0 + 40_000 and spans["0000000000000003"].duration_us == 50_000


def test_hex_id_reads_hex_and_base64_and_rejects_neither() -> None:
    assert hex_id("0123456789ABCDEF") == "0123456789abcdef"
    assert hex_id("ASNFZ4mrze8=") == "0123456789abcdef"
    assert hex_id("AAAAAAAAAAA=") is None  # all-zero parent = no parent
    assert hex_id("") is None
    with pytest.raises(TraceSourceError):
        hex_id("not an id!")


def test_jaeger_search_sends_microseconds_and_the_limit() -> None:
    store = Store([TraceFactory(2).request(T0, LORA_FAULT)])
    with FakeBackend("jaeger", store) as fake:
        source = JaegerSource(TraceHTTP(fake.url, {}, 5), 100)
        assert source.services() == ["api-gateway", SERVICE]
        assert len(source.search(SERVICE, T0 - 10, T0 + 1000, 7)) == 1  # its engine span starts at T0 + 300 us
        assert source.search(SERVICE, T0 + 10_000_000, T0 + 20_000_000, 7) == []
        source.close()
    assert f"/api/traces?service={SERVICE}&start={T0 - 10}&end={T0 + 1000}&limit=7" in store.requests


def test_tempo_search_sends_traceql_and_unix_seconds() -> None:
    store = Store([TraceFactory(2).request(T0, LORA_FAULT)])
    with FakeBackend("tempo", store) as fake:
        source = TempoSource(TraceHTTP(fake.url, {}, 5), 100, 2)
        assert SERVICE in source.services()
        [trace] = source.search(SERVICE, T0 - 2_000_000, T0 + 2_000_000, 5)
        source.close()
    search = next(r for r in store.requests if r.startswith("/api/search?"))
    assert "q=%7B+resource.service.name+%3D+%22vllm-llama-3-8b%22+%7D" in search
    assert f"start={T0 // 1_000_000 - 2}" in search and f"end={T0 // 1_000_000 + 2}" in search
    assert f"/api/traces/{trace.trace_id}" in store.requests


def test_auth_headers_are_sent_and_a_refusal_names_the_setting_not_the_secret() -> None:
    store = Store([TraceFactory(2).request(T0, LORA_FAULT)], required_headers={"Authorization": "Bearer s3cret"})
    with FakeBackend("jaeger", store) as fake:
        good = JaegerSource(TraceHTTP(fake.url, {"Authorization": "Bearer s3cret"}, 5), 100)
        assert SERVICE in good.services()
        bad = JaegerSource(TraceHTTP(fake.url, {"Authorization": "Bearer wrong"}, 5), 100)
        with pytest.raises(TraceSourceError) as err:
            bad.services()
        good.close()
        bad.close()
    assert "401" in str(err.value) and "RCA_TRACES_HEADERS" in str(err.value) and "wrong" not in str(err.value)


def test_credentials_in_the_url_are_used_but_never_shown() -> None:
    store = Store([TraceFactory(2).request(T0, LORA_FAULT)], required_headers={"Authorization": "Basic dTpzM2NyZXQ="})
    with FakeBackend("jaeger", store) as fake:
        url = fake.url.replace("http://", "http://u:s3cret@")
        source = JaegerSource(TraceHTTP(url, {}, 5), 100)
        assert SERVICE in source.services()  # httpx sends the URL's user:password as basic auth
        assert "s3cret" not in source.describe_query(SERVICE)
        fake.store.required_headers["Authorization"] = "Basic other"
        with pytest.raises(TraceSourceError) as err:
            source.services()
        source.close()
    assert "s3cret" not in str(err.value) and fake.url in str(err.value)


def test_an_oversized_answer_fails_clearly() -> None:
    store = Store([TraceFactory(2).request(T0, LORA_FAULT)])
    with FakeBackend("jaeger", store) as fake:
        http = TraceHTTP(fake.url, {}, 5, max_response_bytes=200)
        with pytest.raises(TraceSourceError, match="larger than 200 bytes"):
            JaegerSource(http, 100).search(SERVICE, T0 - 10, T0 + 1000, 5)
        http.close()


# ---- attribution -------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_spans_are_counted_once_as_self_time(backend: str) -> None:
    trace = FakeTrace(
        "1" * 32,
        [
            fake_span(1, None, "request", 0, 100),
            fake_span(2, 1, "lora_adapter.load", 10, 60),
            fake_span(3, 2, "lora_adapter.read_weights", 15, 30),
            fake_span(4, 2, "lora_adapter.compile_kernels", 30, 20),  # overlaps read_weights by 15 ms
            fake_span(5, 1, "decode", 70, 30),
        ],
    )
    timing = time_trace(read_back(backend, trace), GROUPS)
    own = {op: round(us / 1000, 3) for (_, op), us in timing.self_us.items()}
    # read_weights and compile_kernels overlap: they cover 35 ms of the load together, shared 30:20.
    assert own == {
        "request": 10,
        "lora_adapter.load": 25,
        "lora_adapter.read_weights": 21,
        "lora_adapter.compile_kernels": 14,
        "decode": 30,
    }
    assert timing.total_self_us == timing.request_us == 100_000
    assert timing.group_us[LORA] == pytest.approx(60_000)  # the load's own duration, nothing counted twice
    stats = summarise([timing])
    assert stats.group_share(LORA) == pytest.approx(0.6)
    assert sum(op.share for op in stats.operations.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_clock_skew_moves_a_child_inside_its_parent(backend: str) -> None:
    trace = FakeTrace(
        "2" * 32,
        [
            fake_span(1, None, "POST /v1/completions", 0, 100, service="gateway"),
            fake_span(2, 1, "llm_request", -40, 80, service="engine"),  # engine clock 45 ms behind
            fake_span(3, 2, "prefill", -35, 30, service="engine"),
            fake_span(4, 1, "postprocess", 90, 30, service="gateway"),  # runs past its parent's end
        ],
    )
    timing = time_trace(read_back(backend, trace), GROUPS)
    own = {op: us / 1000 for (_, op), us in timing.self_us.items()}
    assert timing.skew_adjusted == 3  # llm_request and prefill moved forward, postprocess back
    assert timing.durations[("engine", "prefill")] == [30_000]  # durations kept: one clock measured each
    assert own["POST /v1/completions"] == 0  # llm_request at [0,80] and postprocess at [70,100] cover it
    share = 100 / 110  # the two children overlap by 10 ms and share the 100 ms they cover
    assert own["llm_request"] == pytest.approx(50 * share) and own["prefill"] == pytest.approx(30 * share)
    assert own["postprocess"] == pytest.approx(30 * share)
    assert timing.total_self_us == pytest.approx(100_000)


def test_a_child_longer_than_its_parent_is_clipped_to_it() -> None:
    trace = Trace("3" * 32, [Span("a", None, "s", "root", T0, 50_000), Span("b", "a", "s", "child", T0 - 5, 80_000)])
    timing = time_trace(trace, GROUPS)
    assert timing.self_us[("s", "child")] == 50_000 and timing.self_us[("s", "root")] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_spans_whose_parent_is_missing_become_roots(backend: str) -> None:
    trace = FakeTrace(
        "4" * 32,
        [
            fake_span(1, None, "request", 0, 100),
            fake_span(3, 99, "lora_adapter.load", 20, 40),  # parent 99 was never received
            fake_span(4, 3, "lora_adapter.read_weights", 25, 10),
        ],
    )
    timing = time_trace(read_back(backend, trace), GROUPS)
    assert timing.orphans == 1
    assert timing.request_us == 100_000  # the longest root is the request
    assert timing.total_self_us == 140_000  # both roots' time: a share is of the recorded span time
    assert timing.group_us[LORA] == 40_000


def test_a_reference_cycle_does_not_hang_or_lose_spans() -> None:
    trace = Trace("5" * 32, [Span("a", "b", "s", "x", T0, 10), Span("b", "a", "s", "y", T0 + 1, 5)])
    timing = time_trace(trace, GROUPS)
    assert sum(len(v) for v in timing.durations.values()) == 2


@pytest.mark.parametrize("backend", ["jaeger", "tempo"])
def test_a_huge_trace_is_capped_to_its_longest_spans(backend: str) -> None:
    spans = [fake_span(1, None, "request", 0, 10_000), fake_span(2, 1, "lora_adapter.load", 100, 6_000)]
    # 30,000 tiny decode steps, one level deep; the cap keeps the long spans that carry the time.
    spans += [fake_span(10 + i, 1, "decode_step", 6_200 + i * 0.1, 0.05) for i in range(30_000)]
    started = time.perf_counter()
    got = read_back(backend, FakeTrace("6" * 32, spans), max_spans=500)
    timing = time_trace(got, GROUPS)
    assert time.perf_counter() - started < 20
    assert len(got.spans) == 500 and got.dropped_spans == 30_002 - 500
    assert {s.operation for s in got.spans} >= {"request", "lora_adapter.load"}
    assert timing.group_us[LORA] == 6_000_000
    assert timing.request_us == 10_000_000


# ---- sampling -----------------------------------------------------------------------------------


def test_plan_covers_the_window_in_equal_slices_with_equal_shares() -> None:
    plan = plan_sample(0, 195 * 60 * 1_000_000, 300)
    assert len(plan.slices) == 20 and plan.per_slice == 15
    assert plan.slices[0][0] == 0 and plan.slices[-1][1] == 195 * 60 * 1_000_000
    assert all(a[1] == b[0] for a, b in zip(plan.slices, plan.slices[1:], strict=False))
    assert visiting_order(5) == [4, 0, 3, 1, 2]


def window_store(
    fault: Phases, minutes: int = 195, onset_ago: int = 25, **kw: object
) -> tuple[Store, datetime, datetime]:
    now = datetime.now(UTC)
    start = now - timedelta(minutes=minutes)
    us = lambda d: int(d.timestamp() * 1e6)  # noqa: E731
    traces = TraceFactory(5).window(us(start), us(now), us(now - timedelta(minutes=onset_ago)), fault, **kw)
    return Store(traces), start, now


def test_sample_is_spread_over_the_whole_window_and_bounded() -> None:
    store, start, now = window_store(LORA_FAULT)
    with FakeBackend("jaeger", store) as fake:
        source = JaegerSource(TraceHTTP(fake.url, {}, 5), 2000)
        plan = plan_sample(int(start.timestamp() * 1e6), int(now.timestamp() * 1e6), 100)
        sample = collect_sample(source, SERVICE, plan, budget_seconds=30, max_traces=100)
        source.close()
    assert 90 <= len(sample.traces) <= 100 < len(store.traces)
    starts = sorted(t.start_us for t in sample.traces)
    assert starts[0] < plan.slices[1][0] and starts[-1] >= plan.slices[-1][0]  # both ends of the window
    filled = {i for i, (a, b) in enumerate(plan.slices) for t in sample.traces if a <= t.start_us < b}
    assert filled == set(range(len(plan.slices)))


def test_an_exhausted_budget_cuts_the_sample_short_but_keeps_both_ends() -> None:
    store, start, now = window_store(LORA_FAULT)

    class Slow(JaegerSource):
        def search(self, *args: object) -> list[Trace]:
            time.sleep(0.3)
            return super().search(*args)  # type: ignore[arg-type]

    with FakeBackend("jaeger", store) as fake:
        source = Slow(TraceHTTP(fake.url, {}, 5), 2000)
        plan = plan_sample(int(start.timestamp() * 1e6), int(now.timestamp() * 1e6), 200)
        sample = collect_sample(source, SERVICE, plan, budget_seconds=0.5, max_traces=200)
        source.close()
    assert sample.cut_short and sample.slices_read == 2
    first, last = plan.slices[0], plan.slices[-1]
    assert any(first[0] <= t.start_us < first[1] for t in sample.traces)
    assert any(last[0] <= t.start_us < last[1] for t in sample.traces)


# ---- findings ------------------------------------------------------------------------------------


def settings_for(kind: str, url: str, **kw: object) -> Settings:
    return load_settings(traces_backend=kind, traces_url=url, **kw)


def by_key(findings: list[Finding]) -> dict[str, Finding]:
    return {f.key: f for f in findings}


@pytest.mark.parametrize("kind", ["jaeger", "tempo"])
def test_lora_loads_since_the_onset_become_a_breached_finding_with_examples(kind: str) -> None:
    store, start, now = window_store(LORA_FAULT)
    alert_start = now - timedelta(minutes=5)
    with FakeBackend(kind, store) as fake:
        found = by_key(
            trace_findings(settings_for(kind, fake.url), TracesConfig(), [{"job": SERVICE}], alert_start, start, now)
        )
    lora = found[LORA]
    assert lora.status == "breached" and lora.kind == "trace"
    assert lora.value > 0.3 and lora.baseline < 0.02
    assert lora.detail.startswith("`lora_adapter.load`")
    onset = now - timedelta(minutes=25)
    assert onset - timedelta(minutes=2) <= lora.onset <= onset + timedelta(minutes=12)
    assert f"since {lora.onset:%H:%M} UTC" in lora.detail
    ids = {t.trace_id for t in store.traces}
    examples = lora.series_labels["example_traces"].split(",")
    assert examples and set(examples) <= ids and all(e in lora.detail for e in examples)
    assert found[PREFILL].status == "ok" and not found[PREFILL].breached
    summary = found[SUMMARY_KEY]
    assert summary.status == "ok" and summary.value > summary.baseline  # request p95 grew
    assert set(summary.series_labels["slowest_traces"].split(",")) <= ids
    assert "lora_adapter.read_weights" in summary.detail
    assert found[ERRORS_KEY].status == "ok"


def test_prefill_growth_breaches_the_prefill_finding_only() -> None:
    store, start, now = window_store(PREFILL_FAULT)
    with FakeBackend("jaeger", store) as fake:
        found = by_key(
            trace_findings(
                settings_for("jaeger", fake.url),
                TracesConfig(),
                [{"job": SERVICE}],
                now - timedelta(minutes=5),
                start,
                now,
            )
        )
    assert found[PREFILL].breached and not found[LORA].breached


@pytest.mark.parametrize("phases", [HEALTHY, LORA_FAULT], ids=["healthy", "slow-loads-all-along"])
def test_traces_that_did_not_change_breach_nothing(phases: Phases) -> None:
    store, start, now = window_store(phases, onset_ago=10_000)  # the same phases over the whole window
    with FakeBackend("tempo", store) as fake:
        found = trace_findings(
            settings_for("tempo", fake.url), TracesConfig(), [{"job": SERVICE}], now - timedelta(minutes=5), start, now
        )
    assert [f.key for f in found if f.breached] == []
    assert by_key(found)[LORA].value == pytest.approx(by_key(found)[LORA].baseline, abs=0.08)


@pytest.mark.parametrize("kind", ["jaeger", "tempo"])
def test_vllm_phase_attributes_become_phases_and_show_prefill_growth(kind: str) -> None:
    store, start, now = window_store(PREFILL_FAULT, vllm_native=True)
    assert all(len(t.spans) == 1 for t in store.traces)  # vLLM exports one span per request
    with FakeBackend(kind, store) as fake:
        found = by_key(
            trace_findings(
                settings_for(kind, fake.url), TracesConfig(), [{"job": SERVICE}], now - timedelta(minutes=5), start, now
            )
        )
    prefill = found[PREFILL]
    assert prefill.breached and prefill.detail.startswith("`llm_request:prefill`")
    assert prefill.value > 0.4 and prefill.baseline < 0.2
    assert not found[LORA].breached
    assert "llm_request:decode" in found[SUMMARY_KEY].detail


def test_phase_attributes_are_ignored_when_not_configured() -> None:
    store, start, now = window_store(PREFILL_FAULT, vllm_native=True)
    with FakeBackend("jaeger", store) as fake:
        found = by_key(
            trace_findings(
                settings_for("jaeger", fake.url),
                TracesConfig(phase_attributes={}),
                [{"job": SERVICE}],
                now - timedelta(minutes=5),
                start,
                now,
            )
        )
    assert found[PREFILL].value == 0 and not found[PREFILL].breached


def test_error_spans_since_the_onset_are_counted_by_operation() -> None:
    store, start, now = window_store(LORA_FAULT, error_rate_after=0.5)
    with FakeBackend("jaeger", store) as fake:
        errors = by_key(
            trace_findings(
                settings_for("jaeger", fake.url),
                TracesConfig(),
                [{"job": SERVICE}],
                now - timedelta(minutes=5),
                start,
                now,
            )
        )[ERRORS_KEY]
    assert errors.breached and errors.value > 0.2 and errors.baseline == 0
    assert "decode" in errors.series_labels["operations"] and "llm_request" in errors.series_labels["operations"]


def test_no_backend_unknown_service_and_empty_window_say_so() -> None:
    now = datetime.now(UTC)
    start, alert = now - timedelta(hours=3), now - timedelta(minutes=5)
    [none] = trace_findings(Settings(), TracesConfig(), [{"job": SERVICE}], alert, start, now)
    assert none.key == SUMMARY_KEY and none.status == "unavailable" and "RCA_TRACES_BACKEND" in none.detail
    store, _, _ = window_store(LORA_FAULT)
    with FakeBackend("jaeger", store) as fake:
        settings = settings_for("jaeger", fake.url)
        [unknown] = trace_findings(settings, TracesConfig(), [{"job": "no-such-svc"}], alert, start, now)
        [unnamed] = trace_findings(settings, TracesConfig(), [{"instance": "h:8000"}], alert, start, now)
        old = now - timedelta(days=2)
        [empty] = trace_findings(settings, TracesConfig(), [{"job": SERVICE}], old, old - timedelta(hours=3), old)
    assert unknown.status == "not_measurable"
    assert f"no traced service matched (tried: no-such-svc; jaeger has: api-gateway, {SERVICE})" in unknown.detail
    assert unnamed.status == "not_measurable" and "names no traced service" in unnamed.detail
    assert "serving stack (not detected) has no default service names" in unnamed.detail
    assert empty.status == "unavailable" and "no traces of service" in empty.detail


def test_a_backend_that_is_down_gives_an_unavailable_finding_quickly() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    now = datetime.now(UTC)
    started = time.monotonic()
    [down] = trace_findings(
        settings_for("tempo", f"http://127.0.0.1:{closed}", traces_timeout_seconds=2),
        TracesConfig(),
        [{"job": SERVICE}],
        now,
        now - timedelta(hours=3),
        now,
    )
    assert time.monotonic() - started < 5
    assert down.status == "unavailable" and "tempo" in down.detail and "ConnectError" in down.detail


def test_candidates_are_the_agreeing_labels_through_the_mapping_then_the_stacks_defaults() -> None:
    config = TracesConfig(services={"vllm": "vllm-prod"})
    assert service_candidates([{"job": "vllm", "model_name": "m"}], config, None) == ["vllm-prod", "m"]
    assert service_candidates([{"app": "a", "job": "j"}], config, None) == ["a", "j"]
    assert service_candidates([{"app": "a"}, {"app": "b", "job": "j"}], config, None) == ["j"]  # alerts disagree
    assert service_candidates([{"instance": "x"}], config, None) == []
    assert service_candidates([{"job": "tgi"}], config, "tgi") == [
        "tgi",
        "text-generation-inference.router",
        "text-generation-inference.server",
    ]
    assert service_candidates([{"job": "sglang"}], config, "sglang") == ["sglang"]  # each name once
    assert service_candidates([], config, "triton") == ["triton-inference-server"]
    assert service_candidates([], config, "vllm_v1") == ["vllm-server", "vllm"]


def test_a_stacks_service_names_are_configurable_and_the_other_stacks_keep_their_defaults() -> None:
    config = TracesConfig(stack_services={"tgi": ["tgi-router-prod"]})
    assert config.stack_services["tgi"] == ["tgi-router-prod"]
    assert config.stack_services["triton"] == ["triton-inference-server"]
    with pytest.raises(ValueError, match="tgi: give at least one service name"):
        TracesConfig(stack_services={"tgi": [" "]})


def test_a_stack_the_profile_does_not_know_is_refused(tmp_path) -> None:
    path = tmp_path / "rca.yaml"
    path.write_text("traces:\n  stack_services:\n    tensorrt: [trt]\n")
    with pytest.raises(ConfigError, match="stack_services: unknown stack\\(s\\) tensorrt; known: vllm_v1"):
        checked_settings(config_file=str(path))


TGI_ROUTER = "text-generation-inference.router"


@pytest.mark.parametrize("kind", ["jaeger", "tempo"])
def test_tgi_traces_are_found_under_the_routers_default_service_name(kind: str) -> None:
    """TGI's alert says job="tgi"; its router reports as text-generation-inference.router (its
    `--otlp-service-name` default). The service list is read once, the router's name matched."""
    now = datetime.now(UTC)
    start = now - timedelta(hours=3)
    us = lambda d: int(d.timestamp() * 1e6)  # noqa: E731
    traces = TraceFactory(5, service=TGI_ROUTER).window(us(start), us(now), us(now - timedelta(minutes=25)), HEALTHY)
    store = Store(traces)
    labels = [{"job": "tgi", "instance": "tgi-a:9000", "model_name": "llama"}]
    with FakeBackend(kind, store) as fake:
        found = by_key(
            trace_findings(
                settings_for(kind, fake.url), TracesConfig(), labels, now - timedelta(minutes=5), start, now, "tgi"
            )
        )
        without_stack = trace_findings(
            settings_for(kind, fake.url), TracesConfig(), labels, now - timedelta(minutes=5), start, now
        )
    summary = found[SUMMARY_KEY]
    assert summary.status == "ok", summary.detail
    assert f"traces of {TGI_ROUTER} from" in summary.detail
    assert TGI_ROUTER in (summary.query or "")
    services_path = "/api/services" if kind == "jaeger" else "/api/search/tag/service.name/values"
    assert sum(path.split("?")[0] == services_path for path in store.requests) == 2  # once for each of the two
    [unmatched] = without_stack
    assert unmatched.status == "not_measurable"
    assert f"no traced service matched (tried: tgi, llama; {kind} has: api-gateway, {TGI_ROUTER})" in unmatched.detail


@pytest.mark.parametrize("stack", ["triton", "sglang", "vllm_v1"])
def test_no_match_names_every_name_tried_and_what_the_backend_has(stack: str) -> None:
    store, start, now = window_store(HEALTHY)
    with FakeBackend("tempo", store) as fake:
        [finding] = trace_findings(
            settings_for("tempo", fake.url), TracesConfig(), [{"job": "engine"}], now, start, now, stack
        )
    tried = ", ".join(["engine", *TracesConfig().stack_services[stack]])
    assert finding.status == "not_measurable"
    assert finding.detail == (
        f"not measurable: no traced service matched (tried: {tried}; tempo has: api-gateway, {SERVICE})"
    )


def test_a_custom_operation_mapping_creates_its_finding() -> None:
    store, start, now = window_store(LORA_FAULT)
    config = TracesConfig(operations={"trace_adapter_io": ["*read_weights*"]})
    with FakeBackend("jaeger", store) as fake:
        found = by_key(
            trace_findings(
                settings_for("jaeger", fake.url), config, [{"job": SERVICE}], now - timedelta(minutes=5), start, now
            )
        )
    assert LORA not in found and found["trace_adapter_io"].breached
    assert found["trace_adapter_io"].title == "Share of request time in adapter io (traces)"


# ---- ranking and settings -------------------------------------------------------------------------


def finding(key: str, breached: bool, kind: str = "supporting") -> Finding:
    status = "breached" if breached else "ok"
    # baseline: a fresh breach, it had a healthy baseline
    return factories.finding(key, status=status, kind=kind, title=key, baseline=0.5, detail=key)


def test_a_lora_trace_finding_turns_an_ambiguous_queue_into_lora_adapter_loading() -> None:
    metrics = [finding("queue_median", True, "signal"), finding("ttft_p95", True), finding("request_rate", False)]
    without = rank(metrics + [finding(LORA, False, "trace")])
    with_traces = rank(metrics + [finding(LORA, True, "trace")])
    assert without[0].category != "lora_adapter_loading"
    assert with_traces[0].category == "lora_adapter_loading" and LORA in with_traces[0].evidence


def test_trace_settings_are_checked_at_start_up_without_echoing_secrets() -> None:
    with pytest.raises(ConfigError, match="RCA_TRACES_URL: .*required when RCA_TRACES_BACKEND=jaeger"):
        load_settings(traces_backend="jaeger")
    with pytest.raises(ConfigError, match="RCA_TRACES_BACKEND"):
        load_settings(traces_backend="zipkin", traces_url="http://x")
    with pytest.raises(ConfigError) as err:
        load_settings(traces_headers="Authorization: Bearer topsecret")
    assert "RCA_TRACES_HEADERS" in str(err.value) and "topsecret" not in str(err.value)
    settings = load_settings(
        traces_backend="tempo", traces_url="http://t:3200/", traces_headers='{"X-Scope-OrgID": "team-a"}'
    )
    assert settings.traces_url == "http://t:3200"
    assert settings.traces_headers["X-Scope-OrgID"].get_secret_value() == "team-a"
    assert "team-a" not in repr(settings)


def test_the_config_file_rejects_a_bad_operation_mapping(tmp_path) -> None:
    path = tmp_path / "rca.yaml"
    path.write_text("traces: {operations: {lora: ['*lora*']}}\n")
    with pytest.raises(ConfigError, match="RCA_CONFIG_FILE: .*traces.operations.*trace_<name>"):
        checked_settings(config_file=path)


def test_tempo_skips_a_trace_that_fails_to_load_but_not_a_whole_failing_slice() -> None:
    factory = TraceFactory(9)
    traces = [factory.request(T0 + i * 1_000_000, LORA_FAULT) for i in range(3)]
    store = Store(traces)
    with FakeBackend("tempo", store) as fake:
        source = TempoSource(TraceHTTP(fake.url, {}, 5), 100, 2)
        original = fake.tempo

        def broken_first(path: str, params: dict[str, str]) -> tuple[int, object]:
            if path.startswith("/api/traces/") and path.rsplit("/", 1)[1].rjust(32, "0") == traces[0].trace_id:
                return 500, "internal error\n"
            return original(path, params)

        fake.tempo = broken_first  # type: ignore[method-assign]
        got = source.search(SERVICE, T0 - 1_000_000, T0 + 5_000_000, 10)
        assert {t.trace_id for t in got} == {t.trace_id for t in traces[1:]}
        fake.tempo = lambda path, params: (500, "down\n") if path.startswith("/api/traces/") else original(path, params)
        with pytest.raises(TraceSourceError, match="HTTP 500"):
            source.search(SERVICE, T0 - 1_000_000, T0 + 5_000_000, 10)
        source.close()
