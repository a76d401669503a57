"""A Prometheus-compatible HTTP server that replays a recorded investigation window.

`rca demo` needs real series without a Prometheus to set up. A recording (made against a real
Prometheus by `tools/record_demo_window.py`) holds the answers Prometheus gave to the exact
queries the collection code made for one incident, with times relative to the alert. This server
answers the same queries, shifted so that the alert started at `anchor`: the whole pipeline
(collect -> signals -> ranking -> store -> API) then runs unchanged on those series.

It never makes data up: a query that is not in the recording gets what Prometheus answers for a
series that does not exist (an empty result), and a range request only returns recorded points.
It also answers the `/graph` links the incident pages make (`rca.pages.views.prometheus_graph`):
a small page with the query and its recorded series over the linked range, or why there are none.
"""

from __future__ import annotations

import gzip
import html
import json
import math
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

FORMAT = 1
DEMO_RECORDING = "demo_fleet_window.json.gz"
MAX_POINTS = 11_000  # Prometheus refuses range queries with more points per series
LOOKBACK_DELTA_SECONDS = 300.0  # how far an instant answer may be from the recorded instant
WINDOW_TOLERANCE_SECONDS = 600  # `[Ns]` widths this close to the window's length are the window
_SECONDS_RANGE = re.compile(r"\[(\d+)s\]")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
GRAPH_POINTS = 1_000  # at most this many points per series on a graph page
GRAPH_WIDTH, GRAPH_HEIGHT = 640, 120


def normalise_promql(promql: str, window_seconds: int) -> str:
    """The query with its window-wide range selectors written `[window]`.

    Probes and alias lookups look back over the whole investigation window (`[10860s]`), whose
    length in seconds depends on the instant the investigation ran; every other width is kept.
    """

    def replace(match: re.Match[str]) -> str:
        width = int(match.group(1))
        return "[window]" if abs(width - window_seconds) <= WINDOW_TOLERANCE_SECONDS else match.group(0)

    return _SECONDS_RANGE.sub(replace, " ".join(promql.split()))


@dataclass
class InstantAnswer:
    at: float  # seconds after the alert started
    result: list[dict[str, Any]]  # [{"metric": {...}, "value": "1.5"}]


@dataclass
class RangeAnswer:
    start: float  # seconds after the alert started
    end: float
    step: float
    result: list[dict[str, Any]]  # [{"metric": {...}, "start": rel, "values": ["1.5", None, ...]}]


@dataclass
class Recording:
    """What a real Prometheus answered, keyed by normalised PromQL, times relative to the alert."""

    meta: dict[str, Any]
    window_seconds: int
    instant: dict[str, list[InstantAnswer]] = field(default_factory=dict)
    ranges: dict[str, list[RangeAnswer]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recording:
        if data.get("format") != FORMAT:
            raise ValueError(f"recording format {data.get('format')!r}, expected {FORMAT}")
        recording = cls(meta=data["meta"], window_seconds=int(data["window_seconds"]))
        for item in data["queries"]:
            key = normalise_promql(item["promql"], recording.window_seconds)
            if item["kind"] == "instant":
                recording.instant.setdefault(key, []).append(InstantAnswer(item["at"], item["result"]))
            else:
                recording.ranges.setdefault(key, []).append(
                    RangeAnswer(item["start"], item["end"], item["step"], item["result"])
                )
        return recording

    @classmethod
    def load(cls, path: Path | None = None) -> Recording:
        """A recording file (gzip'd JSON); by default the demo's, shipped in `rca.samples`."""
        raw = path.read_bytes() if path else resources.files("rca.samples").joinpath(DEMO_RECORDING).read_bytes()
        return cls.from_dict(json.loads(gzip.decompress(raw)))

    def instant_query(self, promql: str, at: float) -> list[dict[str, Any]] | None:
        """The vector recorded for `promql` nearest to `at` (relative seconds), with `[ts, value]`
        pairs at `at`; [] when the recorded instant is too far away; None when never recorded."""
        answers = self.instant.get(normalise_promql(promql, self.window_seconds))
        if answers is None:
            return None
        nearest = min(answers, key=lambda a: abs(a.at - at))
        if abs(nearest.at - at) > LOOKBACK_DELTA_SECONDS:
            return []
        return [{"metric": item["metric"], "value": [at, item["value"]]} for item in nearest.result]

    def range_query(self, promql: str, start: float, end: float, step: float) -> list[dict[str, Any]] | None:
        """The recorded series of `promql` on the grid start, start+step, ... <= end (relative
        seconds). Each grid point takes the recorded point nearest to it, if one is within half a
        recorded step (the client rounds start and end to whole seconds, so a replayed grid sits up
        to a second off the recorded one); series left without points are dropped, as Prometheus
        does. None when the query was never recorded."""
        answers = self.ranges.get(normalise_promql(promql, self.window_seconds))
        if answers is None:
            return None
        answer = min(answers, key=lambda a: abs(a.start - start) + abs(a.end - end))
        grid = [start + k * step for k in range(int(math.floor((end - start) / step + 1e-9)) + 1)]
        out = []
        for series in answer.result:
            points = []
            for t in grid:
                index = round((t - series["start"]) / answer.step)
                near = abs(t - series["start"] - index * answer.step) <= answer.step / 2
                if near and 0 <= index < len(series["values"]) and series["values"][index] is not None:
                    points.append([t, series["values"][index]])
            if points:
                out.append({"metric": series["metric"], "values": points})
        return out


def parse_time(text: str) -> float:
    """Unix seconds from a Prometheus API time: a number or RFC 3339."""
    try:
        return float(text)
    except ValueError:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def parse_step(text: str) -> float:
    """Seconds from a Prometheus API step: a number or a duration such as `15s`."""
    match = _DURATION.match(text)
    if match:
        return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    return float(text)


class ReplayServer:
    """Serves a recording on a loopback port as the Prometheus HTTP API, the alert at `anchor`
    (unix seconds). `misses` lists the queries asked that the recording does not hold, so a
    caller can tell that the recording is older than the profile that queried it."""

    def __init__(self, recording: Recording, anchor: float, host: str = "127.0.0.1", port: int = 0) -> None:
        self.recording = recording
        self.anchor = anchor
        self.misses: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        if isinstance(host, bytes | bytearray):  # the socket API allows it; a bound AF_INET socket gives str
            host = host.decode()
        return f"http://{host}:{port}"

    def __enter__(self) -> ReplayServer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="prometheus-replay", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def _miss(self, promql: str) -> None:
        with self._lock:
            self.misses.append(promql)

    def answer(self, path: str, params: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """The status and JSON body Prometheus would send for this API call."""
        if path in ("/api/v1/series", "/api/v1/labels") or re.fullmatch(r"/api/v1/label/[^/]+/values", path):
            return 200, {"status": "success", "data": []}  # the recording holds query answers only
        if path not in ("/api/v1/query", "/api/v1/query_range"):
            return 404, {"status": "error", "errorType": "not_found", "error": f"{path}: not found"}
        promql = params.get("query")
        if not promql:
            return 400, _bad_data("parse error: no expression found in input")
        try:
            if path == "/api/v1/query":
                at = parse_time(params["time"]) if "time" in params else datetime.now().timestamp()
                result = self.recording.instant_query(promql, at - self.anchor)
                if result is None:
                    self._miss(promql)
                    result = []
                for item in result:
                    item["value"][0] += self.anchor
                return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}
            start, end, step = parse_time(params["start"]), parse_time(params["end"]), parse_step(params["step"])
        except (KeyError, ValueError) as exc:
            return 400, _bad_data(f"invalid parameter: {exc}")
        if step <= 0:
            return 400, _bad_data("zero or negative query resolution step widths are not accepted")
        if end < start:
            return 400, _bad_data("end timestamp must not be before start time")
        if (end - start) / step > MAX_POINTS:
            return 400, _bad_data("exceeded maximum resolution of 11,000 points per timeseries")
        result = self.recording.range_query(promql, start - self.anchor, end - self.anchor, step)
        if result is None:
            self._miss(promql)
            result = []
        for series in result:
            for point in series["values"]:
                point[0] += self.anchor
        return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}

    def graph_page(self, params: dict[str, str]) -> str:
        """The page a `/graph?g0.expr=...&g0.range_input=3h&g0.end_input=...` link opens (the form
        Prometheus' own graph page takes; the end is UTC): the query and each recorded series over
        that range, drawn and summed up, or why there is nothing to draw."""
        promql = params.get("g0.expr", "").strip()
        body: list[str] = []
        if not promql:
            body.append("<p>No query: a link names it as <code>g0.expr</code>.</p>")
        else:
            try:
                span = parse_step(params.get("g0.range_input") or "1h")
                end_text = params.get("g0.end_input")
                end = (
                    datetime.strptime(end_text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
                    if end_text
                    else datetime.now(UTC).timestamp()
                )
            except ValueError as exc:
                span, end = 0.0, 0.0
                body.append(f"<p>Cannot read the link's range: {html.escape(str(exc))}</p>")
            if span > 0:
                start = end - span
                step = max(float(self.recording.meta.get("step_seconds") or 15), span / GRAPH_POINTS)
                result = self.recording.range_query(promql, start - self.anchor, end - self.anchor, step)
                body.append(
                    f"<p>{_utc(start)} to {_utc(end)} UTC, a point every {step:g} s, as recorded "
                    f"(the alert fired at {_utc(self.anchor)} UTC).</p>"
                )
                if result is None:
                    body.append(
                        "<p><strong>This query is not in the recording</strong>: the replay holds only the "
                        "queries the investigation made as they were recorded, and made none such.</p>"
                    )
                elif not result:
                    body.append("<p><strong>No recorded points in this range.</strong></p>")
                for series in result or []:
                    body.append(_series_html(series["metric"], [(t + self.anchor, v) for t, v in series["values"]]))
        meta = self.recording.meta
        origin = f"recorded from Prometheus {meta.get('prometheus_version', '?')} by {meta.get('recorded_by', '?')}"
        return (
            '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Prometheus replay</title>'
            "<style>body{font:14px sans-serif;margin:2em;max-width:60em}pre{white-space:pre-wrap;"
            "background:#f4f4f4;padding:.5em}svg{border:1px solid #ccc;background:#fff}</style></head><body>"
            "<h1>Prometheus replay</h1>"
            f"<p>The demo's replay of a recorded Prometheus window ({html.escape(origin)}), not a Prometheus: "
            "it answers only the queries it recorded.</p>"
            f"<pre>{html.escape(promql)}</pre>{''.join(body)}</body></html>"
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self) -> None:
                url = urlparse(self.path)
                params = {k: v[-1] for k, v in parse_qs(url.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                if length:  # POST form parameters, as Prometheus accepts them
                    body = self.rfile.read(length).decode()
                    params |= {k: v[-1] for k, v in parse_qs(body).items()}
                if url.path in ("/-/ready", "/-/healthy"):
                    status, body_bytes, kind = 200, b"Prometheus replay is Ready.\n", "text/plain"
                elif url.path == "/graph":
                    status, body_bytes, kind = 200, replay.graph_page(params).encode(), "text/html; charset=utf-8"
                else:
                    status, answer = replay.answer(url.path, params)
                    body_bytes, kind = json.dumps(answer).encode(), "application/json"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body_bytes)))
                self.end_headers()
                self.wfile.write(body_bytes)

            do_GET = _reply
            do_POST = _reply

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
                pass

        return Handler


def _utc(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _series_html(labels: dict[str, str], points: list[tuple[float, str]]) -> str:
    """One recorded series: its labels, a line of its points and their range in numbers."""
    name = labels.get("__name__", "")
    shown = name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__") + "}"
    finite = [(t, float(v)) for t, v in points if math.isfinite(float(v))]
    if not finite:
        return f"<h2><code>{html.escape(shown)}</code></h2><p>{len(points)} points, none finite.</p>"
    (t0, t1), values = (finite[0][0], finite[-1][0]), [v for _, v in finite]
    low, high = min(values), max(values)

    def xy(t: float, v: float) -> str:
        x = (t - t0) / (t1 - t0) * GRAPH_WIDTH if t1 > t0 else 0.0
        y = GRAPH_HEIGHT - ((v - low) / (high - low) * GRAPH_HEIGHT if high > low else GRAPH_HEIGHT / 2)
        return f"{x:.1f},{y:.1f}"

    line = " ".join(xy(t, v) for t, v in finite)
    return (
        f"<h2><code>{html.escape(shown)}</code></h2>"
        f'<svg width="{GRAPH_WIDTH}" height="{GRAPH_HEIGHT}" viewBox="0 0 {GRAPH_WIDTH} {GRAPH_HEIGHT}" '
        f'role="img" aria-label="recorded series"><polyline fill="none" stroke="#c0392b" stroke-width="1.5" '
        f'points="{line}"/></svg>'
        f"<p>{len(points)} points from {_utc(points[0][0])} to {_utc(points[-1][0])} UTC; "
        f"min {low:g}, max {high:g}, last {values[-1]:g}.</p>"
    )


def _bad_data(message: str) -> dict[str, Any]:
    return {"status": "error", "errorType": "bad_data", "error": message}
