"""The attacks on an operation's valid request: one member at a time replaced
by a hostile value, the whole body, its size and media type, the path ids and
the query parameters — each with the statuses its answer may have."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from tests.api.hostile.recipes import required_query
from tests.api.hostile.schema import PREFIX, Operation, example, resolve
from tests.api.hostile.values import (
    HUGE,
    MAX_BIGINT,
    NUL_AND_CONTROLS,
    deep,
    member_values,
    members,
    replace_at,
    value_at,
)
from tests.api.hostile.verdicts import Attack, encode
from tests.api.hostile.world import Target

BODY_LIMIT = 4096  # DATA_UPLOAD_MAX_MEMORY_SIZE while attacking: small and fast
# Other documented answers to a hostile member: a manifest naming another job
# (here: the job name plus a NUL) is ``definition_job_mismatch`` (409, checked
# before the graph, oxide_batch.domain.definitions).
ALSO_EXPECTED = {("manifest", "NUL in job"): (409,)}


def body_attacks(op: Operation, target: Target) -> Iterator[Attack]:
    assert op.body is not None
    for member, node in members(op.body, target.body):
        base = value_at(target.body, member)
        for label, value in member_values(member, node, base):
            body = replace_at(target.body, member, value)
            expect = (400, *ALSO_EXPECTED.get((member, label), ()))
            yield Attack(f"{member}: {label}", op.method, target.path, encode(body), expect=expect)

    yield from whole_body_attacks(op, target)


def whole_body_attacks(op: Operation, target: Target) -> Iterator[Attack]:
    valid = encode(target.body)
    method, path = op.method, target.path

    def attack(label: str, data: bytes, **extra: Any) -> Attack:
        return Attack(f"body: {label}", method, path, data, **extra)

    if op.body and op.body.get("required"):
        yield attack("empty", b"")
        yield attack("empty object", b"{}")
    yield attack("null", b"null")
    yield attack("array", b"[]")
    yield attack("array of the valid body", b"[" + valid + b"]")
    yield attack("string", b'"x"')
    yield attack("number", b"1")
    yield attack("nested 65 deep", encode(deep(65)))
    yield attack("object nested 65 deep", b'{"a":' * 65 + b"1" + b"}" * 65)
    yield attack("truncated", valid[:-1])
    yield attack("trailing garbage", valid + b"x")
    yield attack("two documents", valid + valid)
    yield attack("raw NUL byte in a string", b'{"\x00": 1}')
    yield attack("raw control byte in a string", b'{"a\x01": 1}')
    yield attack("NUL outside a string", valid[:-1] + b"\x00}")
    yield attack("invalid UTF-8", valid[:-1] + b', "\xff": 1}')
    yield attack("surrogate encoded as UTF-8 bytes", valid[:-1] + b', "\xed\xa0\x80": 1}')
    yield attack("UTF-16 body", valid.decode().encode("utf-16"))
    yield attack("repeated member", valid[:-1] + b", " + valid[1:])
    yield attack("unknown member with NUL", encode({**target.body, "\x00": 1}))
    yield attack("unknown member, 1 MB name", encode({**target.body, HUGE: 1}))
    for content_type in (
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=xyz",
        "application/xml",
        "",
    ):
        yield attack(f"as {content_type or 'no content type'}", valid, content_type=content_type,
                     expect=(415,))  # fmt: skip
    yield attack("form-encoded pairs", b"a=1&b=2", content_type="application/x-www-form-urlencoded",
                 expect=(415,))  # fmt: skip


def oversized_attacks(op: Operation, target: Target) -> Iterator[Attack]:
    """Just above the limit → 413; exactly at it → not 413 (an unknown member here)."""
    for size, expect in ((BODY_LIMIT + 1, (413,)), (BODY_LIMIT, (400,))):
        padded = {**target.body, "padding": ""}
        padding = size - len(encode(padded))
        data = encode({**target.body, "padding": "p" * padding})
        assert len(data) == size
        yield Attack(f"body of {size} bytes", op.method, target.path, data, expect=expect)


ABSURD_IDS = (
    ("0", 400),
    ("-1", 400),
    (str(2**63), 400),
    (str(10**40), 400),
    ("9" * 4000, 400),
    (str(MAX_BIGINT), 404),
    ("9" * 4001, 404),  # past the converter's digits: no route
    ("%00", 404),
    ("1%00", 404),
    ("1%0A", 404),
    ("%ED%A0%80", 404),
    ("1.0", 404),
    ("0x10", 404),
)
NODE_IDS = (
    ("%00", 400),
    ("lo%00ad", 400),
    ("%01", 400),
    ("%7F", 400),
    ("%C2%85", 400),
    ("%20load", 400),
    ("x" * 129, 400),
    ("%ED%A0%80", (400, 404)),  # Django keeps invalid UTF-8 percent-encoded
    ("%FF", (400, 404)),
)


# A notification rule's name (issue 41): one the rules never take matches no
# route, one they could take but nobody did is the rule's own 404.
RULE_NAMES = (
    ("0", 404),
    ("-1", 404),
    ("x" * 65, 404),
    ("%00", 404),
    ("on%20call", 404),
    ("%C2%85", 404),
    ("%ED%A0%80", 404),
)


def path_attacks(op: Operation, target: Target, ids: dict[str, Any]) -> Iterator[Attack]:
    valid = encode(target.body) if op.mutating else b""
    query = "" if op.mutating else required_query(op)
    for name in op.path_names:
        choices = NODE_IDS if name == "node_id" else RULE_NAMES if name == "name" else ABSURD_IDS
        for value, status in choices:
            path = op.path({**ids, name: value}) + query
            expect = status if isinstance(status, tuple) else (status,)
            yield Attack(f"path {name}={value[:24]}", op.method, path, valid, expect=expect)


def path_ids(op: Operation, target: Target) -> dict[str, Any]:
    """The ids in the valid request's path, by parameter name."""
    pattern = re.escape(op.template)
    for name in op.path_names:
        pattern = pattern.replace(re.escape("{" + name + "}"), f"(?P<{name}>[^/]+)")
    match = re.fullmatch(pattern, target.path.split("?", 1)[0])
    assert match is not None, (op.template, target.path)
    return match.groupdict()


def query_values(node: dict[str, Any]) -> Iterator[tuple[str, str]]:
    node = resolve(node)
    items = resolve(node.get("items", {}))
    if "enum" in node or "enum" in items:
        yield "unknown code", "NOT_A_CODE"
        first = str((node.get("enum") or items["enum"])[0])
        if first.lower() != first:  # lower-case codes (a delivery's state) are their own
            yield "lower-case code", first.lower()
    if node.get("type") == "integer":
        for label, value in (("2^63", 2**63), ("-1", -1), ("10^40", 10**40)):
            yield label, str(value)
        yield "float", "1.5"
        yield "boolean", "true"
        yield "digits with a space", " 1"
    if node.get("pattern") == "^[0-9a-f]{64}$":
        yield "upper-case digest", "AB" * 32
        yield "short digest", "ab"
    valid = str(example(node))
    for character in NUL_AND_CONTROLS:
        yield f"U+{ord(character):04X}", f"x{character}"
        yield f"U+{ord(character):04X} trailing", f"{valid}{character}"
    yield "100 KB", "x" * (100 * 1024)


INSTANT_PARAMETER = re.compile(r"^(created|ended)_(after|before)$")


def query_attacks(op: Operation, ids: dict[str, Any]) -> Iterator[Attack]:
    base = {p["name"]: example(p["schema"]) for p in op.query if p.get("required")}
    path = PREFIX + op.path(ids)
    for parameter in op.query:
        name = parameter["name"]
        values = list(query_values(parameter["schema"]))
        if INSTANT_PARAMETER.match(name):
            values += [
                ("garbage instant", "yesterday"),
                ("year 99999", "99999-01-01T00:00:00Z"),
                ("instant, NUL, garbage", "2025-12-31T00:00:00Z\x00garbage"),
                ("instant with NUL before the offset", "2025-12-31T00:00:00\x00Z"),
            ]
        if name == "cursor":
            values += [("not base64", "!!!"), ("forged cursor", "cD0tMQ==")]  # "p=-1"
        for label, value in values:
            query = "&".join(
                f"{quote(key)}={quote(str(v), safe='')}" for key, v in {**base, name: value}.items()
            )
            yield Attack(f"?{name}: {label}", "GET", f"{path}?{query}")
        yield Attack(
            f"?{name}: invalid UTF-8",
            "GET",
            f"{path}?{quote(name)}=%FF%ED%A0%80",
            expect=(200, 400),
        )
    required = [p["name"] for p in op.query if p.get("required")]
    for name in required:
        query = "&".join(f"{k}={quote(str(v))}" for k, v in base.items() if k != name)
        yield Attack(f"?{name}: missing", "GET", f"{path}?{query}")
