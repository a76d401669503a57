"""Record the window `rca demo` replays, from a real Prometheus.

A synthetic fleet (tests/e2e/scenarios.py) with KV-cache memory pressure on one host and healthy
neighbours is backfilled into a real Prometheus (Debian's `prometheus` and `promtool`). The alert
start is when the deployed rule (deploy/prometheus/rules.yml) would have fired on that data. The
real collection code (`rca.pipeline.analyse`) then investigates the alert through a recording
proxy, which keeps every answer Prometheus gave, times relative to the alert. Output:
`rca/samples/demo_fleet_window.json.gz` (the recording) and `rca/samples/demo_alert.json` (the
Alertmanager webhook the demo sends). Rerun it whenever the profile's queries change:

    .venv/bin/python tools/record_demo_window.py [--out DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rca.analyst.summary import AlertText  # noqa: E402
from rca.collect.replay import DEMO_RECORDING, FORMAT, Recording, parse_step, parse_time  # noqa: E402
from rca.collect.target import target_from_alerts  # noqa: E402
from rca.config import Settings  # noqa: E402
from rca.pipeline import analyse  # noqa: E402
from tests.e2e import promstack  # noqa: E402
from tests.e2e.scenarios import MODEL, Exporter, Fleet, Host  # noqa: E402
from tests.helpers.loopback import LoopbackServer  # noqa: E402

SAMPLES = REPO / "rca" / "samples"
ALERT_FILE = "demo_alert.json"
HOST, FAULT = "gpu-node-7", "kv_memory_pressure"
NEIGHBOURS = ("gpu-node-6", "gpu-node-8")
ALERTNAME = "LLMRequestQueueMedianHigh"
ONSET_MINUTES_AGO = 30
INVESTIGATED_AFTER_SECONDS = 60  # Alertmanager's group wait plus the queue: the worker starts about then


class RecordingProxy(LoopbackServer):
    """Forwards Prometheus API calls to `upstream` and keeps each query and its answer."""

    def __init__(self, upstream: str) -> None:
        self.calls: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        lock, calls = threading.Lock(), self.calls

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                url = urlparse(self.path)
                params = {k: v[-1] for k, v in parse_qs(url.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    params |= {k: v[-1] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                reply = httpx.post(f"{upstream}{url.path}", data=params, timeout=30)
                if reply.status_code == 200 and url.path in ("/api/v1/query", "/api/v1/query_range"):
                    with lock:
                        calls.append((url.path, params, reply.json()))
                elif url.path.startswith("/api/"):
                    raise RuntimeError(f"{url.path} {params}: {reply.status_code} {reply.text[:300]}")
                self.send_response(reply.status_code)
                self.send_header("Content-Type", reply.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(reply.content)))
                self.end_headers()
                self.wfile.write(reply.content)

            do_GET = _forward
            do_POST = _forward

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(Handler, name="recording-proxy")
        self.url = self.base


def _rule(name: str) -> tuple[str, dict[str, Any]]:
    """The deployed alert's expression, its recording rules inlined (backfilled data has no
    recorded series), and the rule itself."""
    groups = yaml.safe_load(promstack.RULES.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    records: dict[str, str] = {}  # one record is written per stack: inlined, they are alternatives
    for rule in rules:
        if "record" in rule:
            inline = f"({rule['expr'].strip()})"
            for label, value in rule.get("labels", {}).items():  # the labels Prometheus adds to the record
                inline = f'label_replace({inline}, "{label}", "{value}", "", "")'
            records[rule["record"]] = f"{records[rule['record']]} or {inline}" if rule["record"] in records else inline
    [alert] = [rule for rule in rules if rule.get("alert") == name]
    expr = alert["expr"].strip()
    for record, record_expr in records.items():
        # A record under a range selector (`rca:x[10m]`) becomes a subquery over its expression.
        expr = re.sub(
            rf"(?<![\w:]){re.escape(record)}(?![\w:])(\[(\w+)\])?",
            lambda m, inline=record_expr: f"({inline})" + (f"[{m.group(2)}:15s]" if m.group(1) else ""),
            expr,
        )
    return expr, alert


def firing_alert(prometheus: str, onset: float, end: float) -> tuple[dict[str, str], dict[str, str], float]:
    """Labels, annotations and start of the alert as Prometheus would have sent it: the first
    evaluation at which the expression held for the host, plus the rule's `for`."""
    expr, rule = _rule(ALERTNAME)
    reply = httpx.post(
        f"{prometheus}/api/v1/query_range", timeout=60, data={"query": expr, "start": onset, "end": end, "step": "15s"}
    ).json()
    [series] = [s for s in reply["data"]["result"] if s["metric"].get("instance", "").startswith(f"{HOST}:")]
    first_ts = series["values"][0][0]
    fired_at = first_ts + parse_step(rule.get("for", "0s"))
    if fired_at > end - INVESTIGATED_AFTER_SECONDS:
        raise RuntimeError(f"{ALERTNAME} fires too late in the window ({fired_at - onset:.0f} s after onset)")
    labels = dict(
        sorted(
            (
                series["metric"] | {"alertname": ALERTNAME} | {k: str(v) for k, v in rule.get("labels", {}).items()}
            ).items()
        )
    )
    value = float(min(series["values"], key=lambda point: abs(point[0] - fired_at))[1])  # as the annotation says it

    def fill(template: str) -> str:
        template = re.sub(r"\{\{\s*\$value\s*\|\s*printf\s*\"([^\"]+)\"\s*\}\}", lambda m: m.group(1) % value, template)
        template = re.sub(
            r"\{\{\s*with\s+\$labels\.(\w+)\s*\}\}(.*?)\{\{\s*end\s*\}\}",
            lambda m: re.sub(r"\{\{\s*\.\s*\}\}", labels[m.group(1)], m.group(2)) if labels.get(m.group(1)) else "",
            template,
        )
        return re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)

    annotations = {k: fill(str(v)) for k, v in rule.get("annotations", {}).items()}
    return labels, annotations, fired_at


def fingerprint(labels: dict[str, str]) -> str:
    """Prometheus' label-set fingerprint (FNV-1a 64 over sorted names and values, 0xff-separated)."""
    digest = 0xCBF29CE484222325
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in part.encode() + b"\xff":
                digest = ((digest ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{digest:016x}"


def webhook(labels: dict[str, str], annotations: dict[str, str], starts_at: float) -> dict:
    """The Alertmanager v4 webhook body for one firing alert, grouped as deploy/alertmanager does."""
    group = {k: labels[k] for k in ("alertname", "instance", "model_name") if k in labels}
    key = ", ".join(f'{k}="{v}"' for k, v in group.items())
    started = datetime.fromtimestamp(starts_at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    expr = _rule(ALERTNAME)[1]["expr"].strip()
    return {
        "version": "4",
        "groupKey": f"{{}}:{{{key}}}",
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "llm-rca",
        "groupLabels": group,
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": "http://alertmanager.example:9093",
        "alerts": [
            {
                "status": "firing",
                "labels": labels,
                "annotations": annotations,
                "startsAt": started,
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus.example:9090/graph?" + str(httpx.QueryParams({"g0.expr": expr})),
                "fingerprint": fingerprint(labels),
            }
        ],
    }


def _relative(ts: float, anchor: float) -> float:
    return round(ts - anchor, 3)


def entries(calls: list[tuple[str, dict[str, str], dict[str, Any]]], anchor: float) -> list[dict[str, Any]]:
    """The recorded calls, times relative to `anchor` (the alert start); range answers as one
    value per step from each series' first point, None where Prometheus returned no point."""
    out = []
    for path, params, reply in calls:
        result = reply["data"]["result"]
        if path == "/api/v1/query":
            at = _relative(parse_time(params["time"]), anchor)
            out.append(
                {
                    "kind": "instant",
                    "promql": params["query"],
                    "at": at,
                    "result": [{"metric": item["metric"], "value": item["value"][1]} for item in result],
                }
            )
            continue
        start, end, step = parse_time(params["start"]), parse_time(params["end"]), parse_step(params["step"])
        series = []
        for item in result:
            first = item["values"][0][0]
            last = item["values"][-1][0]
            values: list[str | None] = [None] * (round((last - first) / step) + 1)
            for ts, value in item["values"]:
                values[round((ts - first) / step)] = value
            series.append({"metric": item["metric"], "start": _relative(first, anchor), "values": values})
        out.append(
            {
                "kind": "range",
                "promql": params["query"],
                "start": _relative(start, anchor),
                "end": _relative(end, anchor),
                "step": step,
                "result": series,
            }
        )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=SAMPLES, help="folder to write the two files to")
    out_dir: Path = parser.parse_args(argv).out
    for name in [k for k in os.environ if k.startswith("RCA_")]:
        del os.environ[name]  # record on the defaults `rca demo` runs with
    promstack.require_binaries()
    now = time.time()
    onset = now - ONSET_MINUTES_AGO * 60
    fleet = Fleet(
        [Host(HOST, FAULT, onset), *(Host(name, None, onset) for name in NEIGHBOURS)], start=now - 3 * 3600 - 45 * 60
    )
    with tempfile.TemporaryDirectory(prefix="rca-record-") as tmp:
        workdir = Path(tmp)
        promstack.backfill(fleet, now, workdir / "tsdb", workdir)
        with Exporter(fleet, time.time) as exporter:
            prom, prom_url = promstack.start_prometheus(workdir, exporter.port, None)
            try:
                version = httpx.get(f"{prom_url}/api/v1/status/buildinfo", timeout=5).json()["data"]["version"]
                labels, annotations, starts_at = firing_alert(prom_url, onset, now)
                investigated_at = starts_at + INVESTIGATED_AFTER_SECONDS
                settings = Settings(data_dir=workdir / "rca-data")
                alert_start = datetime.fromtimestamp(starts_at, UTC)
                target = target_from_alerts([labels], [alert_start], settings.file_config().target)
                with RecordingProxy(prom_url) as proxy:
                    settings = settings.model_copy(update={"prometheus_url": proxy.url})
                    analysis = analyse(
                        settings,
                        target,
                        now=datetime.fromtimestamp(investigated_at, UTC),
                        alerts=[AlertText(labels, annotations, alert_start)],
                    )
            finally:
                prom.stop()
    ranked = [(h.category, round(h.confidence, 2)) for h in analysis.hypotheses]
    if ranked[0][0] != FAULT:
        raise SystemExit(f"the recorded window does not rank {FAULT} first: {ranked}")
    window = analysis.collection.window
    recording = {
        "format": FORMAT,
        "window_seconds": int((window.end - window.start).total_seconds()),
        "meta": {
            "what": f"{ALERTNAME} on {HOST}: KV-cache memory pressure, neighbours "
            f"{', '.join(NEIGHBOURS)} healthy (synthetic fleet, tests/e2e/scenarios.py)",
            "recorded_by": "tools/record_demo_window.py",
            "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "prometheus_version": version,
            "alert_starts_at": datetime.fromtimestamp(starts_at, UTC).isoformat(),
            "investigated_after_seconds": INVESTIGATED_AFTER_SECONDS,
            "fault": FAULT,
            "fault_onset_seconds": _relative(onset, starts_at),
            "model": MODEL,
            "step_seconds": window.step_seconds,
        },
        "queries": entries(proxy.calls, starts_at),
    }
    Recording.from_dict(recording)  # it must load
    body = json.dumps(recording, separators=(",", ":"), sort_keys=True).encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / DEMO_RECORDING).write_bytes(gzip.compress(body, compresslevel=9, mtime=0))
    payload = webhook(labels, annotations, starts_at)
    (out_dir / ALERT_FILE).write_text(json.dumps(payload, indent=2) + "\n")
    size = (out_dir / DEMO_RECORDING).stat().st_size
    print(
        f"recorded {len(proxy.calls)} queries ({size / 1024:.0f} KiB gzip'd) from Prometheus {version}; "
        f"alert at onset+{starts_at - onset:.0f} s; ranked {ranked[:3]}"
    )


if __name__ == "__main__":
    main()
