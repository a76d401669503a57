"""The demo's recording can be made again: tools/record_demo_window.py on a real Prometheus
records a window that loads, holds the alert's host only and ranks the injected fault first
(the tool refuses to write one that does not)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rca.collect.replay import DEMO_RECORDING, Recording
from tests.e2e.promstack import REPO, rca_process_env

pytestmark = pytest.mark.e2e


def test_the_recording_tool_records_a_loadable_window_of_the_alerting_host(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "record_demo_window.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        env=rca_process_env({}),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ranked [('kv_memory_pressure'" in done.stdout
    recording = Recording.load(tmp_path / DEMO_RECORDING)
    assert recording.meta["fault"] == "kv_memory_pressure" and recording.ranges and recording.instant
    raw = json.loads(gzip.decompress((tmp_path / DEMO_RECORDING).read_bytes()))
    assert (tmp_path / DEMO_RECORDING).stat().st_size < 300_000
    hosts = {
        v for q in raw["queries"] for s in q["result"] for k, v in s["metric"].items() if k in ("instance", "Hostname")
    }
    assert hosts and all(h.startswith("gpu-node-7") for h in hosts), hosts  # the neighbours stay out
    alert = json.loads((tmp_path / "demo_alert.json").read_text())
    assert alert["alerts"][0]["labels"]["instance"] == "gpu-node-7:8000"
    assert alert["alerts"][0]["startsAt"].startswith(raw["meta"]["alert_starts_at"][:19])
