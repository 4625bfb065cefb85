"""Hostile text the matrix (test_hostile.py) cannot enumerate, and what the
contract admits: Hypothesis puts arbitrary text holding a control or surrogate
code point into every string member (bounded) — a 400, nothing written; control
characters inside opaque payloads and 2^53+1 where an integer may be that large
must come back exactly. Runs on both databases."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.hostile.recipes import cached_request
from tests.api.hostile.schema import BODY_OPERATIONS
from tests.api.hostile.values import ADMITS_CONTROL, MAX_BIGINT, members, replace_at, value_at
from tests.api.hostile.verdicts import Attack, Verdicts, encode
from tests.api.hostile.world import World
from tests.api.support import url

# ================================================== hypothesis: any control text

STRING_MEMBERS = [
    (op, member)
    for op in BODY_OPERATIONS
    for member, node in members(op.body or {}, {})
    if node.get("type") == "string" or "enum" in node
]
# Text with at least one control (Cc) or surrogate (Cs) code point somewhere.
HOSTILE_CHARACTER = st.characters(categories=["Cc", "Cs"])
ANY_CHARACTER = st.characters(codec=None, categories=["L", "M", "N", "P", "S", "Z", "C"])
HOSTILE_TEXT = st.builds(
    lambda head, bad, tail: head + bad + tail,
    st.text(ANY_CHARACTER, max_size=12),
    HOSTILE_CHARACTER,
    st.text(ANY_CHARACTER, max_size=12),
)


def _admits(member: str, text: str) -> bool:
    """A partition key may hold any character but NUL and surrogates."""
    if not ADMITS_CONTROL.match(member):
        return False
    return not any(c == "\x00" or 0xD800 <= ord(c) <= 0xDFFF for c in text)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_control_or_surrogate_text_in_any_string_member_is_400(world: World, data: Any) -> None:
    op, member = data.draw(st.sampled_from(STRING_MEMBERS), label="member")
    text = data.draw(HOSTILE_TEXT, label="text")
    target = cached_request(world, op)
    if value_at(target.body, member) is None and "." in member:
        return  # a member of an absent optional object (the matrix covers it)
    if _admits(member, text):
        return
    verdicts = Verdicts(world.client)
    body = encode(replace_at(target.body, member, text))
    verdicts.send(Attack(f"{op}: {member}={text!r}", op.method, target.path, body))
    verdicts.assert_none()


# ================================================ 2^53 + 1 is an integer, not a double

BEYOND_DOUBLE = 2**53 + 1  # the first integer a JSON double cannot hold


def test_integers_past_2_to_the_53_keep_every_digit(world: World) -> None:
    """Where 2^53+1 is in range it is accepted and answered exactly (a parser
    going through floats would round it to 2^53)."""
    step = world.started_step()
    counts = {"read": BEYOND_DOUBLE, "written": MAX_BIGINT}
    body = {"expected_version": step["version"], "counts": counts}
    committed = world.rt.post(f"steps/{step['id']}/checkpoint", body, 200)
    assert (committed["counts"]["read"], committed["counts"]["written"]) == tuple(counts.values())
    failure = {"category": "USER_COMPONENT", "failure_id": BEYOND_DOUBLE}
    failed = world.rt.move_step(committed, "FAILED", failure=failure)
    assert failed["failure"] == {**failure, "logs_url": None}
    stale = {"expected_version": BEYOND_DOUBLE, "exit_code": "X"}
    response = world.rt.post(f"steps/{step['id']}/exit-status", stale)
    assert response.status_code == 409, response.content
    assert (response.json()["code"], response.json()["expected"]) == (
        "version_ahead",  # ahead of the stored row: the digits survived to say so
        BEYOND_DOUBLE,
    )


# ======================================== opaque payloads travel byte for byte

ODD_TEXT = "".join(chr(code) for code in range(0x20)) + "\x7f\x85\u2028\ufeff\uffff\U0001f600"


def test_opaque_payloads_and_partition_keys_keep_every_character(world: World) -> None:
    """What the contract admits (control characters, NUL included, inside
    checkpoint/context payloads; any character but NUL in a partition key) is
    stored and answered back exactly, on PostgreSQL too (text, never jsonb)."""
    payload = {"text": ODD_TEXT, ODD_TEXT: [ODD_TEXT], "nul": "\x00"}
    envelope = {"schema": "odd", "schema_version": 1, "payload": payload}
    step = world.started_step(name="parent")
    response = world.client.post(
        url(f"steps/{step['id']}/checkpoint"),
        encode({"expected_version": step["version"], "checkpoint": envelope, "context": envelope}),
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    stored = world.rt.get(f"steps/{step['id']}/checkpoint")
    assert stored["checkpoint"] == envelope
    assert stored["context"] == envelope
    key = ODD_TEXT.replace("\x00", "")[:40]
    entries = [{"key": key, "context": envelope}]
    response = world.client.post(
        url(f"steps/{step['id']}/partitions"), encode({"entries": entries}),
        content_type="application/json",
    )  # fmt: skip
    assert response.status_code == 201, response.content
    (partition,) = world.rt.get(f"steps/{step['id']}/partitions")["partitions"]
    assert (partition["key"], partition["context"]) == (key, envelope)
