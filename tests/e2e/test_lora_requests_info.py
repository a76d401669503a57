"""`requests_deferred` without vLLM 0.34's `num_requests_waiting_by_reason`, from
`vllm:lora_requests_info` on a real Prometheus: backfilled history and a live exporter whose stale
label sets stay exported with the time they last held (tests/e2e/lora.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from rca.collect.profile import load_profile
from rca.collect.target import target_from_alerts
from rca.config import ScopeConfig, Settings
from rca.pipeline import analyse
from rca.scan.queries import FLEET_SELECTORS, per_instance
from tests.e2e import promstack
from tests.e2e.scenarios import LORA_HOST, MODEL, Fleet, Host

pytestmark = pytest.mark.e2e
FALLBACK = "vLLM waiting requests while lora_requests_info shows an adapter waiting for a full adapter budget"
LITTLES_LAW = (
    "vLLM mean waiting requests (queue-time histogram, Little's law) while lora_requests_info shows an adapter "
    "waiting for a full adapter budget"
)
BUDGET_NOT_FULL = (("max_loras", 4.0), ("adapters", 2.0))
BUDGET_FILLED_EXACTLY = (("max_loras", 2.0), ("adapters", 2.0))
# Before the onset 4 adapters want a budget of 2: 3 requests wait for it, 6 in all; after it the
# traffic uses 2 adapters and nothing waits.
DEFERRED_THEN_DRAINED = (("max_loras", 2.0), ("adapters", 4.0), ("deferred", 3.0), ("waiting", 6.0))
DRAINED = (("adapters", 2.0), ("deferred", 0.0), ("waiting", 0.2))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("lora")
    now = time.time()
    onset = now - 20 * 60
    fleet = Fleet(
        [
            Host("lora-full", "lora_adapter_loading", onset, stack="vllm_v08", normal=LORA_HOST),
            Host("lora-room", "arrival_surge", onset, stack="vllm_v08", normal=BUDGET_NOT_FULL),
            Host("lora-exact", "arrival_surge", onset, stack="vllm_v08", normal=BUDGET_FILLED_EXACTLY),
            Host("lora-stale", None, onset, stack="vllm_v08", normal=DEFERRED_THEN_DRAINED, extra=DRAINED),
            Host("lora-wide", "lora_adapter_loading", onset, stack="vllm_v08", normal=(("max_loras", 16.0),)),
            Host(
                "lora-keep",
                "lora_adapter_loading",
                onset,
                normal=LORA_HOST,
                dropped=frozenset({"vllm:num_requests_waiting_by_reason"}),
            ),
            Host("lora-v1", "lora_adapter_loading", onset, normal=LORA_HOST),
            Host(
                "lora-nowait",
                "lora_adapter_loading",
                onset,
                stack="vllm_v08",
                normal=LORA_HOST,
                dropped=frozenset({"vllm:num_requests_waiting"}),
            ),
            Host("v0-off", None, onset, stack="vllm_v0"),
        ],
        start=now - 3 * 3600 - 15 * 60,
    )
    with promstack.fleet_prometheus(fleet, now, workdir, settle=6) as url:  # a live scrape or two
        yield url


def _analyse(url: str, host: str) -> dict:
    """The alert carries `model_name`, which `vllm:lora_requests_info` does not."""
    labels = {"instance": f"{host}:8000", "model_name": MODEL, "job": "vllm"}
    target = target_from_alerts([labels], [datetime.now(UTC) - timedelta(minutes=1)], ScopeConfig())
    analysis = analyse(Settings(prometheus_url=url), target)
    return {"findings": {f.key: f for f in analysis.findings}, "top": analysis.hypotheses[0].category}


def _instant(url: str, promql: str) -> list[dict]:
    response = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10)
    response.raise_for_status()
    return response.json()["data"]["result"]


def test_a_full_adapter_budget_with_adapters_waiting_counts_every_waiting_request(prometheus: str) -> None:
    result = _analyse(prometheus, "lora-full")
    deferred = result["findings"]["requests_deferred"]
    assert deferred.source == FALLBACK, deferred.detail
    assert deferred.breached and deferred.value == pytest.approx(8.0, rel=0.3)
    assert deferred.baseline == 0  # before the onset 3 adapters left room in the budget of 4
    assert result["top"] == "lora_adapter_loading"


@pytest.mark.parametrize("host", ["lora-room", "lora-exact"])
def test_a_capacity_queue_counts_nothing_whether_or_not_its_adapters_fill_the_budget(
    prometheus: str, host: str
) -> None:
    """A surge queues requests of running adapters: with room in the budget, or with the adapters
    in use filling it exactly, no adapter waits for the budget."""
    result = _analyse(prometheus, host)
    deferred = result["findings"]["requests_deferred"]
    assert deferred.source == FALLBACK
    assert deferred.status == "ok" and deferred.value == 0
    assert result["findings"]["queue_median"].breached and result["top"] == "arrival_surge"


def test_a_stale_label_set_with_an_older_time_is_ignored(prometheus: str) -> None:
    sets = _instant(prometheus, 'vllm:lora_requests_info{instance="lora-stale:8000"}')
    # Prometheus stores an empty label as none: the set with no adapter waiting has no such label.
    waiting = {s["metric"].get("waiting_lora_adapters", ""): float(s["value"][1]) for s in sets}
    assert "tenant-3,tenant-4,tenant-1" in waiting  # still exported: set before the onset and in its ramp
    assert all(set_at < waiting[""] - 10 * 60 for names, set_at in waiting.items() if names)
    deferred = _analyse(prometheus, "lora-stale")["findings"]["requests_deferred"]
    assert deferred.source == FALLBACK
    assert deferred.baseline == pytest.approx(6.0, rel=0.3)  # counted while it was the latest
    assert deferred.status == "ok" and deferred.value == 0


def test_a_budget_beyond_the_enumerated_ones_gives_no_data_rather_than_a_false_zero(prometheus: str) -> None:
    deferred = _analyse(prometheus, "lora-wide")["findings"]["requests_deferred"]
    assert deferred.status == "unavailable", deferred.detail


def test_v0_with_lora_off_measures_no_adapter_waits(prometheus: str) -> None:
    deferred = _analyse(prometheus, "v0-off")["findings"]["requests_deferred"]
    assert deferred.source == FALLBACK
    assert deferred.status == "ok" and deferred.value == 0


def test_the_reasons_gauge_comes_first_and_lora_info_stands_in_when_a_keep_list_drops_it(prometheus: str) -> None:
    with_reasons = _analyse(prometheus, "lora-v1")["findings"]["requests_deferred"]
    assert with_reasons.source == 'vLLM waiting requests with reason "deferred"'
    kept = _analyse(prometheus, "lora-keep")
    deferred = kept["findings"]["requests_deferred"]
    assert deferred.source == FALLBACK, deferred.detail
    assert deferred.breached and deferred.value > with_reasons.value  # every waiting request, not only the deferred
    assert kept["top"] == "lora_adapter_loading"


def test_without_the_waiting_gauge_the_queue_time_histogram_counts_them(prometheus: str) -> None:
    """A keep-list that drops `vllm:num_requests_waiting` leaves both the count (Little's law over
    the queue-time histogram) and the instance join (the target's other vLLM series)."""
    result = _analyse(prometheus, "lora-nowait")
    deferred = result["findings"]["requests_deferred"]
    assert deferred.source == LITTLES_LAW, deferred.detail
    assert deferred.breached and deferred.value > 4 and deferred.baseline == 0
    assert result["top"] == "lora_adapter_loading"


def test_the_fleet_rewrite_gives_each_instance_its_own_value(prometheus: str) -> None:
    spec = next(s for s in load_profile().signals if s.id == "requests_deferred")
    alternative = next(a for a in spec.queries if a.source == FALLBACK)
    promql = per_instance(alternative.render({"serving": FLEET_SELECTORS["serving"]}))
    values = {s["metric"]["instance"]: float(s["value"][1]) for s in _instant(prometheus, promql)}
    assert values["lora-full:8000"] > 4 and values["lora-keep:8000"] > 4
    assert values["lora-room:8000"] == values["lora-exact:8000"] == values["lora-stale:8000"] == 0
    assert values["v0-off:8000"] == 0
    assert "lora-wide:8000" not in values
