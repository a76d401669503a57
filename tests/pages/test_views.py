"""The range the incident page's charts open on: the incident's minutes, not the last 5 % of the
kept window; the whole window stays a click away."""

from __future__ import annotations

from typing import Any

from rca.pages.views import FOCUS_MARGIN_SECONDS, focus, span

START = 1_800_000_000.0


def _chart(onset_minutes: float | None, minutes: int = 180, step: int = 60) -> dict[str, Any]:
    """A chart of `minutes` of kept series, its onset that many minutes in."""
    return {
        "start": START,
        "step": step,
        "values": [1.0] * (minutes * 60 // step + 1),
        "onset": START + onset_minutes * 60 if onset_minutes is not None else None,
    }


def test_the_charts_open_on_the_first_onset_less_a_margin_to_the_end() -> None:
    end = START + 180 * 60
    assert focus([_chart(170), _chart(172)]) == (START + 170 * 60 - FOCUS_MARGIN_SECONDS, end)
    # A long incident keeps a quarter of its own length before the onset.
    assert focus([_chart(100)]) == (START + 100 * 60 - 20 * 60, end)
    assert span([_chart(170)]) == "3 h" and span([_chart(10, minutes=90)]) == "90 min"


def test_no_focus_where_it_would_be_the_whole_window_or_there_is_no_onset() -> None:
    assert focus([_chart(5)]) is None
    assert focus([_chart(None)]) is None
    assert focus([]) is None
