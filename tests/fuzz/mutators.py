"""Mutators: each turns a valid seed into a malformed (or borderline) request, deterministically
from the RNG it is given, and says what answer the mutation alone calls for when it knows:
`ACCEPT` (the seed's own 2xx), `SYNTAX` (not JSON: the webhook's 400, FastAPI's 422 elsewhere),
`REFUSE` (422), a set of statuses, or None (it depends on where the mutation landed; then only the
general rules apply: no 5xx, the documented error shape, nothing stored from a refusal).

JSON-level mutators work on the decoded seed and splice raw text where JSON's own encoder cannot
write it (NaN, 1e999, invalid UTF-8, a lone surrogate escape, duplicate keys); byte-level ones work
on the serialized body.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RAW = "@@FUZZ-RAW@@"  # a value replaced by raw bytes after serialization
RAW_KEY = "@@FUZZ-RAW-KEY@@"

ACCEPT = "accept"
SYNTAX = "syntax"
REFUSE = "refuse"
Expect = str | frozenset[int] | None


@dataclass(frozen=True)
class Limits:
    """The documented limits the fuzzer probes at and just over (docs/intake.md, "Webhook limits")."""

    max_body_bytes: int = 1024 * 1024
    max_alerts: int = 1000
    max_labels: int = 100
    max_name_chars: int = 256
    max_label_value_chars: int = 2048
    max_annotation_value_chars: int = 65536
    max_group_key_bytes: int = 2048
    name_chars: int = 255  # alertname label and receiver: their columns
    fingerprint_chars: int = 64
    max_depth: int = 32
    max_int_digits: int = 308
    feedback_note_chars: int = 4000
    feedback_category_chars: int = 64
    feedback_verdicts: int = 100
    search_q_chars: int = 500
    search_cursor_chars: int = 500


@dataclass
class Mutant:
    kind: str
    body: bytes
    expect: Expect = None


# --------------------------------------------------------------------------- JSON helpers


def dumps(doc: Any, rng: random.Random | None = None) -> bytes:
    """Compact JSON, or now and then indented (both are valid and must be treated alike)."""
    indent = 2 if rng is not None and rng.random() < 0.15 else None
    separators = None if indent else (",", ":")
    return json.dumps(doc, ensure_ascii=bool(rng and rng.random() < 0.3), indent=indent, separators=separators).encode()


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every node's path below the root, containers included."""
    found: list[tuple[Any, ...]] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        found.append((*prefix, key))
        found.extend(paths(value, (*prefix, key)))
    return found


def containers(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every object (the root is ())."""
    found = [prefix] if isinstance(doc, dict) else []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        found.extend(containers(value, (*prefix, key)))
    return found


def get(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def put(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    get(doc, path[:-1])[path[-1]] = value


def delete(doc: Any, path: tuple[Any, ...]) -> None:
    del get(doc, path[:-1])[path[-1]]


def splice(doc: Any, raw: bytes, rng: random.Random, path: tuple[Any, ...] | None = None) -> bytes:
    """`doc` serialized with `raw` (bytes that need not be JSON) as the value at `path` (a random
    node when None)."""
    target = path if path is not None else rng.choice(paths(doc))
    put(doc, target, RAW)
    return dumps(doc, rng).replace(json.dumps(RAW).encode(), raw, 1)


def splice_key(doc: Any, raw_key: bytes, rng: random.Random) -> bytes:
    """`doc` with a new member in a random object whose key is `raw_key` (a JSON string's bytes)."""
    get(doc, rng.choice(containers(doc)))[RAW_KEY] = "v"
    return dumps(doc, rng).replace(json.dumps(RAW_KEY).encode(), raw_key, 1)


def depth_of(path: tuple[Any, ...]) -> int:
    """Containers from the root down to the one holding `path`'s last key, the root included."""
    return len(path)


# --------------------------------------------------------------------------- value pools

SCALARS: list[Any] = [None, True, False, 0, -1, 1.5, -0.0, "", "x", "4", "firing", [], {}, [1, "a"], {"a": 1}]
UNSTORABLE_TEXT = [b'"\\u0000"', b'"a\\u0000b"', b'"\\ud800"', b'"\\udfff"', b'"x\\ud800y"', b'"\\ud800\\u0041"']
STORABLE_TEXT = [
    b'"\\ud83d\\ude00"',  # a valid surrogate pair: one emoji
    b'"\\u2028\\u2029"',
    b'"\\u202e\\u200b\\ufeff"',
    b'"e\\u0301\\u0301\\u0301"',
    b'"\\\\\\"\\/\\b\\f\\n\\r\\t"',
]
INVALID_UTF8 = [
    b"\xff",
    b"\xfe\xff",
    b"\xc0\xaf",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\xe2\x82",
    b"\x80",
    b"\xf4\x90\x80\x80",
]
REFUSED_NUMBERS = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e999",
    b"-1e999",
    b"1E400",
    b"9" * 309,
    b"-" + b"9" * 309,
    b"9" * 5000,
]
ODD_NUMBERS = [b"1e308", b"-1.7976931348623157e308", b"5e-324", b"1e-400", b"9" * 308, b"-0", b"0e0", b"1E+2", b"0.0"]
NOT_JSON = [
    b"",
    b"   \n\t ",
    b"{",
    b"}",
    b"{'version': '4'}",
    b'{"version": "4",}',
    b'{"a" 1}',
    b"{/* comment */}",
    b'{"a": 01}',
    b'{"a": .5}',
    b'{"a": +1}',
    b'{"a": 0x10}',
    b'{"a": undefined}',
    b'{"a": nan}',
    b'{"a": "\\x41"}',
    b'{"a": "\\u12"}',
    b'{"a": "tab\there"}',
    b"{}{}",
    b'{"a": 1} x',
]
NOT_AN_OBJECT = [b"null", b"[]", b"[{}]", b"1", b'"text"', b"true", b"1e999"]


# --------------------------------------------------------------------------- mutators shared by JSON bodies

Mutator = Callable[[random.Random, Any, Limits], Mutant]


def keep(_rng: random.Random, doc: Any, _limits: Limits) -> Mutant:
    return Mutant("seed", dumps(doc, _rng), ACCEPT)


def drop_field(rng: random.Random, doc: Any, _limits: Limits) -> Mutant:
    path = rng.choice(paths(doc))
    delete(doc, path)
    return Mutant("drop_field", dumps(doc, rng))


def wrong_type(rng: random.Random, doc: Any, _limits: Limits) -> Mutant:
    path = rng.choice(paths(doc))
    before = get(doc, path)
    value = rng.choice([v for v in SCALARS if type(v) is not type(before)])
    put(doc, path, value)
    return Mutant("wrong_type", dumps(doc, rng))


def refused_number(rng: random.Random, doc: Any, _limits: Limits) -> Mutant:
    return Mutant("refused_number", splice(doc, rng.choice(REFUSED_NUMBERS), rng), REFUSE)


def odd_number(rng: random.Random, doc: Any, _limits: Limits) -> Mutant:
    return Mutant("odd_number", splice(doc, rng.choice(ODD_NUMBERS), rng))


def unstorable_text(rng: random.Random, doc: Any, _limits: Limits) -> Mutant:
    raw = rng.choice(UNSTORABLE_TEXT)
    if rng.random() < 0.3:
        return Mutant("unstorable_key", splice_key(doc, raw, rng), REFUSE)
    return Mutant("unstorable_text", splice(doc, raw, rng), REFUSE)


def storable_text(rng: random.Random, doc: Any, _limits: Limits) -> Mutant:
    return Mutant("storable_text", splice(doc, rng.choice(STORABLE_TEXT), rng))


def invalid_utf8(rng: random.Random, doc: Any, _limits: Limits) -> Mutant:
    bad = rng.choice(INVALID_UTF8)
    # Python's json decodes bytes with "surrogatepass": an encoded surrogate (CESU-8) becomes a lone
    # surrogate in the text, refused as unstorable (422) rather than as not JSON.
    expect: Expect = frozenset({400, 422}) if bad == b"\xed\xa0\x80" else SYNTAX
    return Mutant("invalid_utf8", splice(doc, b'"ab' + bad + b'cd"', rng), expect)


def nul_byte(rng: random.Random, doc: Any, _limits: Limits) -> Mutant:
    """A raw NUL byte: inside a string it is an unescaped control character, so not JSON."""
    body = dumps(doc, rng)
    at = rng.randrange(1, len(body))
    return Mutant("nul_byte", body[:at] + b"\x00" + body[at:], SYNTAX)


def reencoded(rng: random.Random, doc: Any, _limits: Limits) -> Mutant:
    """UTF-8 with a BOM, UTF-16 and UTF-32 (Python's json detects them), Latin-1."""
    text = json.dumps(doc, ensure_ascii=False)
    codec = rng.choice(["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1"])
    try:
        body = text.encode(codec)
    except UnicodeEncodeError:  # Latin-1 cannot carry the seed's CJK: replaced, still not UTF-8
        body = text.encode(codec, "replace")
    return Mutant(f"encoding:{codec}", body)


def nested(rng: random.Random, doc: Any, limits: Limits) -> Mutant:
    """A new member nesting arrays or objects at, just under and over the depth limit, or far over."""
    holder = rng.choice(containers(doc))
    levels_above = depth_of(holder) + 1  # containers from the root to the holder, both included
    room = limits.max_depth - levels_above  # nested containers that still fit
    count = rng.choice([room - 1, room, room + 1, room + 1, 100, 1000, 50_000])
    count = max(count, 1)
    opener, closer = (b"[", b"]") if rng.random() < 0.6 else (b'{"k":', b"}")
    raw = opener * count + b"1" + closer * count
    get(doc, holder)["fuzz_nested"] = RAW
    body = dumps(doc, rng).replace(json.dumps(RAW).encode(), raw, 1)
    return Mutant(f"nesting:{count}", body, REFUSE if count > room else None)


def duplicate_key(rng: random.Random, doc: Any, _limits: Limits) -> Mutant:
    """A top-level key given twice; JSON objects should not, and the last one wins in Python's json."""
    key = rng.choice(list(doc))
    bad = json.dumps(rng.choice([None, 5, [], "wrong"])).encode()
    body = dumps(doc)
    if rng.random() < 0.5:  # bad first: the good one that follows wins
        return Mutant("duplicate_key:first", b"{" + json.dumps(key).encode() + b":" + bad + b"," + body[1:], ACCEPT)
    return Mutant("duplicate_key:last", body[:-1] + b"," + json.dumps(key).encode() + b":" + bad + b"}")


def broken_syntax(rng: random.Random, doc: Any, _limits: Limits) -> Mutant:
    body = dumps(doc)
    choice = rng.random()
    if choice < 0.4:
        return Mutant("truncated", body[: rng.randrange(0, len(body) - 1)], SYNTAX)
    if choice < 0.6:
        return Mutant("not_json", rng.choice(NOT_JSON), SYNTAX)
    if choice < 0.75:
        raw = rng.choice(NOT_AN_OBJECT)
        return Mutant("not_an_object", raw, REFUSE)
    at = rng.randrange(len(body))
    flipped = bytes([body[at] ^ (1 << rng.randrange(8))])
    return Mutant("byte_flip", body[:at] + flipped + body[at + 1 :])


COMMON: list[tuple[Mutator, int]] = [
    (keep, 6),
    (drop_field, 6),
    (wrong_type, 12),
    (refused_number, 6),
    (odd_number, 4),
    (unstorable_text, 6),
    (storable_text, 4),
    (invalid_utf8, 4),
    (nul_byte, 2),
    (reencoded, 4),
    (nested, 5),
    (duplicate_key, 3),
    (broken_syntax, 8),
]


# --------------------------------------------------------------------------- webhook-specific mutators

TIMES: list[tuple[str, Expect]] = [
    ("2000-01-01T00:00:00Z", ACCEPT),
    ("2199-12-31T23:59:59.999999Z", ACCEPT),
    ("2026-01-15T10:00:00.123456789+05:30", ACCEPT),
    ("2026-01-15t10:00:00z", None),
    ("2026-01-15 10:00:00Z", None),
    ("2026-01-15T10:00:00-23:59", ACCEPT),
    ("1999-12-31T23:59:59.999999Z", REFUSE),
    ("2200-01-01T00:00:00Z", REFUSE),
    ("2200-01-01T00:00:00+00:01", ACCEPT),
    ("0001-01-01T00:00:00+01:00", REFUSE),
    ("0001-01-01T00:00:00-01:00", None),
    ("9999-12-31T23:59:59-01:00", REFUSE),
    ("9999-12-31T23:59:59.999999Z", REFUSE),
    ("0000-01-01T00:00:00Z", REFUSE),
    ("2026-02-30T00:00:00Z", REFUSE),
    ("2026-06-30T23:59:60Z", REFUSE),
    ("2026-01-15T24:00:00Z", None),
    ("2026-01-15T10:00:00+24:00", REFUSE),
    ("2026-01-15T10:00:00", REFUSE),  # no zone: not Alertmanager's RFC 3339
    ("2026-01-15", REFUSE),
    ("yesterday", REFUSE),
    ("", REFUSE),
    ("+275760-09-13T00:00:00Z", REFUSE),
    ("-000001-01-01T00:00:00Z", REFUSE),
]
TIME_NUMBERS: list[tuple[bytes, Expect]] = [
    (b"1768471200", None),
    (b"0", REFUSE),
    (b"-1", REFUSE),
    (b"1e20", REFUSE),
    (b"1e308", REFUSE),
    (b"1768471200123", None),
    (b"9" * 300, REFUSE),
]


def extreme_time(rng: random.Random, doc: dict[str, Any], _limits: Limits) -> Mutant:
    alert = rng.choice(doc["alerts"])
    field = rng.choice(["startsAt", "endsAt"])
    if rng.random() < 0.75:
        value, expect = rng.choice(TIMES)
        if field == "endsAt" and value.startswith("0001-01-01"):
            expect = ACCEPT  # Go's zero time, or near it: "not ended"
        alert[field] = value
        return Mutant(f"time:{field}", dumps(doc, rng), expect)
    raw, expect = rng.choice(TIME_NUMBERS)
    alert[field] = RAW
    return Mutant(f"time_number:{field}", dumps(doc).replace(json.dumps(RAW).encode(), raw, 1), expect)


def _text(rng: random.Random, chars: int) -> str:
    """`chars` characters, sometimes of two or four UTF-8 bytes each (limits count characters)."""
    alphabet = rng.choice(["a", "é", "東", "🦙", "ab"])
    return (alphabet * chars)[:chars]


def at_limit(rng: random.Random, doc: dict[str, Any], limits: Limits) -> Mutant:
    """One documented limit, exactly at it (accepted) or one over (refused)."""
    over = rng.random() < 0.5
    plus = 1 if over else 0
    expect: Expect = REFUSE if over else ACCEPT
    alert = rng.choice(doc["alerts"])
    alert.setdefault("annotations", {})
    which = rng.choice(
        ["label_value", "annotation_value", "name", "labels", "group_key", "alertname", "receiver", "fingerprint"]
        + ["alerts", "body"] * (1 if rng.random() < 0.25 else 0)
    )
    if which == "label_value":
        alert["labels"]["fuzz"] = _text(rng, limits.max_label_value_chars + plus)
    elif which == "annotation_value":
        target = rng.choice([alert["annotations"], doc.setdefault("commonAnnotations", {})])
        target["fuzz"] = _text(rng, limits.max_annotation_value_chars + plus)
    elif which == "name":
        rng.choice([alert["labels"], alert["annotations"]])[_text(rng, limits.max_name_chars + plus)] = "v"
    elif which == "labels":
        target = rng.choice([alert["labels"], alert["annotations"], doc.setdefault("groupLabels", {})])
        for n in range(limits.max_labels + plus - len(target)):
            target[f"fuzz_{n}"] = "v"
    elif which == "group_key":
        doc["groupKey"] = _group_key(rng, limits.max_group_key_bytes + plus)
    elif which == "alertname":
        alert["labels"]["alertname"] = _text(rng, limits.name_chars + plus)
        doc["groupLabels"] = {}
        doc["commonLabels"] = {}
    elif which == "receiver":
        doc["receiver"] = _text(rng, limits.name_chars + plus)
    elif which == "fingerprint":
        alert["fingerprint"] = ("f" * limits.fingerprint_chars + "x")[: limits.fingerprint_chars + plus]
    elif which == "alerts":
        template = doc["alerts"][0]
        doc["alerts"] = [dict(template, fingerprint=f"fp-{n}") for n in range(limits.max_alerts + plus)]
    else:  # the body's size, padded with whitespace (valid JSON) to the limit or one byte over
        body = dumps(doc)
        padded = body + b" " * (limits.max_body_bytes + plus - len(body))
        return Mutant(f"limit:body:{'over' if over else 'at'}", padded, frozenset({413}) if over else ACCEPT)
    return Mutant(f"limit:{which}:{'over' if over else 'at'}", dumps(doc, rng), expect)


def _group_key(rng: random.Random, size: int) -> str:
    """A group key of exactly `size` UTF-8 bytes, sometimes of multi-byte characters."""
    unit = rng.choice(["g", "é", "東", "🦙"])
    width = len(unit.encode())
    return unit * (size // width) + "g" * (size % width)


def huge_count(rng: random.Random, doc: dict[str, Any], _limits: Limits) -> Mutant:
    raw, expect = rng.choice([(b"9" * 300, None), (b"-1", REFUSE), (b"1e300", REFUSE), (b"2147483648", None)])
    doc["truncatedAlerts"] = RAW
    return Mutant("truncated_alerts", dumps(doc).replace(json.dumps(RAW).encode(), raw, 1), expect)


def structure(rng: random.Random, doc: dict[str, Any], _limits: Limits) -> Mutant:
    """Alertmanager-shaped mistakes: empty or repeated alerts, wrong literals, unknown members."""
    choice = rng.randrange(8)
    expect: Expect = None
    if choice == 0:
        doc["alerts"], expect = [], REFUSE
    elif choice == 1:
        doc["alerts"] = doc["alerts"] + [dict(doc["alerts"][0])]  # the same fingerprint twice
        expect = ACCEPT
    elif choice == 2:
        doc["version"], expect = rng.choice(["3", "5", "", " 4", "4.0", 4]), REFUSE
    elif choice == 3:
        doc["status"], expect = rng.choice(["FIRING", "pending", "", None]), REFUSE
    elif choice == 4:
        rng.choice(doc["alerts"])["status"], expect = rng.choice(["Firing", "ok", 1]), REFUSE
    elif choice == 5:
        doc[rng.choice(["fuzz", "__proto__", "constructor", "$where", ""])] = {"x": [1, 2, {"y": None}]}
        expect = ACCEPT
    elif choice == 6:
        doc["groupKey"], expect = "", REFUSE
    else:
        rng.choice(doc["alerts"])["fingerprint"], expect = "", REFUSE
    return Mutant(f"structure:{choice}", dumps(doc, rng), expect)


WEBHOOK: list[tuple[Mutator, int]] = [
    *COMMON,
    (extreme_time, 10),
    (at_limit, 10),
    (huge_count, 2),
    (structure, 8),
]


# --------------------------------------------------------------------------- feedback-specific mutators

CATEGORY_VALUES: list[tuple[Any, Expect]] = [
    ("x" * 64, REFUSE),  # not a taxonomy id
    ("x" * 65, REFUSE),
    ("", REFUSE),
    (None, REFUSE),
    (1, REFUSE),
    (["kv_memory_pressure"], REFUSE),
    ("KV_MEMORY_PRESSURE", REFUSE),
    ("kv_memory_pressure\x00", REFUSE),
]
NOTE_VALUES: list[tuple[Any, Expect]] = [
    ("n" * 4000, ACCEPT),
    ("東" * 4000, ACCEPT),
    ("n" * 4001, REFUSE),
    (None, REFUSE),
    (12, REFUSE),
    ("a\x00", REFUSE),
    ("🦙 \u202e right-to-left", ACCEPT),
]
VERDICT_VALUES: list[tuple[Any, Expect]] = [
    ([], ACCEPT),
    ([{"rank": 0, "correct": True}], REFUSE),
    ([{"rank": 101, "correct": True}], REFUSE),
    ([{"rank": 1, "correct": "maybe"}], REFUSE),
    ([{"rank": 1}], REFUSE),
    ([{"rank": 1, "correct": True, "x": 1}], REFUSE),
    ([{"rank": 1.5, "correct": True}], REFUSE),
    ([{"rank": n % 100 + 1, "correct": True} for n in range(101)], REFUSE),
    ([{"rank": 1, "correct": True}] * 2, REFUSE),
    ([{"rank": 1, "correct": False}], None),  # known ranks depend on a finished investigation
    ("all of them", REFUSE),
    ({"rank": 1}, REFUSE),
    ([None], REFUSE),
]


def feedback_field(rng: random.Random, doc: dict[str, Any], _limits: Limits) -> Mutant:
    name, pool = rng.choice([("category", CATEGORY_VALUES), ("note", NOTE_VALUES), ("hypotheses", VERDICT_VALUES)])
    value, expect = rng.choice(pool)
    doc[name] = value
    return Mutant(f"feedback:{name}", dumps(doc, rng), expect)


def feedback_extra(rng: random.Random, doc: dict[str, Any], _limits: Limits) -> Mutant:
    doc[rng.choice(["author", "incident_id", "id", "x"])] = "someone"
    return Mutant("feedback:extra", dumps(doc, rng), REFUSE)


FEEDBACK: list[tuple[Mutator, int]] = [*COMMON, (feedback_field, 14), (feedback_extra, 3)]


# --------------------------------------------------------------------------- query strings

QUERY_VALUES: dict[str, list[tuple[str, Expect]]] = {
    "limit": [
        ("1", ACCEPT),
        ("200", ACCEPT),
        ("0", REFUSE),
        ("201", REFUSE),
        ("-1", REFUSE),
        ("abc", REFUSE),
        ("1.5", REFUSE),
        ("", REFUSE),
        ("9" * 400, REFUSE),
        ("1e2", REFUSE),
        ("0x10", REFUSE),
        ("１", None),
        (" 5", None),
        ("NaN", REFUSE),
        ("Infinity", REFUSE),
    ],
    "status": [("firing", ACCEPT), ("resolved", ACCEPT), ("FIRING", REFUSE), ("", REFUSE), ("pending", REFUSE)],
    "q": [
        ("a" * 500, ACCEPT),
        ("a" * 501, REFUSE),
        ("!!! ??? ...", REFUSE),
        ("kv & cache | !gpu", None),
        ("'\"):*<-> \\", None),
        ("a:* & b:A", None),
        ("日本語 テキスト", ACCEPT),
        ("x\x00y", REFUSE),
        (" ".join(f"w{n}" for n in range(200))[:500], ACCEPT),
        ("🦙🦙🦙", None),
        ("e\u0301", None),
    ],
    "alertname": [("a" * 255, ACCEPT), ("a" * 256, REFUSE), ("x\x00", REFUSE), ("%", ACCEPT), ("_", ACCEPT)],
    "label": [
        ("a=b", ACCEPT),
        ("=b", REFUSE),
        ("a", REFUSE),
        ("", REFUSE),
        ("a=", ACCEPT),
        ("a=b=c", ACCEPT),
        ("a" * 5000 + "=b", ACCEPT),
        ("é=ü", ACCEPT),
        ("\x00=a", REFUSE),
        ("a=\x00", REFUSE),
        ("a\"}=b'", ACCEPT),
        ("%=%", ACCEPT),
    ],
    "signal": [
        ("kv_cache_usage", ACCEPT),
        ("x" * 3000, ACCEPT),
        ("", ACCEPT),
        ("a\x00", REFUSE),
        ("' OR 1=1 --", ACCEPT),
    ],
    "category": [("a" * 64, ACCEPT), ("a" * 65, REFUSE), ("", None)],
    "confirmed_category": [("a" * 64, ACCEPT), ("a" * 65, REFUSE)],
    "confirmed": [("true", ACCEPT), ("0", ACCEPT), ("yes", ACCEPT), ("on", ACCEPT), ("maybe", REFUSE), ("", REFUSE)],
    "since": [
        ("2026-01-01T00:00:00Z", None),
        ("2026-01-01T00:00:00", REFUSE),
        ("0001-01-01T00:00:00+02:00", REFUSE),
        ("9999-12-31T23:59:59-02:00", REFUSE),
        ("0001-01-01T00:00:00Z", None),
        ("9999-12-31T23:59:59Z", None),
        ("1e20", REFUSE),
        ("nan", REFUSE),
        ("inf", REFUSE),
        ("-inf", REFUSE),
        ("1768471200", None),
        ("2026-02-30T00:00:00Z", REFUSE),
        ("2026-06-30T23:59:60Z", REFUSE),
        ("", REFUSE),
        ("now", REFUSE),
    ],
    "sort": [("time", ACCEPT), ("relevance", None), ("RELEVANCE", REFUSE), ("", REFUSE)],
    "total": [("true", ACCEPT), ("no", ACCEPT), ("2", REFUSE)],
    "cursor": [("", None), ("!!!!", REFUSE), ("a" * 500, REFUSE), ("a" * 501, REFUSE), ("=", REFUSE)],
}
QUERY_VALUES["until"] = QUERY_VALUES["since"]

# Raw query strings (already on the wire): percent-escapes that decode to invalid UTF-8, stray
# separators, parameters repeated.
RAW_QUERIES: list[tuple[str, Expect]] = [
    ("q=%ff%fe", None),
    ("q=%ED%A0%80queue", None),
    ("q=%zz", None),
    ("q=%", None),
    ("&&&=&", ACCEPT),
    ("limit=1&limit=2", ACCEPT),
    ("limit=1&limit=0", None),
    ("status=firing&status=x", None),
    ("label", REFUSE),
    ("q=%00", REFUSE),
    ("unknown=1&x%00=1", ACCEPT),  # an unknown name is never used, NUL or not
    ("status=firing&x=%00", REFUSE),
    ("cursor=%ff", REFUSE),
    ("q=" + "a+" * 249 + "a", ACCEPT),
]


@dataclass(frozen=True)
class Raw:
    """A JSON value written as these bytes, which need not be JSON (NaN, 1e999, 400 digits)."""

    text: bytes


def cursor_of(data: dict[str, Any]) -> str:
    """A cursor as the API encodes one (base64url JSON, no padding), any value possibly `Raw`."""
    text = json.dumps({k: f"{RAW}{k}" if isinstance(v, Raw) else v for k, v in data.items()}, separators=(",", ":"))
    raw = text.encode()
    for key, value in data.items():
        if isinstance(value, Raw):
            raw = raw.replace(json.dumps(f"{RAW}{key}").encode(), value.text)
    return cursor_raw(raw)


def cursor_raw(text: bytes) -> str:
    return base64.urlsafe_b64encode(text).decode().rstrip("=")


# A cursor's members, each with values and what a cursor holding it must get.
CURSOR_FIELDS: dict[str, list[tuple[Any, Expect]]] = {
    "i": [
        (Raw(b"Infinity"), REFUSE),
        (Raw(b"-Infinity"), REFUSE),
        (Raw(b"NaN"), REFUSE),
        (Raw(b"9" * 400), REFUSE),
        (1e308, REFUSE),
        (2**31, REFUSE),
        (0, REFUSE),
        (-1, REFUSE),
        (None, REFUSE),
        ([1], REFUSE),
        ("x", REFUSE),
        (True, None),  # int(True) is 1: a forged cursor, but a harmless one
        (1.5, None),
        (2**31 - 1, ACCEPT),
    ],
    "t": [
        ("2026-01-15T10:00:00", REFUSE),
        ("0001-01-01T00:00:00+05:00", REFUSE),
        ("9999-12-31T23:59:59-05:00", REFUSE),
        (123, REFUSE),
        (None, REFUSE),
        ("nonsense", REFUSE),
        ("2026-01-15T10:00:00+23:59", ACCEPT),
        ("0001-01-01T00:00:00Z", ACCEPT),
    ],
    "s": [(Raw(b"NaN"), REFUSE), (Raw(b"Infinity"), REFUSE), (Raw(b"1e999"), REFUSE), ("x", REFUSE), ([], REFUSE)],
    "a": [("2026-01-15T10:00:00", REFUSE), ("9999-12-31T23:59:59-05:00", REFUSE), ("x", REFUSE), (5, REFUSE)],
    "o": [("x", REFUSE), (None, REFUSE), (1, REFUSE)],
    "f": [("", REFUSE), ("0" * 16, REFUSE), (None, REFUSE), (7, REFUSE)],
}
RELEVANCE_ONLY = {"s", "a"}  # a time cursor ignores these
