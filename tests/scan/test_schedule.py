"""When the scan runs: on whenever Prometheus is configured, off with RCA_SCAN_ENABLED=false."""

from __future__ import annotations

import argparse
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from rca.cli.backtest import parse_duration
from rca.jobs.scan import start_scans
from tests.helpers.service import make_settings

PROMETHEUS = "http://127.0.0.1:9"


def test_the_scan_is_on_with_prometheus_and_off_when_disabled_or_without_it(tmp_path: Path) -> None:
    assert make_settings("sqlite://", tmp_path, prometheus_url=PROMETHEUS, scan_enabled=None).scan_active
    assert not make_settings("sqlite://", tmp_path, prometheus_url=PROMETHEUS, scan_enabled=False).scan_active
    assert not make_settings("sqlite://", tmp_path, scan_enabled=True).scan_active


def test_no_scan_thread_starts_when_the_scan_is_off(tmp_path: Path) -> None:
    settings = make_settings("sqlite://", tmp_path, prometheus_url=PROMETHEUS, scan_enabled=False)
    assert start_scans(settings, print, print, threading.Event()) is None


def test_a_scan_that_cannot_reach_prometheus_is_logged_and_retried(tmp_path: Path, caplog: object) -> None:
    settings = make_settings(
        "sqlite://", tmp_path, prometheus_url=PROMETHEUS, scan_enabled=None, scan_interval_seconds=1
    )
    stop = threading.Event()
    thread = start_scans(settings, print, print, stop)
    assert thread is not None
    stop.wait(1.5)
    stop.set()
    thread.join(timeout=15)
    assert not thread.is_alive()
    assert "scan failed" in caplog.text  # type: ignore[attr-defined]


def test_backtest_durations_are_prometheus_style() -> None:
    assert parse_duration("7d") == timedelta(days=7) and parse_duration("90m") == timedelta(minutes=90)
    for bad in ("7", "d", "0h", "1.5h", "7w"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_duration(bad)
