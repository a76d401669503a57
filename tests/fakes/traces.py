"""Protocol-faithful fake Jaeger and Tempo query servers on loopback, and realistic LLM-serving traces.

The wire formats follow the sources, not our client:
- Jaeger query service (v1 HTTP API, what jaeger-ui calls): `cmd/query/app/http_handler.go`
  (routes `/api/services`, `/api/traces`, `/api/traces/{traceID}`; every answer is a
  `structuredResponse` `{"data", "total", "limit", "offset", "errors": [{"code", "msg"}]}`),
  `cmd/query/app/query_parser.go` (`service` required, `start`/`end` in microseconds since the
  epoch, `limit`), and `model/json/model.go` (Trace `{traceID, spans, processes}`, Span
  `{traceID, spanID, operationName, references: [{refType: CHILD_OF|FOLLOWS_FROM, traceID,
  spanID}], startTime (us), duration (us), tags: [{key, type, value}], processID}`, Process
  `{serviceName, tags}`).
- Grafana Tempo HTTP API (grafana.com/docs/tempo/latest/api_docs): `/api/search` with a TraceQL
  `q`, `start`/`end` in Unix seconds, `limit`, `spss`, answering `{"traces": [{traceID,
  rootServiceName, rootTraceName, startTimeUnixNano (string), durationMs}], "metrics": {...}}`
  (traceID hex, leading zeros dropped); `/api/search/tag/service.name/values` answering
  `{"tagValues": [...]}`; `/api/traces/{id}` answering the `tempopb.Trace` as jsonpb:
  `{"batches": [{resource: {attributes: [{key, value: {stringValue}}]}, scopeSpans: [{scope,
  spans: [{traceId, spanId, parentSpanId, name, kind, startTimeUnixNano, endTimeUnixNano,
  attributes, status: {code}}]}]}]}` with ids base64 (grafana/tempo#5437, #3802). The canonical
  OTLP/JSON (opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding: `resourceSpans`, hex ids)
  is served too when asked, since `/api/v2/traces` and other OTLP stores use it.
"""

from __future__ import annotations

import base64
import json
import random
import re
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from tests.helpers.loopback import LoopbackServer


@dataclass
class FakeSpan:
    span_id: str  # 16 hex
    parent_id: str | None
    service: str
    operation: str
    start_us: int
    duration_us: int
    error: bool = False
    attributes: dict[str, float] = field(default_factory=dict)


@dataclass
class FakeTrace:
    trace_id: str  # 32 hex
    spans: list[FakeSpan]

    @property
    def start_us(self) -> int:
        return min(s.start_us for s in self.spans)

    @property
    def root(self) -> FakeSpan:
        return min(self.spans, key=lambda s: (s.parent_id is not None, s.start_us))


@dataclass
class Store:
    traces: list[FakeTrace] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    required_headers: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def services(self) -> list[str]:
        return sorted({s.service for t in self.traces for s in t.spans})

    def find(self, trace_id: str) -> FakeTrace | None:
        return next((t for t in self.traces if t.trace_id == trace_id), None)

    def matching(self, service: str, start_us: int, end_us: int, limit: int) -> list[FakeTrace]:
        """Traces with a span of `service` starting in [start, end], newest first (as Jaeger's stores)."""
        hits = [
            t for t in self.traces if any(s.service == service and start_us <= s.start_us <= end_us for s in t.spans)
        ]
        hits.sort(key=lambda t: -t.start_us)
        return hits[:limit]


# ----------------------------------------------------------------------------- Jaeger


def jaeger_trace(trace: FakeTrace) -> dict:
    processes: dict[str, str] = {}
    for span in trace.spans:
        processes.setdefault(span.service, f"p{len(processes) + 1}")
    spans = []
    for s in trace.spans:
        refs = [{"refType": "CHILD_OF", "traceID": trace.trace_id, "spanID": s.parent_id}] if s.parent_id else []
        tags = [{"key": "span.kind", "type": "string", "value": "server"}]
        if s.error:
            tags.append({"key": "error", "type": "bool", "value": True})
        tags += [{"key": k, "type": "float64", "value": v} for k, v in s.attributes.items()]
        spans.append(
            {
                "traceID": trace.trace_id,
                "spanID": s.span_id,
                "operationName": s.operation,
                "references": refs,
                "startTime": s.start_us,
                "duration": s.duration_us,
                "tags": tags,
                "logs": [],
                "processID": processes[s.service],
                "warnings": None,
            }
        )
    return {
        "traceID": trace.trace_id,
        "spans": spans,
        "warnings": None,
        "processes": {
            pid: {"serviceName": svc, "tags": [{"key": "hostname", "type": "string", "value": f"{svc}-0"}]}
            for svc, pid in processes.items()
        },
    }


def _structured(data: object, errors: list[dict] | None = None, total: int = 0) -> dict:
    return {"data": data, "total": total, "limit": 0, "offset": 0, "errors": errors}


# ----------------------------------------------------------------------------- Tempo


def _b64(hex_id: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_id)).decode()


def otlp_trace(trace: FakeTrace, canonical: bool) -> dict:
    """Tempo's `{"batches"}` with base64 ids, or canonical OTLP/JSON `{"resourceSpans"}` with hex ids."""
    encode = (lambda h: h) if canonical else _b64
    batches = []
    for service in sorted({s.service for s in trace.spans}):
        spans = []
        for s in (x for x in trace.spans if x.service == service):
            span = {
                "traceId": encode(trace.trace_id),
                "spanId": encode(s.span_id),
                "name": s.operation,
                "kind": "SPAN_KIND_INTERNAL",
                "startTimeUnixNano": str(s.start_us * 1000),
                "endTimeUnixNano": str((s.start_us + s.duration_us) * 1000),
                "attributes": [{"key": k, "value": {"doubleValue": v}} for k, v in s.attributes.items()],
                "status": {"code": "STATUS_CODE_ERROR", "message": "failed"} if s.error else {},
            }
            if s.parent_id:
                span["parentSpanId"] = encode(s.parent_id)
            spans.append(span)
        batches.append(
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                "scopeSpans": [{"scope": {"name": "fake-instrumentation"}, "spans": spans}],
            }
        )
    return {"resourceSpans" if canonical else "batches": batches}


TRACEQL_SERVICE = re.compile(r'^\{\s*resource\.service\.name\s*=\s*"((?:[^"\\]|\\.)*)"\s*\}$')


# ----------------------------------------------------------------------------- server


class _QuietServer(ThreadingHTTPServer):
    """A client closing its keep-alive connection is normal, not an error to print."""

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class FakeBackend(LoopbackServer):
    """A real HTTP server on 127.0.0.1 speaking the Jaeger or Tempo query API over `store`."""

    def __init__(self, kind: str, store: Store, canonical_otlp: bool = False) -> None:
        assert kind in ("jaeger", "tempo")
        self.kind, self.store, self.canonical = kind, store, canonical_otlp
        backend = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the real servers
            wbufsize = 1 << 16  # headers and body in one segment (no Nagle/delayed-ACK stall)

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                with backend.store.lock:
                    backend.store.requests.append(self.path)
                for name, value in backend.store.required_headers.items():
                    if self.headers.get(name) != value:
                        return self._send(
                            401,
                            {"message": "unauthorized"}
                            if kind == "tempo"
                            else _structured(None, [{"code": 401, "msg": "unauthorized"}]),
                        )
                url = urlsplit(self.path)
                params = {k: v[-1] for k, v in parse_qs(url.query).items()}
                status, body = (backend.jaeger if kind == "jaeger" else backend.tempo)(url.path, params)
                self._send(status, body)

            def _send(self, status: int, body: object) -> None:
                raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if not isinstance(body, str) else "text/plain")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(Handler, name=f"fake-{kind}", server_class=_QuietServer, poll_interval=0.05)
        self.url = self.base

    def jaeger(self, path: str, params: dict[str, str]) -> tuple[int, object]:
        if path == "/api/services":
            services = self.store.services()
            return 200, _structured(services, total=len(services))
        if path == "/api/traces":
            if not params.get("service"):
                return 400, _structured(None, [{"code": 400, "msg": "parameter 'service' is required"}])
            try:
                start, end = int(params["start"]), int(params["end"])
                limit = int(params.get("limit", "20"))
            except (KeyError, ValueError):
                return 400, _structured(None, [{"code": 400, "msg": "unable to parse param 'start'/'end'"}])
            found = self.store.matching(params["service"], start, end, limit)
            return 200, _structured([jaeger_trace(t) for t in found], total=len(found))
        if path.startswith("/api/traces/"):
            trace = self.store.find(path.rsplit("/", 1)[1])
            if trace is None:
                return 404, _structured(None, [{"code": 404, "msg": "trace not found"}])
            return 200, _structured([jaeger_trace(trace)], total=1)
        return 404, "404 page not found\n"

    def tempo(self, path: str, params: dict[str, str]) -> tuple[int, object]:
        if path == "/api/search/tag/service.name/values":
            return 200, {"tagValues": self.store.services(), "metrics": {}}
        if path == "/api/search":
            match = TRACEQL_SERVICE.match(params.get("q", ""))
            if not match:
                return 400, "invalid TraceQL query: parse error\n"
            service = match.group(1).replace('\\"', '"').replace("\\\\", "\\")
            start, end = int(params["start"]) * 1_000_000, int(params["end"]) * 1_000_000 + 999_999
            found = self.store.matching(service, start, end, int(params.get("limit", "20")))
            return 200, {
                "traces": [
                    {
                        "traceID": t.trace_id.lstrip("0"),
                        "rootServiceName": t.root.service,
                        "rootTraceName": t.root.operation,
                        "startTimeUnixNano": str(t.start_us * 1000),
                        "durationMs": t.root.duration_us // 1000,
                    }
                    for t in found
                ],
                "metrics": {"inspectedBytes": "1024", "completedJobs": 1, "totalJobs": 1},
            }
        if path.startswith("/api/traces/"):
            trace = self.store.find(path.rsplit("/", 1)[1].rjust(32, "0").lower())
            if trace is None:
                return 404, "trace not found\n"
            return 200, otlp_trace(trace, self.canonical)
        return 404, "404 page not found\n"


# ----------------------------------------------------------------------------- realistic traces

SERVICE = "vllm-llama-3-8b"
GATEWAY = "api-gateway"


@dataclass
class Phases:
    """Median durations (ms) of one request's phases and how often an adapter load happens."""

    queue: float = 20.0
    prefill: float = 120.0
    decode: float = 900.0
    lora_load_ms: float = 150.0
    lora_probability: float = 0.02


HEALTHY = Phases()
LORA_FAULT = Phases(lora_load_ms=1800.0, lora_probability=0.7)
PREFILL_FAULT = Phases(prefill=1500.0)


class TraceFactory:
    """Request traces as an OpenAI-style gateway in front of a vLLM engine with LoRA adapters emits them."""

    def __init__(self, seed: int = 1, service: str = SERVICE, decode_steps: int = 0) -> None:
        self.rng = random.Random(seed)
        self.service = service
        self.decode_steps = decode_steps  # engines that trace every scheduler step emit one span each

    def _id(self, digits: int) -> str:
        return f"{self.rng.getrandbits(digits * 4):0{digits}x}"

    def _ms(self, median: float) -> int:
        return max(1, int(median * 1000 * self.rng.lognormvariate(0, 0.25)))

    def request(self, start_us: int, phases: Phases, error: bool = False) -> FakeTrace:
        tid = self._id(32)
        spans: list[FakeSpan] = []

        def span(parent: FakeSpan | None, service: str, op: str, start: int, dur: int, err: bool = False) -> FakeSpan:
            s = FakeSpan(self._id(16), parent.span_id if parent else None, service, op, start, dur, err)
            spans.append(s)
            return s

        t = start_us + 300
        queue = self._ms(phases.queue)
        lora = 0
        if self.rng.random() < phases.lora_probability:
            lora = self._ms(phases.lora_load_ms)
        prefill, decode = self._ms(phases.prefill), self._ms(phases.decode)
        engine_dur = queue + lora + prefill + decode + 200
        root = span(None, GATEWAY, "POST /v1/chat/completions", start_us, engine_dur + 800, error)
        engine = span(root, self.service, "llm_request", t, engine_dur, error)
        span(engine, self.service, "scheduler.wait", t + 50, queue)
        cursor = t + 50 + queue
        if lora:
            load = span(engine, self.service, "lora_adapter.load", cursor, lora)
            read, compile_, inject = int(lora * 0.38), int(lora * 0.28), int(lora * 0.17)
            span(load, self.service, "lora_adapter.read_weights", cursor + 10, read)
            span(load, self.service, "lora_adapter.compile_kernels", cursor + 10 + read, compile_)
            span(load, self.service, "lora_adapter.inject_layers", cursor + 10 + read + compile_, inject)
            cursor += lora
        span(engine, self.service, "prefill", cursor, prefill)
        decoding = span(engine, self.service, "decode", cursor + prefill, decode, error)
        step = decode // self.decode_steps if self.decode_steps else 0
        for i in range(self.decode_steps):
            span(decoding, self.service, "decode_step", cursor + prefill + i * step, step)
        return FakeTrace(tid, spans)

    def vllm_native(self, start_us: int, phases: Phases, error: bool = False) -> FakeTrace:
        """What vLLM itself exports: one `llm_request` SERVER span, its phases as `gen_ai.latency.*`
        attributes in seconds (vllm/tracing.py SpanAttributes; OutputProcessor.do_tracing)."""
        queue, prefill, decode = self._ms(phases.queue), self._ms(phases.prefill), self._ms(phases.decode)
        attributes = {
            "gen_ai.latency.time_in_queue": queue / 1e6,
            "gen_ai.latency.time_in_model_prefill": prefill / 1e6,
            "gen_ai.latency.time_in_model_decode": decode / 1e6,
            "gen_ai.latency.e2e": (queue + prefill + decode + 5000) / 1e6,
        }
        span = FakeSpan(
            self._id(16),
            None,
            self.service,
            "llm_request",
            start_us,
            queue + prefill + decode + 5000,
            error,
            attributes,
        )
        return FakeTrace(self._id(32), [span])

    def window(
        self,
        start_us: int,
        end_us: int,
        onset_us: int,
        fault: Phases,
        per_minute: float = 6.0,
        error_rate_after: float = 0.0,
        vllm_native: bool = False,
    ) -> list[FakeTrace]:
        """Requests every ~1/per_minute minutes over [start, end); `fault` phases from `onset`."""
        traces, t = [], start_us
        make = self.vllm_native if vllm_native else self.request
        while t < end_us:
            after = t >= onset_us
            traces.append(make(t, fault if after else HEALTHY, error=after and self.rng.random() < error_rate_after))
            t += int(self.rng.expovariate(per_minute / 60_000_000))
        return traces
