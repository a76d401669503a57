"""Query alternatives across scopes and operator parameters (PrometheusSource._fetch), without a
Prometheus: `_range` is replaced by a table of which queries return data. And what a failed query
says, against a real Prometheus and a server that is not one: one line, never a page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rca.collect.profile import load_profile
from rca.collect.prometheus import PrometheusSource, RefusedAnswer, Series, Window, short_error
from tests.fakes.html import HtmlServer

NOW = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW = Window(start=NOW - timedelta(hours=1), end=NOW, step_seconds=15)
CPU = next(s for s in load_profile().signals if s.id == "cpu_bound_ratio")
THROTTLING = next(s for s in load_profile().signals if s.id == "cpu_throttling")
NODE = 'instance=~"h"'
POD = 'namespace="ns",pod="p"'


class Fake(PrometheusSource):
    def __init__(self, answers: dict[str, bool]) -> None:  # metric-name fragment -> has data
        self.answers = answers
        self.asked: list[str] = []

    def _range(self, promql: str, window: Window) -> Series:
        self.asked.append(promql)
        if any(fragment in promql for fragment, has in self.answers.items() if has):
            return [({}, [(NOW.timestamp(), 0.9)])]
        return []


def fetch(fake: Fake, spec=CPU, node: str | None = NODE, pod: str | None = None, params: dict[str, str] | None = None):
    return fake._fetch(spec, {"serving": None, "gpu": None, "node": node, "pod": pod}, WINDOW, None, params)


def test_cadvisor_is_used_when_the_pod_is_known_and_node_exporter_is_absent() -> None:
    fake = Fake({"container_cpu_usage_seconds_total": True})
    result = fetch(fake, node=None, pod=POD)
    assert result.source.startswith("cAdvisor") and result.error is None
    assert POD in result.promql and "$" not in result.promql
    assert all("node_cpu" not in q and "namedprocess" not in q for q in fake.asked)  # node queries skipped


def test_pod_alternative_is_skipped_without_a_pod_and_the_next_one_runs() -> None:
    fake = Fake({"and on (cpu) node_cpu_isolated": True})
    result = fetch(fake)
    assert result.source == "node_exporter busy share of the pinned (isolcpus) cores"
    assert not any("container_" in q for q in fake.asked)


def test_configured_list_runs_only_when_set_and_never_renders_blank() -> None:
    fake = Fake({'cpu=~"4|5"': True})
    unset = fetch(fake)
    assert unset.source is None and "pinned_cpus" not in " ".join(fake.asked)
    assert unset.error.startswith("no data from:")
    fake = Fake({'cpu=~"4|5"': True})
    result = fetch(fake, params={"pinned_cpus": "4|5"})
    assert result.source == "node_exporter busy share of the configured pinned cores (pinned_cpus)"


def test_no_selector_for_any_alternative_keeps_the_scope_message() -> None:
    result = fetch(Fake({}), node=None, pod=None)
    assert result.error == "no node series match this target"
    assert result.promql is None


def test_pod_signal_without_a_pod_says_so() -> None:
    result = fetch(Fake({}), spec=THROTTLING)
    assert result.error == "no pod series match this target"


@pytest.mark.parametrize("has_pod", [True, False])
def test_empty_selector_is_never_substituted(has_pod: bool) -> None:
    fake = Fake({})
    fetch(fake, pod=POD if has_pod else None)
    assert all('{container!="",container!="POD",}' not in q for q in fake.asked)
    assert any("container_" in q for q in fake.asked) == has_pod


SERVING = 'instance="gpu-node-1:8000"'
REQUEST_RATE = next(s for s in load_profile().signals if s.id == "request_rate")


def fetch_serving(fake: Fake, spec, stack: str):
    return fake._fetch(spec, {"serving": SERVING, "gpu": None, "node": None, "pod": None}, WINDOW, stack)


@pytest.mark.parametrize(
    ("stack", "kept", "source"),
    [
        ("vllm_v1", "vllm:e2e_request_latency_seconds_count", "vLLM end-to-end latency histogram count"),
        ("vllm_v1", "vllm:time_to_first_token_seconds_count", "vLLM TTFT histogram count"),
        ("vllm_v0", "vllm:request_prompt_tokens_count", "vLLM prompt-length histogram count"),
        ("sglang", "sglang:queue_time_seconds_count", "SGLang queue-time histogram count"),
        ("tgi", "tgi_request_duration_count", "TGI request-duration histogram count"),
        ("triton", "nv_inference_first_response_histogram_ms_count", "Triton first-response histogram count"),
    ],
)
def test_request_rate_falls_back_to_a_latency_histogram_count_when_a_keep_list_drops_the_counter(
    stack: str, kept: str, source: str
) -> None:
    """Operators' keep-lists (`metric_relabel_configs`) drop series; each per-request histogram's
    `_count` counts the same requests, so the rate is measured, and the finding says from what."""
    result = fetch_serving(Fake({kept: True}), REQUEST_RATE, stack)
    assert result.error is None and result.source.startswith(source)
    assert kept in result.promql


def test_every_serving_stack_has_request_rate_fallbacks() -> None:
    stacks = load_profile().stacks
    for stack in stacks:
        alternatives = [q for q in REQUEST_RATE.queries if q.stacks is None or stack in q.stacks]
        assert len(alternatives) >= 2, f"{stack}: one missing series would leave the request rate unavailable"


# --------------------------------------------------------------------------- failed queries


def test_a_query_prometheus_refuses_quotes_its_error_in_one_line(empty_prometheus: str) -> None:
    source = PrometheusSource(empty_prometheus, timeout=10, concurrency=2)
    with pytest.raises(RefusedAnswer) as refused:
        source._range("sum(rate(vllm:num_requests_waiting[5m]", WINDOW)
    said = short_error(refused.value)
    assert said.startswith("HTTP 400: bad_data: ") and "parse error" in said, said
    assert "\n" not in said and "b'" not in said and "%28" not in said


def test_a_proxys_error_page_is_its_title_after_the_retry() -> None:
    with HtmlServer(502) as proxy:
        source = PrometheusSource(proxy.url, timeout=10, concurrency=2)
        collection = source.collect(load_profile(), {"serving": ['instance="h:8000"']}, WINDOW)
    # A 502 is retried once; the answer that ends the retries is the one quoted.
    assert proxy.requests >= 2
    assert (
        collection.prometheus_error
        == f"Prometheus at {proxy.url} is unavailable: HTTP 502: an HTML page: 502 Bad Gateway"
    )
    assert all(result.error == collection.prometheus_error for result in collection.results)


def test_a_login_page_answered_200_is_not_json_said_by_its_title() -> None:
    page = "<!doctype html><html><head><title>Sign in - Grafana</title></head><body>" + "<div></div>" * 500
    with HtmlServer(200, page + "</body></html>") as login:
        collection = PrometheusSource(login.url, timeout=10, concurrency=2).collect(
            load_profile(), {"serving": ['instance="h:8000"']}, WINDOW
        )
    assert collection.prometheus_error == (
        f"Prometheus at {login.url} is unavailable: the answer is not JSON: an HTML page: Sign in - Grafana"
    )
