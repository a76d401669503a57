"""The filters the templates use: times written once in one format (24-hour, UTC on the server,
the viewer's zone in the browser), and a clock time inside the service's text made a <time>."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from rca.pages.render import _utc, clock_times, tokens


def test_a_time_is_written_24_hour_without_repeating_utc_beside_it() -> None:
    at = datetime(2026, 12, 6, 23, 30, 5, tzinfo=timezone(timedelta(hours=2)))
    assert _utc(at) == "2026-12-06 21:30:05"
    assert _utc(None) == "-"


def test_a_clock_time_in_text_becomes_the_nearest_instant_and_the_rest_is_escaped() -> None:
    near = datetime(2026, 12, 7, 0, 10, tzinfo=UTC)
    shown = clock_times("9.1 requests <b>since 23:55 UTC</b>, peak 00:05 UTC; 25:00 UTC is no time", near)
    assert str(shown) == (
        '9.1 requests &lt;b&gt;since <time datetime="2026-12-06T23:55:00+00:00" data-clock>23:55</time>&lt;/b&gt;, '
        'peak <time datetime="2026-12-07T00:05:00+00:00" data-clock>00:05</time>; 25:00 UTC is no time'
    )
    assert str(clock_times("since 11:29 UTC", None)) == "since 11:29 UTC"
    assert str(clock_times(None, near)) == ""


def test_a_hyphenated_word_of_a_title_is_kept_whole_and_the_title_escaped() -> None:
    shown = tokens("<b>High queue</b> instance=gpu-node-7:8000 on llama-3-8b")
    assert str(shown) == (
        '&lt;b&gt;High queue&lt;/b&gt; <span class="token">instance=gpu-node-7:8000</span> on '
        '<span class="token">llama-3-8b</span>'
    )
    assert str(tokens(None)) == ""
