"""The scanner's kept windows: reads spliced in place of what was kept, which spans each target
still lacks, the newest of them filled first within a budget, and the window sliding on."""

from __future__ import annotations

from rca.scan.fleet import SignalSeries
from rca.scan.window import HourLevel, Window

STEP = 30
QUEUE = "queue_median"


def series(first: float, last: float, value: float, source: str = "vllm") -> SignalSeries:
    return SignalSeries([(float(t), value) for t in range(int(first), int(last) + 1, STEP)], source)


def read(**by_instance: SignalSeries) -> dict[str, dict[str, SignalSeries]]:
    return {QUEUE: dict(by_instance)}


def test_a_read_replaces_what_was_kept_in_its_span_and_joins_the_spans_read() -> None:
    window = Window(STEP)
    window.splice(read(a=series(300, 600, 1.0)), (300, 600), ["a"])
    window.splice(read(a=series(540, 630, 2.0)), (540, 630), ["a"])  # the new step and two read again
    window.splice(read(a=series(120, 270, 3.0)), (120, 270), ["a"])  # older history, filled below
    samples = window.series[QUEUE]["a"].samples
    assert [t for t, _ in samples] == list(range(120, 631, STEP))
    assert {t: v for t, v in samples if t in (270, 300, 510, 540, 630)} == {
        270: 3.0,
        300: 1.0,
        510: 1.0,
        540: 2.0,
        630: 2.0,
    }
    assert window.covered["a"] == [(120, 630)] and window.until == 630
    assert window.lacks("a", 0, 630) == [(0, 90)]


def test_a_read_that_found_nothing_drops_what_was_kept_there_and_counts_as_read() -> None:
    window = Window(STEP)
    window.splice(read(a=series(300, 600, 1.0), b=series(300, 600, 1.0)), (300, 600), ["a", "b"])
    window.splice(read(b=series(300, 450, 5.0)), (300, 600), ["a", "b"])
    assert "a" not in window.series[QUEUE] and window.lacks("a", 300, 600) == []
    assert [t for t, _ in window.series[QUEUE]["b"].samples] == list(range(300, 451, STEP))


def test_one_series_is_one_alternative_the_newer_read_wins() -> None:
    window = Window(STEP)
    window.splice(read(a=series(300, 600, 1.0, "v1")), (300, 600), ["a"])
    window.splice(read(a=series(120, 270, 9.0, "v0")), (120, 270), ["a"])  # older, of another source
    assert window.series[QUEUE]["a"] == series(300, 600, 1.0, "v1")
    window.splice(read(a=series(540, 630, 2.0, "v0")), (540, 630), ["a"])  # at the top: it answers now
    assert window.series[QUEUE]["a"] == series(540, 630, 2.0, "v0")


def test_the_fill_takes_the_newest_history_some_target_lacks_within_the_budget() -> None:
    window = Window(STEP)
    window.splice(read(), (300, 600), ["a"])
    assert window.fill(["a"], 0, 600, most=4) == (180, 270)  # a lacks [0, 270]: its newest 4 steps
    assert window.fill(["a", "new"], 0, 600, most=4) == (510, 600)  # a new target lacks it all
    assert window.fill(["a"], 0, 600, most=100) == (0, 270)
    window.splice(read(), (0, 270), ["a"])
    assert window.fill(["a"], 0, 600, most=4) is None


def test_the_new_steps_are_read_with_the_last_ones_again_and_a_long_gap_is_left_to_the_fill() -> None:
    window = Window(STEP)
    assert window.fresh(600, most=8, again=3) is None  # nothing read yet: all of it is missing history
    window.splice(read(), (300, 600), ["a"])
    assert window.fresh(630, most=8, again=3) == (540, 630)
    assert window.fresh(600, most=8, again=0) is None  # nothing new, nothing to read again
    assert window.fresh(660, most=8, again=0) == (630, 660)
    assert window.fresh(1200, most=8, again=3) == (990, 1200)  # at most 8 steps; the gap below is lacked
    window.splice(read(), (990, 1200), ["a"])
    assert window.lacks("a", 300, 1200) == [(630, 960)]


def test_the_window_slides_on_and_forgets_it_all_when_time_goes_back() -> None:
    window = Window(STEP)
    window.splice(read(a=series(300, 600, 1.0), gone=series(300, 390, 1.0)), (300, 600), ["a", "gone"])
    window.keep(420, 630)
    assert window.series[QUEUE]["a"].samples[0][0] == 420 and "gone" not in window.series[QUEUE]
    assert window.covered == {"a": [(420, 600)], "gone": [(420, 600)]}
    assert window.of(["a"]) == {QUEUE: {"a": series(420, 600, 1.0)}}
    window.keep(0, 300)  # before the last read: another time
    assert window.series == {} and window.covered == {} and window.until is None


def test_the_baseline_is_each_targets_median_over_the_window_and_how_far_it_reached() -> None:
    window = Window(60)
    values = [1.0, 4.0, 2.0, 8.0]
    found = SignalSeries([(60.0 * i, v) for i, v in enumerate(values)], "vllm")
    window.splice(read(a=found, b=SignalSeries([(0.0, 7.0)], "vllm")), (0, 180), ["a", "b"])
    levels = window.levels()
    assert {i: level.median for i, level in levels[QUEUE].items()} == {"a": 3.0, "b": 7.0}
    assert levels[QUEUE]["b"] == HourLevel(7.0, 7.0, 7.0)  # one sample reached nowhere else
    a = levels[QUEUE]["a"]  # 1, 2, 4, 8: the 10th and 90th percentiles, not the extremes
    assert 1.0 < a.reach(-1) < 2.0 and 4.0 < a.reach(+1) < 8.0
    changes = window.changes
    window.keep(0, 180)  # nothing slid out: what was computed from the window still holds
    assert window.changes == changes
    window.keep(60, 180)
    assert window.changes > changes and window.levels()[QUEUE]["a"].median == 4.0
    assert "b" not in window.levels()[QUEUE]  # b's one sample slid out
