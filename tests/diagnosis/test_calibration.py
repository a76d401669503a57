"""Calibration of the ranking's confidence (rca.diagnosis.calibration) and its fitting command."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from rca.diagnosis.calibration import Calibration, Curve, fit
from rca.diagnosis.ranking import NO_CLEAR_CAUSE, TAXONOMY_FILE, calibration, rank
from tests.diagnosis.test_ranking import findings
from tools.fit_calibration import MARKER, render, write


def test_a_curve_interpolates_between_its_knots_and_holds_its_ends() -> None:
    curve = Curve(raw=[0.2, 0.6], right=[0.4, 0.8])
    assert curve(0.4) == pytest.approx(0.6)
    assert curve(0.0) == pytest.approx(0.4) and curve(1.0) == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("raw", "right", "why"),
    [
        ([0.5, 0.4], [0.1, 0.2], "raw must increase"),
        ([0.1, 0.2], [0.9, 0.3], "must not decrease"),
        ([0.1, 0.2, 0.3], [0.1, 0.2], "same length"),
        ([0.1, 1.5], [0.1, 0.2], r"\[0, 1\]"),
    ],
)
def test_a_curve_that_is_not_a_monotone_map_is_refused(raw: list[float], right: list[float], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        Curve(raw=raw, right=right)


def test_the_fit_is_monotone_and_follows_how_often_answers_were_right() -> None:
    rng = random.Random(3)
    points = []
    for _ in range(4000):
        raw = rng.random()
        points.append((raw, rng.random() < 0.2 + 0.7 * raw))  # right 20 % at raw 0, 90 % at raw 1
    curve = fit(points)
    assert curve.right == sorted(curve.right) and curve.raw == sorted(curve.raw)
    assert curve.right[0] > 0 and curve.right[-1] < 1  # never certain either way
    assert curve(0.1) == pytest.approx(0.27, abs=0.06)
    assert curve(0.9) == pytest.approx(0.83, abs=0.06)


def test_the_fit_keeps_discrete_strengths_apart() -> None:
    # Two raw values only, as `no_clear_cause` has: each keeps its own share right.
    points = [(0.4, i % 2 == 0) for i in range(80)] + [(0.8, i % 50 != 0) for i in range(300)]
    curve = fit(points)
    assert curve(0.4) == pytest.approx(41 / 82, abs=1e-3)
    assert curve(0.8) == pytest.approx(295 / 302, abs=1e-3)


def test_the_shipped_calibration_was_fitted_on_tuning_seeds() -> None:
    fitted = calibration()
    assert fitted.fitted_on.startswith("tuning seeds 0-")
    assert fitted.cause.right == sorted(fitted.cause.right)


def test_calibrated_confidences_read_as_one_distribution_in_the_raw_order() -> None:
    rng = random.Random(11)
    keys = [f.key for f in findings()]
    for _ in range(300):
        breached = set(rng.sample(keys, rng.randint(1, 8)))
        raw, calibrated = rank(findings(breached), calibrated=False), rank(findings(breached))
        assert [h.category for h in calibrated if h.category != NO_CLEAR_CAUSE] == [
            h.category for h in raw if h.category != NO_CLEAR_CAUSE
        ]
        assert sum(h.confidence for h in calibrated) <= 1.0 + 1e-3 * len(calibrated)
        assert all(h.confidence <= calibrated[0].confidence for h in calibrated)


def test_fitting_rewrites_only_the_calibration_section(tmp_path: Path) -> None:
    copy = tmp_path / "taxonomy.yaml"
    copy.write_text(TAXONOMY_FILE.read_text())
    before = TAXONOMY_FILE.read_text().split(MARKER)[0]
    fitted = Calibration(
        cause=Curve(raw=[0.1, 0.9], right=[0.3, 0.95]),
        no_cause=Curve(raw=[0.4, 0.8], right=[0.2, 0.99]),
        fitted_on="tuning seeds 0-9: test",
    )
    write(fitted, copy)
    text = copy.read_text()
    assert text.split(MARKER)[0] == before
    assert text.endswith(render(fitted))
    reloaded = Calibration.model_validate(yaml.safe_load(text)["calibration"])
    assert reloaded == fitted
