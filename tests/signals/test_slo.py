"""P(TTFT SLO violation | queue depth) (rca.signals.slo) on synthetic windows with known Weibull depths."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import weibull_min

from rca.collect.profile import load_profile
from rca.collect.prometheus import Collection, Samples, SeriesResult, Window
from rca.config import ConfigError, load_file_config
from rca.signals.findings import CURRENT_MINUTES
from rca.signals.slo import (
    DEPTH_SIGNAL,
    KEY,
    MIN_VIOLATIONS,
    TTFT_SIGNAL,
    NotEnoughViolations,
    align,
    fit_weibull,
    slo_finding,
)

END = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
ALERT = END - timedelta(minutes=20)
STEP = 15
SAMPLES = 180 * 60 // STEP + 1  # a 3-hour window at 15 s, as choose_window picks it
SHAPE, SCALE = 2.2, 7.5
SPECS = {spec.id: spec for spec in load_profile().signals}


def timestamps(count: int = SAMPLES, offset: float = 0.0) -> list[float]:
    """`count` timestamps on the window's grid ending at END, shifted by `offset` seconds."""
    return [END.timestamp() - (count - 1 - i) * STEP + offset for i in range(count)]


def collection(
    depths: list[float], ttfts: list[float], depth_offset: float = 0.0, ttft_offset: float = 0.0
) -> Collection:
    depth: Samples = list(zip(timestamps(len(depths), depth_offset), depths, strict=True))
    ttft: Samples = list(zip(timestamps(len(ttfts), ttft_offset), ttfts, strict=True))
    results = [
        SeriesResult(spec=SPECS[DEPTH_SIGNAL], promql="depth_q", source="test", series=[({}, depth)]),
        SeriesResult(spec=SPECS[TTFT_SIGNAL], promql="ttft_q", source="test", series=[({}, ttft)]),
    ]
    window = Window(start=END - timedelta(minutes=180), end=END, step_seconds=STEP)
    return Collection(window=window, selectors={"serving": 'instance="x"'}, results=results)


def weibull_window(
    violations: int = 420, current: float | None = None, seed: int = 20240501
) -> tuple[list[float], list[float]]:
    """Healthy shallow queue first, then `violations` samples at Weibull(SHAPE, SCALE) depths with
    TTFT over the SLO; the last ten minutes sit at `current` if given."""
    rng = np.random.default_rng(seed)
    healthy = SAMPLES - violations
    depths = list(rng.uniform(0.0, 1.0, healthy)) + list(
        weibull_min.rvs(SHAPE, scale=SCALE, size=violations, random_state=rng)
    )
    ttfts = [0.4] * healthy + [3.0] * violations
    if current is not None:
        recent = CURRENT_MINUTES * 60 // STEP + 1
        depths[-recent:] = [current] * recent
    return depths, ttfts


# ---- the fit ----


def test_fit_recovers_a_known_shape_and_scale() -> None:
    depths = weibull_min.rvs(SHAPE, scale=SCALE, size=500, random_state=np.random.default_rng(7))
    fit = fit_weibull(depths)
    assert fit.shape == pytest.approx(SHAPE, rel=0.1)
    assert fit.scale == pytest.approx(SCALE, rel=0.1)
    assert fit.violations == 500


@pytest.mark.parametrize("seed", range(6))
def test_fit_is_scipys_maximum_likelihood_estimate(seed: int) -> None:
    """The root-finding fit lands where weibull_min.fit(floc=0) does, ties and small samples included."""
    rng = np.random.default_rng(seed)
    depths = weibull_min.rvs(
        rng.uniform(0.6, 5), scale=rng.uniform(1, 40), size=int(rng.integers(8, 200)), random_state=rng
    )
    if seed % 2:
        depths = np.round(depths) + 1  # queue depths are counts: many ties
    fit = fit_weibull(depths)
    shape, _, scale = weibull_min.fit(depths, floc=0)
    assert fit.shape == pytest.approx(shape, rel=1e-3) and fit.scale == pytest.approx(scale, rel=1e-3)
    ours = weibull_min.logpdf(depths, fit.shape, scale=fit.scale).sum()
    assert ours >= weibull_min.logpdf(depths, shape, scale=scale).sum() - 1e-6


def test_finding_reports_the_fitted_shape_and_scale_machine_readably() -> None:
    finding = slo_finding(collection(*weibull_window()), ALERT)
    labels = finding.series_labels or {}
    assert finding.key == KEY and finding.kind == "supporting" and finding.unit == "probability"
    assert float(labels["weibull_shape"]) == pytest.approx(SHAPE, rel=0.15)
    assert float(labels["weibull_scale"]) == pytest.approx(SCALE, rel=0.15)
    assert labels["violations"] == labels["fitted"] == "420"
    assert labels["slo_ttft_seconds"] == "2"
    assert "k > 1: violations accelerate with depth" in finding.detail
    assert finding.query == "depth_q\nttft_q"
    assert "weibull_min" in (finding.source or "")


def test_probability_increases_with_depth() -> None:
    fit = fit_weibull(weibull_min.rvs(SHAPE, scale=SCALE, size=200, random_state=np.random.default_rng(3)))
    grid = np.linspace(0, 30, 61)
    probabilities = fit.probabilities(grid)
    assert probabilities[0] == 0.0 and probabilities[-1] == pytest.approx(1.0)
    assert np.all(np.diff(probabilities) >= 0) and probabilities[10] < probabilities[20]
    values = [slo_finding(collection(*weibull_window(current=depth)), ALERT).value for depth in (2, 6, 10, 16)]
    assert all(v is not None for v in values)
    assert values == sorted(values) and len(set(values)) == 4


def test_probability_matches_the_weibull_cdf_at_the_current_depth() -> None:
    finding = slo_finding(collection(*weibull_window(current=9.0)), ALERT)
    labels = finding.series_labels or {}
    k, lam = float(labels["weibull_shape"]), float(labels["weibull_scale"])
    assert finding.value == pytest.approx(1 - math.exp(-((9.0 / lam) ** k)), rel=1e-4)
    assert labels["current_depth"] == "9"
    assert "P(TTFT p95 > 2 s | 9 waiting) = " in finding.detail


# ---- verdict ----


def test_deep_current_queue_is_breached_with_an_onset_and_a_low_baseline() -> None:
    finding = slo_finding(collection(*weibull_window(current=14.0)), ALERT)
    assert finding.status == "breached" and finding.breached
    assert finding.value is not None and finding.value > 0.9
    assert finding.threshold == 0.5 and finding.comparison == ">"
    assert finding.baseline is not None and finding.baseline < 0.05  # shallow queue before the guard
    assert finding.onset is not None and finding.onset <= END


def test_shallow_current_queue_is_ok_and_the_threshold_is_configurable() -> None:
    window = collection(*weibull_window(current=4.0))
    finding = slo_finding(window, ALERT)
    assert finding.status == "ok" and not finding.breached and finding.onset is None
    assert finding.value is not None and 0 < finding.value < 0.5
    strict = slo_finding(window, ALERT, threshold=finding.value / 2)
    assert strict.breached and strict.threshold == pytest.approx(finding.value / 2)


def test_the_slo_target_decides_what_counts_as_a_violation() -> None:
    depths, ttfts = weibull_window()
    finding = slo_finding(collection(depths, ttfts), ALERT, slo_seconds=5.0)  # 3 s is within a 5 s SLO
    assert finding.status == "ok" and finding.value is None
    assert "no TTFT SLO violation (TTFT p95 > 5 s)" in finding.detail


# ---- too little to fit ----


def test_no_violation_in_the_window_is_ok_and_says_so() -> None:
    finding = slo_finding(collection([3.0] * SAMPLES, [0.5] * SAMPLES), ALERT)
    assert finding.status == "ok" and not finding.breached
    assert finding.value is None and finding.baseline is None
    assert finding.detail.startswith("no TTFT SLO violation (TTFT p95 > 2 s) in the window")
    assert (finding.series_labels or {})["violations"] == "0"


def test_too_few_violations_is_unavailable_with_the_count() -> None:
    depths, ttfts = weibull_window(violations=MIN_VIOLATIONS - 1)
    finding = slo_finding(collection(depths, ttfts), ALERT)
    assert finding.status == "unavailable" and not finding.breached and finding.value is None
    assert f"only {MIN_VIOLATIONS - 1} TTFT SLO violations" in finding.detail
    assert "not enough to fit" in finding.detail
    with pytest.raises(NotEnoughViolations):
        fit_weibull([1.0, 2.0, 3.0])


def test_violations_all_at_one_depth_are_not_fitted() -> None:
    ttfts = [0.5] * (SAMPLES - 20) + [3.0] * 20
    finding = slo_finding(collection([5.0] * SAMPLES, ttfts), ALERT)
    assert finding.status == "unavailable"
    assert "20 TTFT SLO violations" in finding.detail and "same queue depth (5)" in finding.detail


def test_violations_with_an_empty_queue_are_left_out_of_the_fit() -> None:
    depths, ttfts = weibull_window(current=6.0)
    depths[:30], ttfts[:30] = [0.0] * 30, [3.0] * 30
    finding = slo_finding(collection(depths, ttfts), ALERT)
    labels = finding.series_labels or {}
    assert labels["violations"] == "450" and labels["fitted"] == "420"
    assert "30 violations with an empty queue left out" in finding.detail
    only_empty = slo_finding(collection([0.0] * SAMPLES, [3.0] * SAMPLES), ALERT)
    assert only_empty.status == "unavailable" and "only 0 at a non-zero queue depth" in only_empty.detail


# ---- alignment and robustness ----


def test_timestamps_off_the_grid_still_pair_with_the_nearest_sample() -> None:
    depths, ttfts = weibull_window(current=8.0)
    aligned = slo_finding(collection(depths, ttfts), ALERT)
    shifted = slo_finding(collection(depths, ttfts, depth_offset=STEP / 3), ALERT)
    assert shifted.status == aligned.status and shifted.value == pytest.approx(aligned.value)
    assert shifted.series_labels == aligned.series_labels


def test_align_drops_samples_without_a_depth_nearby() -> None:
    depth = [(0.0, 1.0), (15.0, 2.0), (60.0, 5.0)]
    ttft = [(1.0, 0.1), (14.0, 0.2), (30.0, 3.0), (38.0, 3.5), (61.0, 4.0)]
    assert align(depth, ttft, tolerance=7.5) == [(1.0, 1.0, 0.1), (14.0, 2.0, 0.2), (61.0, 5.0, 4.0)]
    assert align([], ttft, tolerance=7.5) == [] and align(depth, [], tolerance=7.5) == []


def test_series_that_never_line_up_are_unavailable() -> None:
    depths, ttfts = weibull_window()
    finding = slo_finding(collection(depths, ttfts, ttft_offset=-STEP * SAMPLES), ALERT)
    assert finding.status == "unavailable" and "lines up" in finding.detail


def test_nan_and_inf_samples_never_reach_the_result() -> None:
    depths, ttfts = weibull_window(current=7.0)
    depths[100], depths[-1], ttfts[200], ttfts[-5] = math.nan, math.inf, math.nan, -math.inf
    finding = slo_finding(collection(depths, ttfts), ALERT)
    assert finding.status in ("ok", "breached")
    numbers = [finding.value, finding.baseline, *(float(v) for v in (finding.series_labels or {}).values())]
    assert all(n is not None and math.isfinite(n) for n in numbers)
    assert "nan" not in finding.detail.lower() and "inf" not in finding.detail.lower()


# ---- missing inputs ----


def test_unavailable_inputs_make_an_unavailable_finding_naming_the_reason() -> None:
    window = collection(*weibull_window())
    window.results[1] = SeriesResult(spec=SPECS[TTFT_SIGNAL], promql="ttft_q", error="query failed: boom")
    finding = slo_finding(window, ALERT)
    assert finding.status == "unavailable" and finding.value is None
    assert finding.detail == "data unavailable: ttft_p95: query failed: boom"
    assert finding.query == "depth_q\nttft_q"


def test_an_input_not_measurable_on_the_stack_propagates() -> None:
    window = collection(*weibull_window())
    window.results[0] = SeriesResult(
        spec=SPECS[DEPTH_SIGNAL],
        not_measurable=True,
        error="not measurable on this stack (x): it exports no source for this signal",
    )
    finding = slo_finding(window, ALERT)
    assert finding.status == "not_measurable" and "queue_median: not measurable" in finding.detail


def test_a_profile_without_the_inputs_is_unavailable() -> None:
    window = collection(*weibull_window())
    window.results = window.results[:1]
    finding = slo_finding(window, ALERT)
    assert finding.status == "unavailable" and "no ttft_p95 signal" in finding.detail


# ---- config ----


def test_config_file_sets_the_slo_and_rejects_a_non_positive_one(tmp_path: Path) -> None:
    path = tmp_path / "rca.yaml"
    assert load_file_config(None).slo_ttft_seconds == 2.0
    assert load_file_config(None).slo_probability_threshold == 0.5
    path.write_text("slo_ttft_seconds: 1.5\nslo_probability_threshold: 0.7\n")
    config = load_file_config(path)
    assert (config.slo_ttft_seconds, config.slo_probability_threshold) == (1.5, 0.7)
    for bad in (
        "slo_ttft_seconds: 0",
        "slo_ttft_seconds: -1",
        "slo_ttft_seconds: .nan",
        "slo_probability_threshold: 1.5",
    ):
        path.write_text(bad + "\n")
        with pytest.raises(ConfigError, match=bad.split(":")[0]):
            load_file_config(path)
