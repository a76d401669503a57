"""Deterministic ranking of causes from findings (rca.diagnosis.ranking), rules from taxonomy.yaml."""

from __future__ import annotations

import functools
import random
from datetime import UTC, datetime, timedelta

import pytest

from rca.collect.profile import load_profile
from rca.config.files import DEFAULT_TRACE_GROUPS
from rca.diagnosis.ranking import LEAD_BONUS, MAX_CONFIDENCE, NO_CLEAR_CAUSE, UNDECIDED_FACTOR, symptoms, taxonomy
from rca.diagnosis.ranking import rank as calibrated_rank
from rca.domain.evidence import Finding, Hypothesis
from tests.helpers import factories
from tests.helpers.paths import REPO

PROFILE = load_profile()
# Profile signals plus the trace findings the taxonomy may cite (rca/traces/findings.py).
KINDS = {s.id: s.kind for s in PROFILE.signals} | dict.fromkeys(DEFAULT_TRACE_GROUPS, "trace")
SIGNALS = [s.id for s in PROFILE.signals if s.kind == "signal"]
CAUSES = [name for name in taxonomy() if name != NO_CLEAR_CAUSE]
# The scoring rules give raw strengths; their calibration is tests/diagnosis/test_calibration.py's.
rank = functools.partial(calibrated_rank, calibrated=False)


def finding(key: str, breached: bool = False, unavailable: bool = False) -> Finding:
    status = "unavailable" if unavailable else ("breached" if breached else "ok")
    unmeasured = {"value": None, "baseline": None} if unavailable else {}
    return factories.finding(key, status=status, kind=KINDS.get(key, "supporting"), title=key, **unmeasured)


def findings(breached: set[str] = frozenset(), unavailable: set[str] = frozenset()) -> list[Finding]:
    """One finding per profile signal, as the pipeline produces them."""
    return [finding(key, key in breached, key in unavailable) for key in KINDS]


def by_category(hypotheses: list[Hypothesis]) -> dict[str, Hypothesis]:
    return {h.category: h for h in hypotheses}


def expected_confidence(category: str, breached: set[str], unavailable: set[str] = frozenset()) -> float:
    """docs/diagnosis.md's formula, written out independently of the implementation."""
    cat = taxonomy()[category]
    support = sum(w for k, w in cat.supports.items() if k in breached)
    contradiction = sum(w for k, w in cat.contradicts.items() if k in breached)
    weights = {
        k: w for k, w in (cat.supports | cat.contradicts).items() if KINDS.get(k) != "trace" or k not in unavailable
    }  # unread traces are not missed evidence
    coverage = sum(w for k, w in weights.items() if k in KINDS and k not in unavailable) / sum(weights.values())
    # Complete evidence: `full_at` or every support, but no more than the supports the stack and the
    # deployment can show (these findings are all measurable: unavailable is missing data, not that).
    observable = sum(w for k, w in cat.supports.items() if k in KINDS)
    full = min(cat.full_at or sum(cat.supports.values()), observable) or sum(cat.supports.values())
    if any(k in KINDS and k not in unavailable and k not in breached for k in cat.decided_by):
        return 0.0  # its deciding finding was measured and did not move
    # Each look-alike whose deciding findings this cause counts against itself but were not measured.
    undecided = [
        other
        for other, o in taxonomy().items()
        if other != category
        and any(k in cat.contradicts and (k in unavailable or k not in KINDS) for k in o.decided_by)
    ]
    strength = max(0.0, min(1.0, support / full) - contradiction / full)
    return MAX_CONFIDENCE * strength * (0.6 + 0.4 * coverage) * UNDECIDED_FACTOR ** len(undecided)


# ---- the taxonomy itself ----


def test_taxonomy_has_no_clear_cause_and_causes() -> None:
    assert NO_CLEAR_CAUSE in taxonomy()
    assert CAUSES


@pytest.mark.parametrize("name", CAUSES)
def test_taxonomy_category_is_well_formed(name: str) -> None:
    cat = taxonomy()[name]
    assert cat.anchors, "a cause without anchors can never be a candidate"
    assert cat.anchor_keys() <= set(cat.supports), "an anchor must also be supporting evidence"
    assert not set(cat.supports) & set(cat.contradicts)
    assert all(w > 0 for w in [*cat.supports.values(), *cat.contradicts.values()])
    referenced = set(cat.supports) | set(cat.contradicts)
    assert referenced <= set(KINDS), f"unknown finding ids {referenced - set(KINDS)}"
    assert cat.next_steps


def _weights(cell: str) -> dict[str, float]:
    pairs = [item.split() for item in cell.split(", ")] if cell != "—" else []
    return {key.strip("`"): float(weight) for key, weight in pairs}


def test_the_taxonomy_table_in_docs_is_the_taxonomy() -> None:
    rows = {}
    for line in (REPO / "docs" / "diagnosis.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0].strip("`") in taxonomy():
            rows[cells[0].strip("`")] = cells
    assert set(rows) == set(taxonomy())
    for name in CAUSES:
        cat, (_, _, anchors, supports, contradicts) = taxonomy()[name], rows[name]
        assert anchors.replace("`", "") == cat.describe_anchors(), f"{name}: run tools/taxonomy_table.py"
        assert _weights(supports) == cat.supports, name
        assert _weights(contradicts) == cat.contradicts, name


# ---- nothing breached ----


def test_nothing_breached_with_signals_measured_means_no_clear_cause_with_confidence() -> None:
    result = rank(findings())
    assert [h.category for h in result] == [NO_CLEAR_CAUSE]
    assert result[0].rank == 1
    assert result[0].confidence >= 0.5
    assert set(result[0].evidence) == set(SIGNALS)  # the healthy signals are its evidence


def test_nothing_breached_with_most_signals_unavailable_is_not_confident() -> None:
    missing = set(SIGNALS[:-1])
    result = rank(findings(unavailable=missing))
    assert result[0].category == NO_CLEAR_CAUSE
    assert result[0].confidence < 0.5
    assert all(key in result[0].explanation for key in missing)
    assert result[0].evidence == [SIGNALS[-1]]


def test_breached_findings_that_anchor_no_cause_leave_no_clear_cause_unsure() -> None:
    result = rank(findings(breached={"itl_p95"}))  # supports several causes, anchors none
    assert [h.category for h in result] == [NO_CLEAR_CAUSE]
    assert result[0].confidence < 0.5
    assert "itl_p95" in result[0].explanation


def test_something_moved_that_no_cause_explains_is_never_a_confident_all_clear() -> None:
    [doubt] = calibrated_rank(findings(breached={"itl_p95"}))
    assert doubt.category == NO_CLEAR_CAUSE and doubt.confidence <= 0.45
    assert calibrated_rank(findings())[0].confidence > 0.45  # a calm host is another matter


# ---- each cause, given its own evidence ----


@pytest.mark.parametrize("name", CAUSES)
def test_cause_ranks_first_given_its_anchor_and_supporting_evidence(name: str) -> None:
    breached = set(taxonomy()[name].supports)
    result = rank(findings(breached=breached))
    assert result[0].category == name
    assert result[0].confidence == pytest.approx(MAX_CONFIDENCE)
    assert result[0].evidence == list(taxonomy()[name].supports)
    assert result[-1].category == NO_CLEAR_CAUSE


@pytest.mark.parametrize("name", CAUSES)
def test_cause_is_not_a_candidate_without_a_breached_anchor(name: str) -> None:
    cat = taxonomy()[name]
    # Every supporting finding but one of each anchor: no anchor holds.
    breached = set(cat.supports) - {min(anchor) for anchor in cat.anchor_sets()}
    assert not cat.held_anchors(breached)
    assert name not in by_category(rank(findings(breached=breached), limit=len(taxonomy()) + 1))


@pytest.mark.parametrize("name", CAUSES)
def test_cause_with_only_an_anchor_scores_its_share_of_the_weights(name: str) -> None:
    anchor = set(taxonomy()[name].anchor_sets()[0])
    result = by_category(rank(findings(breached=anchor), limit=len(taxonomy()) + 1))
    expected = expected_confidence(name, anchor)
    assert result[name].confidence == pytest.approx(expected, abs=1e-3)
    assert result[name].confidence < MAX_CONFIDENCE


# ---- contradictions ----


def test_preemptions_and_full_kv_cache_put_memory_pressure_above_cache_misses() -> None:
    breached = {"prefix_cache_hit_rate", "preemption_rate", "kv_cache_usage"}
    result = rank(findings(breached=breached), limit=len(taxonomy()) + 1)
    order = [h.category for h in result]
    assert order[0] == "kv_memory_pressure"
    if "prefix_cache_miss" in order:
        assert order.index("prefix_cache_miss") > order.index("kv_memory_pressure")


@pytest.mark.parametrize("name", [n for n in CAUSES if taxonomy()[n].contradicts])
def test_breached_contradiction_lowers_a_cause(name: str) -> None:
    cat = taxonomy()[name]
    support = set(cat.supports)
    against = next(iter(cat.contradicts))
    without = by_category(rank(findings(breached=support), limit=len(taxonomy()) + 1))
    with_it = by_category(rank(findings(breached=support | {against}), limit=len(taxonomy()) + 1))
    assert name in without
    expected = expected_confidence(name, support | {against})
    assert expected < without[name].confidence
    if expected > 0:
        assert with_it[name].confidence == pytest.approx(expected, abs=1e-3)
        assert with_it[name].contradicting == [against]
        assert "Against it" in with_it[name].explanation
    else:
        assert name not in with_it  # ruled out


def test_contradictions_can_rule_a_cause_out() -> None:
    cat = taxonomy()["cpu_launch_overhead"]
    breached = set(cat.anchor_keys()) | set(cat.contradicts)
    assert expected_confidence("cpu_launch_overhead", breached) == 0
    assert "cpu_launch_overhead" not in by_category(rank(findings(breached=breached), limit=len(taxonomy()) + 1))


# ---- evidence and structure ----


def test_evidence_lists_only_breached_supporting_findings_that_exist() -> None:
    cat = taxonomy()["prefill_blocking"]
    present = [f for f in findings(breached=set(cat.supports) | {"gpu_temperature"}) if f.key != "itl_p95"]
    result = by_category(rank(present))
    hypothesis = result["prefill_blocking"]
    breached_present = {f.key for f in present if f.breached}
    assert set(hypothesis.evidence) == set(cat.supports) & breached_present
    assert "itl_p95" not in hypothesis.evidence
    assert "gpu_temperature" not in hypothesis.evidence


def test_ok_and_unavailable_supporting_findings_are_not_evidence() -> None:
    result = by_category(rank(findings(breached={"kv_cache_usage", "queue_median"}, unavailable={"preemption_rate"})))
    assert result["kv_memory_pressure"].evidence == ["kv_cache_usage", "queue_median"]


def random_cases(count: int = 200) -> list[tuple[set[str], set[str]]]:
    rng = random.Random(7)
    keys = list(KINDS)
    cases = []
    for _ in range(count):
        breached = {k for k in keys if rng.random() < 0.3}
        unavailable = {k for k in keys if k not in breached and rng.random() < 0.2}
        cases.append((breached, unavailable))
    return cases


def test_ranking_invariants_hold_for_many_finding_sets() -> None:
    for breached, unavailable in random_cases():
        result = rank(findings(breached, unavailable))
        assert [h.rank for h in result] == list(range(1, len(result) + 1))
        assert 1 <= len(result) <= 5
        assert [h.category for h in result].count(NO_CLEAR_CAUSE) == 1
        assert all(0.0 <= h.confidence <= 1.0 for h in result)
        causes = [h for h in result if h.category != NO_CLEAR_CAUSE]
        assert [h.confidence for h in causes] == sorted((h.confidence for h in causes), reverse=True)
        doubt = next(h for h in result if h.category == NO_CLEAR_CAUSE)
        assert all(h.confidence > doubt.confidence for h in result[: doubt.rank - 1])
        assert all(h.confidence <= doubt.confidence for h in result[doubt.rank :])
        for h in causes:
            cat = taxonomy()[h.category]
            assert cat.held_anchors(breached)
            assert set(h.evidence) <= set(cat.supports) & breached
            assert h.confidence == pytest.approx(expected_confidence(h.category, breached, unavailable), abs=1e-3)


def test_no_clear_cause_trails_a_found_cause_with_the_remaining_doubt() -> None:
    result = rank(findings(breached=set(taxonomy()["arrival_surge"].supports)))
    top, last = result[0], result[-1]
    assert last.category == NO_CLEAR_CAUSE
    assert last.confidence == pytest.approx(max(0.05, (1 - top.confidence) / 3), abs=1e-3)


def test_a_symptom_alone_makes_no_cause_a_candidate() -> None:
    # Only TTFT is high: every cause moves it, so it points at none of them.
    result = rank(findings(breached={"ttft_p95"}))
    assert [h.category for h in result] == [NO_CLEAR_CAUSE]
    assert result[0].confidence <= 0.4 and "ttft_p95" in result[0].explanation


def test_a_cause_weaker_than_the_remaining_doubt_ranks_below_no_clear_cause() -> None:
    # DRAM busier, with the compute ratio, ITL and the look-alikes' signals all unmeasured: a thin case.
    blind = {"gpu_compute_to_memory", "itl_p95", "sm_clock", "xid_errors", "request_rate"}
    result = rank(findings(breached={"dram_active"}, unavailable=blind))
    assert [h.category for h in result] == [NO_CLEAR_CAUSE, "memory_bandwidth_bound"]
    assert result[1].confidence <= result[0].confidence


def test_unmeasured_look_alikes_lower_confidence_and_are_named() -> None:
    # CPU-bound cores with no GPU or serving data: eager-mode launches cannot be told from PCIe sync.
    breached = {"cpu_bound_ratio"}
    full = by_category(rank(findings(breached=breached)))["cpu_launch_overhead"]
    blind = {"pcie_traffic", "gpu_utilization", "itl_p95", "request_rate"}
    partial = by_category(rank(findings(breached=breached, unavailable=blind)))["cpu_launch_overhead"]
    assert partial.confidence < full.confidence
    assert partial.confidence < 0.5
    assert "Not measured: gpu_utilization, itl_p95" in partial.explanation


def with_onsets(items: list[Finding], onsets: dict[str, int]) -> list[Finding]:
    """Give breached findings onsets, in minutes after 10:00 UTC."""
    base = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
    for f in items:
        if f.key in onsets:
            f.onset = base + timedelta(minutes=onsets[f.key])
    return items


def test_the_cause_that_moved_first_gets_the_lead_bonus_and_the_follower_a_penalty() -> None:
    # A throttled container and host-side copies: which broke first decides between two causes
    # (ITL, a symptom both slow, dates neither).
    breached = {"cpu_throttling", "pcie_traffic", "itl_p95"}
    together = by_category(rank(with_onsets(findings(breached), {"cpu_throttling": 0, "pcie_traffic": 2})))
    quota_first = by_category(
        rank(with_onsets(findings(breached), {"cpu_throttling": 0, "pcie_traffic": 5, "itl_p95": 1}))
    )
    quota, sync = quota_first["cpu_quota_throttling"], quota_first["host_device_sync"]
    assert quota.score == together["cpu_quota_throttling"].score + LEAD_BONUS and "moved first" in quota.explanation
    assert sync.score == together["host_device_sync"].score - LEAD_BONUS
    assert "moved 5 min after cpu_quota_throttling's" in sync.explanation
    assert quota.rank < sync.rank


def test_a_cause_whose_signals_moved_in_its_order_is_not_held_to_a_look_alikes_signs() -> None:
    # Prefix misses fill the cache until it preempts; a full cache evicts prefixes only once it
    # overflows. The same findings, in the two orders.
    breached = {"kv_cache_usage", "preemption_rate", "prefix_cache_hit_rate", "ttft_p95"}
    kv_onsets = {"kv_cache_usage": 0, "preemption_rate": 1, "prefix_cache_hit_rate": 1, "ttft_p95": 2}
    miss_onsets = {"kv_cache_usage": 1, "preemption_rate": 2, "prefix_cache_hit_rate": 0, "ttft_p95": 1}
    kv_first = by_category(rank(with_onsets(findings(breached), kv_onsets)))
    miss_first = by_category(rank(with_onsets(findings(breached), miss_onsets)))
    # Misses first: the cache's filling and preemptions are their consequences, not a look-alike's
    # signs; and a hit rate that fell before the preemptions was not evicted.
    miss, kv = miss_first["prefix_cache_miss"], miss_first["kv_memory_pressure"]
    assert miss.contradicting == [] and miss.rank < kv.rank
    assert "prefix_cache_hit_rate" not in kv.evidence
    assert "Out of this cause's order: prefix_cache_hit_rate moved before preemption_rate" in kv.explanation
    # Pressure first: the misses came with the preemptions (evictions), and the cache had filled
    # and preempted before the hit rate fell, which is not how misses present.
    assert kv_first["kv_memory_pressure"].rank == 1
    assert "prefix_cache_hit_rate" in kv_first["kv_memory_pressure"].evidence
    assert "prefix_cache_miss" not in kv_first or kv_first["prefix_cache_miss"].confidence < miss.confidence


def test_signals_a_scrape_apart_say_nothing_of_order() -> None:
    breached = {"kv_cache_usage", "preemption_rate", "prefix_cache_hit_rate", "ttft_p95"}
    base = findings(breached)
    near = with_onsets(findings(breached), dict.fromkeys(breached, 0) | {"prefix_cache_hit_rate": 0})
    near[[f.key for f in near].index("preemption_rate")].onset += timedelta(seconds=15)
    assert [(h.category, h.score) for h in rank(near)] == [(h.category, h.score) for h in rank(base)]


@pytest.mark.parametrize("gap", [0, 2])
def test_no_lead_bonus_when_onsets_are_close(gap: int) -> None:
    breached = {"cpu_throttling", "pcie_traffic"}
    items = with_onsets(findings(breached), {"cpu_throttling": 0, "pcie_traffic": gap})
    assert all("moved first" not in h.explanation and " min after " not in h.explanation for h in rank(items))
    assert rank(items) == rank(findings(breached))


def test_limit_one_keeps_only_no_clear_cause_but_its_doubt_reflects_the_causes() -> None:
    breached = set(taxonomy()["gpu_degraded"].supports)
    full = rank(findings(breached=breached))
    only = rank(findings(breached=breached), limit=1)
    assert [h.category for h in only] == [NO_CLEAR_CAUSE]
    assert only[0].confidence == full[-1].confidence
    assert only[0].confidence < 0.5


def test_limit_caps_the_number_of_hypotheses() -> None:
    breached = {"queue_median", "ttft_p95", "requests_deferred", "prefix_cache_hit_rate", "kv_cache_usage"}
    assert len(rank(findings(breached=breached), limit=3)) == 3


def test_same_findings_give_the_same_ranking() -> None:
    for breached, unavailable in random_cases(30):
        items = findings(breached, unavailable)
        assert [h.to_dict() for h in rank(items)] == [h.to_dict() for h in rank(list(items))]


def comparable(hypothesis: Hypothesis) -> dict:
    data = hypothesis.to_dict()
    if hypothesis.category == NO_CLEAR_CAUSE:  # its healthy-signal list follows the input order
        data["evidence"] = sorted(data["evidence"])
    return data


def test_ranking_does_not_depend_on_the_order_of_findings() -> None:
    for breached, unavailable in random_cases(30):
        items = findings(breached, unavailable)
        shuffled = list(items)
        random.Random(len(breached)).shuffle(shuffled)
        assert [comparable(h) for h in rank(shuffled)] == [comparable(h) for h in rank(items)]


def test_symptoms_are_known_findings_and_never_a_cause_of_their_own() -> None:
    assert symptoms() and symptoms() <= set(KINDS)
    for name in CAUSES:
        for anchor in taxonomy()[name].anchor_sets():
            assert anchor - symptoms(), f"{name}: the anchor {sorted(anchor)} is only symptoms"


def test_full_at_lets_one_of_alternative_anchors_reach_full_strength() -> None:
    # Thermal throttling with the clock drop it causes, no XID error: a complete case of a degraded GPU.
    cat = taxonomy()["gpu_degraded"]
    assert cat.full_at is not None and cat.full_at < sum(cat.supports.values())
    result = by_category(rank(findings(breached={"gpu_throttle_reasons", "sm_clock", "itl_p95"})))
    assert result["gpu_degraded"].confidence == pytest.approx(MAX_CONFIDENCE, abs=1e-3)


def _chronic(items: list[Finding], key: str) -> list[Finding]:
    for f in items:
        if f.key == key:
            f.baseline = None  # no healthy sample in the window: `chronic`
            assert f.chronic
    return items


def test_an_anchor_breached_all_along_makes_no_cause_a_candidate() -> None:
    # A busy engine whose KV cache has sat above 92 % for three hours, with nothing else breached.
    result = rank(_chronic(findings(breached={"kv_cache_usage"}), "kv_cache_usage"))
    assert [h.category for h in result] == [NO_CLEAR_CAUSE]
    assert "kv_cache_usage" in result[0].explanation


def test_a_breach_that_was_there_all_along_counts_half() -> None:
    # Preemptions just started on a cache that has run full all window: the full cache still counts, half.
    breached = {"kv_cache_usage", "preemption_rate"}
    fresh = by_category(rank(findings(breached=breached)))["kv_memory_pressure"]
    chronic = by_category(rank(_chronic(findings(breached=breached), "kv_cache_usage")))["kv_memory_pressure"]
    weights = taxonomy()["kv_memory_pressure"].supports
    assert fresh.score - chronic.score == weights["kv_cache_usage"] / 2


def test_a_chronic_breach_never_leads() -> None:
    items = with_onsets(
        findings({"kv_cache_usage", "prefix_cache_hit_rate"}), {"kv_cache_usage": 0, "prefix_cache_hit_rate": 30}
    )
    for f in items:
        if f.key == "kv_cache_usage":
            f.baseline = None
    assert all("moved first" not in h.explanation for h in rank(items))


def test_batching_held_requests_with_an_idle_gpu_is_found_without_a_long_queue() -> None:
    # An independently built fleet's batching misconfiguration: queue time p95 x35, GPU utilisation
    # 87 % -> 35 %, running batch 48 -> 10, but a median of 3 waiting requests (under 4.7).
    breached = {"queue_time_p95", "gpu_utilization", "running_batch", "ttft_p95"}
    result = rank(findings(breached=breached))
    assert result[0].category == "batching_misconfig"
    assert result[0].confidence >= 0.5


def test_a_surge_that_fills_the_kv_cache_is_the_surge() -> None:
    # Demand up 2.5x: the queue, KV usage and preemptions follow. KV pressure is its consequence.
    breached = {"request_rate", "queue_median", "kv_cache_usage", "preemption_rate", "queue_time_p95", "ttft_p95"}
    result = by_category(rank(findings(breached=breached), limit=len(taxonomy()) + 1))
    assert rank(findings(breached=breached))[0].category == "arrival_surge"
    assert result["kv_memory_pressure"].confidence < result["arrival_surge"].confidence
    assert "request_rate" in result["kv_memory_pressure"].contradicting
