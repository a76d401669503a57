"""The fuzzer's engine: cases generated from the seed corpus by a seeded RNG, sent through the ASGI
test client or a raw socket to a real server, and judged.

The rules every answer must keep, whatever the request:
- no 5xx, and an answer at all (no hang past the client's timeout, no dropped connection);
- a status the OpenAPI document declares for the operation, and a body in its documented error
  shape: a 422's `detail` is a list of field errors (`loc`, `msg`, `type`), every other 4xx a
  `detail` string that says what is wrong; only a request the HTTP server itself cannot parse
  (bad framing, sent over a raw socket) may get the server's own plain 400;
- nothing stored from a refused request (the intake tables' row counts before and after), and an
  accepted notification or feedback stored (one more notification or feedback row);
- where the mutation alone decides the answer (a NaN, a limit exceeded, a missing token), that
  answer.
"""

from __future__ import annotations

import json
import random
import socket
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.fuzz import corpus
from tests.fuzz.mutators import (
    ACCEPT,
    CURSOR_FIELDS,
    FEEDBACK,
    QUERY_VALUES,
    RAW_QUERIES,
    REFUSE,
    RELEVANCE_ONLY,
    SYNTAX,
    WEBHOOK,
    Expect,
    Limits,
    Mutator,
    cursor_of,
    cursor_raw,
)

WEBHOOK_TEMPLATE = "/api/v1/alertmanager"
SEARCH_TEMPLATE = "/api/v1/incidents"
INCIDENT_TEMPLATE = "/api/v1/incidents/{incident_id}"
SIMILAR_TEMPLATE = "/api/v1/incidents/{incident_id}/similar"
FEEDBACK_TEMPLATE = "/api/v1/incidents/{incident_id}/feedback"
ACCURACY_TEMPLATE = "/api/v1/stats/accuracy"
GENERIC_400 = "There was an error parsing the body"  # FastAPI's, which names nothing
INTAKE_TABLES = ("incidents", "alerts", "notifications", "feedback")
CLOSED = 0  # the status tallied when the server closed the connection without an answer


@dataclass(frozen=True)
class Framing:
    """How a body goes on the wire over a raw socket: the framing's header lines and the exact bytes
    after the blank line; `half_close` shuts the socket's sending side once they are sent."""

    name: str
    head: bytes
    wire: bytes
    half_close: bool = False


@dataclass
class Case:
    index: int
    op: str  # webhook, search, incident, similar, feedback_get, feedback_post, accuracy
    kind: str  # what the mutators did, for the tallies
    method: str
    template: str
    path: str
    query: str = ""  # on the wire, percent-encoded
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    framing: Framing | None = None  # set: only a raw socket can send it
    declared: bytes | None = None  # a Content-Length header other than the body's length (sent only through ASGI)
    expect: frozenset[int] | None = None

    @property
    def target(self) -> str:
        return self.path + ("?" + self.query if self.query else "")

    def describe(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "op": self.op,
            "kind": self.kind,
            "method": self.method,
            "target": self.target,
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in self.headers],
            "framing": self.framing.name if self.framing else None,
            "declared": self.declared.decode("latin-1") if self.declared is not None else None,
            "expect": sorted(self.expect) if self.expect else None,
            "body_bytes": len(self.body),
        }


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    server_level: bool = False  # answered by the HTTP server (uvicorn's parser), not the app


@dataclass
class Context:
    """What the generator needs to know about the service under test."""

    webhook_token: str
    api_token: str
    category: str  # a taxonomy id, for feedback
    incident_ids: list[int]  # incidents that exist (the seeds, posted first)
    time_fingerprint: str  # the cursor fingerprint of a search without filters
    relevance_fingerprint: str  # ... and of `q=queue`
    limits: Limits = field(default_factory=Limits)
    framing: bool = True  # generate cases only a raw socket can send
    slow: int = 2  # how many cases may wait out RCA_REQUEST_BODY_TIMEOUT_SECONDS (408)
    asgi_headers: bool = True  # generate Content-Length headers that only the ASGI client can send


def make_context(webhook_token: str, api_token: str, incident_ids: list[int], **overrides: Any) -> Context:
    """The context for a service whose incidents `incident_ids` exist, with its cursors' fingerprints."""
    from rca.diagnosis.ranking import taxonomy
    from rca.queries.cursor import _fingerprint  # what the API binds a cursor to: its search's filters
    from rca.store.incidents import IncidentFilter

    return Context(
        webhook_token=webhook_token,
        api_token=api_token,
        category=next(iter(taxonomy())),
        incident_ids=incident_ids,
        time_fingerprint=_fingerprint(IncidentFilter()),
        relevance_fingerprint=_fingerprint(IncidentFilter(q="queue")),
        **overrides,
    )


# --------------------------------------------------------------------------- generation


def _pick(rng: random.Random, weighted: list[tuple[Mutator, int]]) -> Mutator:
    mutators, weights = zip(*weighted, strict=True)
    return rng.choices(mutators, weights)[0]


def _resolve(expect: Expect, accept: int, syntax: int) -> frozenset[int] | None:
    if expect == ACCEPT:
        return frozenset({accept})
    if expect == SYNTAX:
        return frozenset({syntax})
    if expect == REFUSE:
        return frozenset({422})
    return expect if isinstance(expect, frozenset) else None


def _auth(rng: random.Random, token: str, basic: bool) -> tuple[list[tuple[bytes, bytes]], str, bool]:
    """Authorization headers: mostly right, now and then missing or wrong. (headers, kind, refused)"""
    import base64

    good = [(b"authorization", f"Bearer {token}".encode())]
    roll = rng.random()
    if roll < 0.93:
        return good, "", False
    variants: list[tuple[list[tuple[bytes, bytes]], str, bool]] = [
        ([], "auth:missing", True),
        ([(b"authorization", b"Bearer wrong-token")], "auth:wrong", True),
        ([(b"authorization", b"Bearer ")], "auth:empty", True),
        ([(b"authorization", b"Bearer \xff\xfe")], "auth:latin1", True),
        ([(b"authorization", b"Basic !!!notbase64")], "auth:basic-garbage", True),
        ([(b"authorization", f"bearer  {token} ".encode())], "auth:lowercase", False),
        ([(b"authorization", b"Bearer x"), (b"authorization", f"Bearer {token}".encode())], "auth:two", True),
    ]
    if basic:
        user_pass = base64.b64encode(f"alertmanager:{token}".encode())
        variants.append(([(b"authorization", b"Basic " + user_pass)], "auth:basic", False))
        variants.append(([(b"authorization", b"Basic " + base64.b64encode(b"\xff:\xfe"))], "auth:basic-bytes", True))
    return rng.choice(variants)


CONTENT_TYPES: list[tuple[bytes | None, bool]] = [  # (value, FastAPI parses the body as JSON)
    (b"application/json", True),
    (None, False),
    (b"text/plain", False),
    (b"application/x-www-form-urlencoded", False),
    (b"multipart/form-data; boundary=x", False),
    (b"application/json; charset=utf-16", True),
    (b"APPLICATION/JSON", True),
    (b"application/merge-patch+json", True),
    (b"application/jsonx", False),
    (b"json", False),
    (b"application/json; charset=\xff", True),
]


def _content_type(rng: random.Random) -> tuple[list[tuple[bytes, bytes]], bool, str]:
    if rng.random() < 0.85:
        return [(b"content-type", b"application/json")], True, ""
    value, parsed = rng.choice(CONTENT_TYPES)
    kind = f"content_type:{value.decode('latin-1') if value else 'none'}"
    return ([(b"content-type", value)] if value is not None else []), parsed, kind


def _chunks(rng: random.Random, body: bytes, extensions: bool) -> bytes:
    out, at = b"", 0
    while at < len(body):
        size = min(len(body) - at, rng.choice([1, 7, 100, 4096, 65536]))
        ext = b";fuzz=1" if extensions and rng.random() < 0.5 else b""
        out += f"{size:x}".encode() + ext + b"\r\n" + body[at : at + size] + b"\r\n"
        at += size
    return out + b"0\r\n\r\n"


def _framing(rng: random.Random, case: Case, ctx: Context) -> tuple[Framing, frozenset[int] | None]:
    """A framing of the case's body that only a raw socket can send, and what it changes in the answer."""
    body, expect = case.body, case.expect
    length = f"content-length: {len(body)}\r\n".encode()
    truncated = frozenset({400, 413, 422}) if case.op == "webhook" else frozenset({413, 422})
    empty = frozenset({400}) if case.op == "webhook" else frozenset({422})
    over = body + b" " * (ctx.limits.max_body_bytes + 1 - len(body))  # a chunk that brings more than the limit
    options: list[tuple[Framing, frozenset[int] | None]] = [
        (Framing("chunked", b"transfer-encoding: chunked\r\n", _chunks(rng, body, False)), expect),
        (Framing("chunked+ext", b"transfer-encoding: chunked\r\n", _chunks(rng, body, True)), expect),
        (Framing("expect-100", length + b"expect: 100-continue\r\n", body), expect),
        (Framing("no-length", b"", body), empty),
        (Framing("bad-chunk-size", b"transfer-encoding: chunked\r\n", b"zz\r\n" + body), frozenset({400})),
        (Framing("chunk-over-limit", b"transfer-encoding: chunked\r\n", b"7fffffff\r\n" + over), frozenset({413})),
        (
            Framing(
                "cl-invalid", b"content-length: " + rng.choice([b"abc", b"-1", b"1 2", b"+5", b"0x10"]) + b"\r\n", body
            ),
            frozenset({400}),
        ),  # fmt: skip
        (Framing("cl-twice", length + f"content-length: {len(body) + 1}\r\n".encode(), body), frozenset({400})),
        (Framing("cl+chunked", length + b"transfer-encoding: chunked\r\n", _chunks(rng, body, False)), None),
        (Framing("te-gzip", b"transfer-encoding: gzip\r\n", body), frozenset({400})),
        (
            Framing("cl-over-limit", f"content-length: {ctx.limits.max_body_bytes + 1}\r\n".encode(), body[:100]),
            frozenset({413}),
        ),  # fmt: skip
        (Framing("cl-long-eof", f"content-length: {len(body) + 10}\r\n".encode(), body, half_close=True), None),
    ]
    if len(body) > 1 and not body.endswith(b" "):
        cut = rng.randrange(1, len(body))
        options.append((Framing("cl-short", f"content-length: {cut}\r\n".encode(), body), truncated))
    if ctx.slow > 0:
        options.append((Framing("cl-long", f"content-length: {len(body) + 10}\r\n".encode(), body), frozenset({408})))
    framing, changed = rng.choice(options)
    if framing.name == "cl-long":
        ctx.slow -= 1
    server_level = framing.name in ("bad-chunk-size", "cl-invalid", "cl-twice", "te-gzip")
    if expect is not None and 401 in expect and not server_level and framing.name != "cl-long-eof":
        if case.op == "webhook":
            changed = frozenset({401})  # the webhook checks the token before it reads the body
        elif changed != expect:
            changed = None  # feedback's body is read (and may be refused) before the token is checked
    return framing, changed


def _declared(rng: random.Random, case: Case, ctx: Context) -> tuple[bytes, frozenset[int] | None]:
    """A Content-Length header that disagrees with the body, as only an ASGI client can send it."""
    value, expect = rng.choice(
        [
            (str(ctx.limits.max_body_bytes + 1).encode(), frozenset({413})),
            (b"9" * 5000, frozenset({413})),
            (b"\xb2", case.expect),  # "2" in superscript: str.isdigit() says yes, int() says no
            (b"\xd9\xa3", case.expect),
            (b"00000" + str(len(case.body)).encode(), case.expect),
            (b"-5", case.expect),
            (b"", case.expect),
        ]
    )
    if case.op == "webhook" and case.expect == frozenset({401}):
        expect = frozenset({401})
    return value, expect


def _post(rng: random.Random, ctx: Context, index: int, op: str, doc: Any, table: list[tuple[Mutator, int]]) -> Case:
    mutant = _pick(rng, table)(rng, doc, ctx.limits)
    accept, syntax = (200, 400) if op == "webhook" else (201, 422)
    expect = _resolve(mutant.expect, accept, syntax)
    kinds = [mutant.kind]
    auth, auth_kind, refused = _auth(rng, ctx.webhook_token if op == "webhook" else ctx.api_token, op == "webhook")
    content_type, parsed, ct_kind = _content_type(rng)
    if op == "webhook":
        template = path = WEBHOOK_TEMPLATE
        if refused:
            expect = frozenset({401})
    else:
        template = FEEDBACK_TEMPLATE
        incident, id_expect = _incident_id(rng, ctx, mostly_existing=0.95)
        path = FEEDBACK_TEMPLATE.format(incident_id=incident)
        if not parsed:
            expect = frozenset({422})  # the body is not read as JSON: not an object
        if id_expect == frozenset({404}) and expect == frozenset({201}):
            expect = id_expect
        elif id_expect == frozenset({422}):
            expect = frozenset({422})
        elif id_expect is None and expect == frozenset({201}):
            expect = None
        if refused:  # a body that is not JSON is refused before the token is looked at
            expect = frozenset({401}) if expect in (frozenset({201}), frozenset({404})) else frozenset({401, 422})
    case = Case(index, op, "", "POST", template, path, headers=auth + content_type, body=mutant.body, expect=expect)
    kinds += [k for k in (auth_kind, ct_kind) if k]
    roll = rng.random()
    if ctx.framing and roll < 0.08:
        case.framing, case.expect = _framing(rng, case, ctx)
        kinds.append(f"framing:{case.framing.name}")
    elif ctx.asgi_headers and roll < 0.11:
        case.declared, case.expect = _declared(rng, case, ctx)
        kinds.append("declared_length")
    case.kind = " ".join(kinds)
    return case


INCIDENT_IDS: list[tuple[str, frozenset[int] | None]] = [
    ("2147483647", frozenset({404})),
    ("0", frozenset({422})),
    ("-1", frozenset({422})),
    ("2147483648", frozenset({422})),
    ("9" * 30, frozenset({422})),
    ("abc", frozenset({422})),
    ("1.0", None),  # pydantic reads "1.0" as the integer 1
    ("1e3", frozenset({422})),
    ("%20", frozenset({422})),
    ("%EF%BC%91", None),  # a full-width 1
    ("1%00", frozenset({422})),
    ("0x1", frozenset({422})),
]


def _incident_id(rng: random.Random, ctx: Context, mostly_existing: float) -> tuple[str, frozenset[int] | None]:
    if rng.random() < mostly_existing:
        return str(rng.choice(ctx.incident_ids)), None
    return rng.choice(INCIDENT_IDS)


def _query(pairs: list[tuple[str, str]]) -> str:
    return "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in pairs)


def _search(rng: random.Random, ctx: Context, index: int) -> Case:
    pairs = list(rng.choice(corpus.search_seeds()))
    expects: list[Expect] = []
    kinds: list[str] = []
    roll = rng.random()
    query: str | None = None
    if roll < 0.08:
        kinds.append("seed")
        expects.append(ACCEPT)
    elif roll < 0.7:
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            name = rng.choice([n for n in QUERY_VALUES if n != "cursor"])
            value, _ = rng.choice(QUERY_VALUES[name])
            pairs = [(k, v) for k, v in pairs if k != name or rng.random() < 0.3] + [(name, value)]
            kinds.append(f"query:{name}")
        # A parameter given twice: a list (label, signal) keeps every value, any other only the last.
        last = {name: n for n, (name, _) in enumerate(pairs)}
        counted = [(k, v) for n, (k, v) in enumerate(pairs) if k in ("label", "signal") or last[k] == n]
        expects += [_query_expect(name, value, pairs) for name, value in counted]
        if any(k == "sort" and v == "relevance" for k, v in pairs) and not any(k == "q" for k, v in pairs):
            expects.append(REFUSE)
    elif roll < 0.8:
        query, expect = rng.choice(RAW_QUERIES)
        kinds.append("raw_query")
        expects.append(expect)
    else:
        pairs, expect, kind = _cursor(rng, ctx)
        kinds.append(kind)
        expects.append(expect)
    if any(e == REFUSE for e in expects):
        expect_set: frozenset[int] | None = frozenset({422})
    elif expects and all(e == ACCEPT for e in expects):
        expect_set = frozenset({200})
    else:
        expect_set = None
    auth, auth_kind, refused = _auth(rng, ctx.api_token, basic=False)
    if refused:
        expect_set = frozenset({401})
    kinds += [auth_kind] if auth_kind else []
    return Case(
        index,
        "search",
        " ".join(kinds),
        "GET",
        SEARCH_TEMPLATE,
        SEARCH_TEMPLATE,
        query=query if query is not None else _query(pairs),
        headers=auth,
        expect=expect_set,
    )


def _query_expect(name: str, value: str, pairs: list[tuple[str, str]]) -> Expect:
    """What one parameter of the final query calls for: a seed's own value is accepted."""
    expect = next((e for candidate, e in QUERY_VALUES.get(name, []) if candidate == value), ACCEPT)
    dependent = name in ("since", "until", "sort") or (name == "q" and ("sort", "relevance") in pairs)
    return None if expect == ACCEPT and dependent else expect


def _cursor(rng: random.Random, ctx: Context) -> tuple[list[tuple[str, str]], Expect, str]:
    relevance = rng.random() < 0.4
    data: dict[str, Any] = {
        "o": "relevance" if relevance else "time",
        "f": ctx.relevance_fingerprint if relevance else ctx.time_fingerprint,
        "t": "2026-01-15T10:00:00+00:00",
        "i": rng.choice(ctx.incident_ids),
        "s": 0.25 if relevance else None,
        "a": "2026-01-15T10:00:00+00:00" if relevance else None,
    }
    base = [("q", "queue"), ("limit", "1")] if relevance else [("limit", "1")] + [("sort", "time")] * rng.randrange(2)
    roll = rng.random()
    expect: Expect
    if roll < 0.15:
        return [*base, ("cursor", cursor_of(data))], ACCEPT, "cursor:valid"
    if roll < 0.7:
        name = rng.choice(list(CURSOR_FIELDS))
        value, expect = rng.choice(CURSOR_FIELDS[name])
        data[name] = value
        if name in RELEVANCE_ONLY and not relevance:
            expect = None
        return [*base, ("cursor", cursor_of(data))], expect, f"cursor:{name}"
    if roll < 0.8:
        del data[rng.choice(list(data))]
        return [*base, ("cursor", cursor_of(data))], REFUSE, "cursor:missing"
    raw = rng.choice([b"[]", b"null", b"1", b'"t"', b"{", b"\xff\xfe", json.dumps([data]).encode(), b"{}" * 200])
    cursor = cursor_raw(raw)
    return [*base, ("cursor", cursor)], REFUSE, "cursor:not_an_object"


def _read(rng: random.Random, ctx: Context, index: int) -> Case:
    op = rng.choice(["incident", "similar", "feedback_get", "accuracy"])
    auth, auth_kind, refused = _auth(rng, ctx.api_token, basic=False)
    pairs: list[tuple[str, str]] = []
    expect: frozenset[int] | None
    if op == "accuracy":
        template = path = ACCURACY_TEMPLATE
        expect = frozenset({200})
        if rng.random() < 0.5:
            pairs = [("x", rng.choice(["1", "\x00", "é"]))]
            expect = frozenset({422}) if pairs[0][1] == "\x00" else expect
        kind = "accuracy"
    else:
        template = {"incident": INCIDENT_TEMPLATE, "similar": SIMILAR_TEMPLATE, "feedback_get": FEEDBACK_TEMPLATE}[op]
        incident, expect = _incident_id(rng, ctx, mostly_existing=0.6)
        if expect is None and op in ("incident", "feedback_get") and incident.isdigit():
            expect = frozenset({200})
        path = template.format(incident_id=incident)
        kind = f"{op}:id"
        if op == "similar" and rng.random() < 0.5:
            value = rng.choice(["1", "50", "0", "51", "x", "-1", ""])
            pairs = [("limit", value)]
            if value not in ("1", "50"):
                expect = frozenset({422})
            kind = "similar:limit"
    if refused:
        expect = frozenset({401})
    return Case(
        index,
        op,
        " ".join([kind] + ([auth_kind] if auth_kind else [])),
        "GET",
        template,
        path,
        query=_query(pairs),
        headers=auth,
        expect=expect,
    )


def generate(seed: int, count: int, ctx: Context) -> list[Case]:
    """`count` cases, the same for the same seed and context."""
    rng = random.Random(seed)
    webhook_seeds = corpus.webhook_seeds()
    feedback_seeds = corpus.feedback_seeds(ctx.category)
    cases = []
    for index in range(count):
        roll = rng.random()
        if roll < 0.55:
            doc = corpus.copy_of(rng.choice(webhook_seeds))
            if rng.random() < 0.7:  # a group of its own (a new incident) or one of a few shared ones
                doc["groupKey"] = f"fuzz-{seed}-{index}" if rng.random() < 0.5 else f"fuzz-shared-{rng.randrange(8)}"
            cases.append(_post(rng, ctx, index, "webhook", doc, WEBHOOK))
        elif roll < 0.67:
            doc = corpus.copy_of(rng.choice(feedback_seeds))
            cases.append(_post(rng, ctx, index, "feedback_post", doc, FEEDBACK))
        elif roll < 0.92:
            cases.append(_search(rng, ctx, index))
        else:
            cases.append(_read(rng, ctx, index))
    return cases


# --------------------------------------------------------------------------- sending


def send_asgi(client: Any, case: Case) -> Reply:
    """Through an httpx-style client (FastAPI's TestClient): the ASGI app itself, no HTTP parser."""
    headers = list(case.headers)
    if case.declared is not None:
        headers.append((b"content-length", case.declared))
    content = case.body if case.method == "POST" else None
    reply = client.request(case.method, case.target, content=content, headers=headers)
    return Reply(reply.status_code, {k.lower(): v for k, v in reply.headers.items()}, reply.content)


def send_raw(host: str, port: int, case: Case, timeout: float = 30) -> Reply:
    """Over a socket, byte for byte: the framing the case asks for, then read until the server closes."""
    head = f"{case.method} {case.target} HTTP/1.1\r\nhost: {host}:{port}\r\nconnection: close\r\n".encode()
    head += b"".join(k + b": " + v + b"\r\n" for k, v in case.headers)
    if case.framing is not None:
        framing, wire = case.framing.head, case.framing.wire
    elif case.method == "POST" or case.declared is not None:
        declared = case.declared if case.declared is not None else str(len(case.body)).encode()
        framing, wire = b"content-length: " + declared + b"\r\n", case.body
    else:
        framing, wire = b"", b""
    received = b""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        try:
            sock.sendall(head + framing + b"\r\n" + wire)
            if case.framing is not None and case.framing.half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # answered and closed before the whole body was sent (413): read the answer
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    if not received and case.framing is not None and case.framing.half_close:
        return Reply(CLOSED, {}, b"", server_level=True)  # the client went away mid-body: nobody to answer
    return parse_response(received)


def parse_response(data: bytes) -> Reply:
    while data.startswith(b"HTTP/1.1 1"):  # 100 Continue and other interim answers
        data = data.partition(b"\r\n\r\n")[2]
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    if not lines[0].startswith(b"HTTP/1."):
        raise ConnectionError(f"no HTTP answer: {data[:200]!r}")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        body = body[: int(headers["content-length"])]
    # uvicorn's own answer to what it cannot parse (h11 sends no Date header with it, httptools does):
    # a plain-text 400 that closes the connection; every 4xx of the app is JSON.
    server_level = (
        status == 400
        and headers.get("content-type", "").startswith("text/plain")
        and headers.get("connection", "").lower() == "close"
    )
    return Reply(status, headers, body, server_level)


# --------------------------------------------------------------------------- judging


def documented_statuses(spec: dict[str, Any]) -> dict[tuple[str, str], set[int]]:
    return {
        (method.upper(), path): {int(code) for code in operation["responses"]}
        for path, item in spec["paths"].items()
        for method, operation in item.items()
    }


def error_shape(reply: Reply) -> str | None:
    """What is wrong with a 4xx's body, or None when it is the documented error shape."""
    try:
        body = json.loads(reply.body)
    except ValueError:
        return f"not JSON: {reply.body[:200]!r}"
    if not isinstance(body, dict) or set(body) != {"detail"}:
        return f"not {{'detail': ...}}: {str(body)[:200]}"
    detail = body["detail"]
    if reply.status == 422:
        if not isinstance(detail, list) or not detail:
            return f"a 422 without field errors: {str(body)[:200]}"
        for error in detail:
            loc, msg, type_ = error.get("loc"), error.get("msg"), error.get("type")
            if not (isinstance(loc, list) and loc and loc[0] in ("body", "query", "path", "header")):
                return f"a field error without a location: {error}"
            if not (isinstance(msg, str) and msg.strip() and isinstance(type_, str) and type_):
                return f"a field error that names nothing: {error}"
        return None
    if not isinstance(detail, str) or not detail.strip():
        return f"a {reply.status} without a message: {str(body)[:200]}"
    if detail == GENERIC_400:
        return f"a {reply.status} that does not say what is wrong: {detail!r}"
    return None


def judge(
    case: Case, reply: Reply, statuses: dict[tuple[str, str], set[int]], before: dict[str, int], after: dict[str, int]
) -> list[str]:
    problems = []
    changed = {table: after[table] - before[table] for table in before if after[table] != before[table]}
    if reply.status >= 500:
        problems.append(f"server error {reply.status}: {reply.body[:300]!r}")
    if reply.status == CLOSED:
        if case.framing is None or not case.framing.half_close:
            problems.append("the server closed the connection without an answer")
    elif reply.server_level:
        if case.framing is None and case.declared is None:
            problems.append(f"the HTTP server refused a well-framed request: {reply.status} {reply.body[:200]!r}")
        elif reply.status != 400:
            problems.append(f"the HTTP server answered {reply.status}: {reply.body[:200]!r}")
    elif reply.status >= 400:
        if reply.status not in statuses.get((case.method, case.template), set()):
            problems.append(f"{reply.status} is not documented for {case.method} {case.template}")
        shape = error_shape(reply)
        if shape:
            problems.append(shape)
    if (reply.status >= 400 or reply.status == CLOSED) and changed:
        problems.append(f"stored from a refused request: {changed}")
    if 200 <= reply.status < 400 and case.method == "GET" and changed:
        problems.append(f"a read changed rows: {changed}")
    if case.op == "webhook" and reply.status == 200 and changed.get("notifications") != 1:
        problems.append(f"accepted but not stored as one notification: {changed}")
    if case.op == "feedback_post" and reply.status == 201 and changed.get("feedback") != 1:
        problems.append(f"feedback accepted but not stored: {changed}")
    if case.expect is not None and reply.status not in case.expect:
        problems.append(f"expected {sorted(case.expect)}, got {reply.status}: {reply.body[:300]!r}")
    return problems


@dataclass
class Failure:
    case: Case
    reply: Reply | None
    problems: list[str]


@dataclass
class Tally:
    by_status: Counter[int] = field(default_factory=Counter)
    by_op: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    failures: list[Failure] = field(default_factory=list)
    accepted: int = 0
    refused: int = 0
    stored_on_refusal: int = 0
    server_errors: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        statuses = ", ".join(f"{code}: {n}" for code, n in sorted(self.by_status.items()))
        ops = "; ".join(
            f"{op} " + ", ".join(f"{c}: {n}" for c, n in sorted(counts.items()))
            for op, counts in sorted(self.by_op.items())
        )
        return (
            f"{sum(self.by_status.values())} requests in {self.seconds:.1f} s; by status {{{statuses}}}; "
            f"accepted {self.accepted}, refused {self.refused}, 5xx {self.server_errors}, "
            f"stored from refused requests {self.stored_on_refusal}, failures {len(self.failures)}\n"
            f"  by operation: {ops}"
        )


def run(
    cases: list[Case],
    send: Callable[[Case], Reply],
    count_rows: Callable[[], dict[str, int]],
    statuses: dict[tuple[str, str], set[int]],
    on_failure: Callable[[Failure], None] | None = None,
) -> Tally:
    tally = Tally()
    started = time.monotonic()
    before = count_rows()
    for case in cases:
        try:
            reply = send(case)
        except Exception as exc:  # a dropped connection or a hang is a finding too
            failure = Failure(case, None, [f"no answer: {type(exc).__name__}: {exc}"])
            tally.failures.append(failure)
            tally.server_errors += 1
            if on_failure:
                on_failure(failure)
            before = count_rows()
            continue
        after = count_rows()
        problems = judge(case, reply, statuses, before, after)
        tally.by_status[reply.status] += 1
        tally.by_op[case.op][reply.status] += 1
        if reply.status >= 500:
            tally.server_errors += 1
        if reply.status >= 400 or reply.status == CLOSED:
            tally.refused += 1
            tally.stored_on_refusal += int(after != before)
        else:
            tally.accepted += 1
        if problems:
            failure = Failure(case, reply, problems)
            tally.failures.append(failure)
            if on_failure:
                on_failure(failure)
        before = after
    tally.seconds = time.monotonic() - started
    return tally


def save(failure: Failure, folder: Path) -> Path:
    """The failing request (its body as sent, and what it was) and the answer, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"case-{failure.case.index:06d}"
    stem.with_suffix(".body").write_bytes(failure.case.body)
    if failure.case.framing is not None:
        stem.with_suffix(".wire").write_bytes(failure.case.framing.head + b"\r\n" + failure.case.framing.wire)
    reply = failure.reply
    record = {
        "case": failure.case.describe(),
        "problems": failure.problems,
        "reply": None
        if reply is None
        else {"status": reply.status, "headers": reply.headers, "body": reply.body[:4000].decode("utf-8", "replace")},
    }
    stem.with_suffix(".json").write_text(json.dumps(record, indent=2, ensure_ascii=False))
    return stem
