"""Canonical JSON and state envelopes (contract §2.3.3 checkpoints and contexts)."""

from __future__ import annotations

import pytest

from oxide_batch.domain.canonical import (
    CanonicalJsonError,
    canonical_bytes,
    depth,
    parse_strict,
    sha256_hex,
)
from oxide_batch.domain.errors import InvalidEnvelope
from oxide_batch.domain.state import (
    PARTITION_CONTEXT_LIMITS,
    EnvelopeKind,
    StateEnvelope,
    StateLimits,
    StoredState,
    StoredStateCorrupt,
    load_stored,
)

CHECKPOINT = EnvelopeKind.CHECKPOINT


def raw(payload=None, schema="test.position", version=1):
    return {"schema": schema, "schema_version": version, "payload": payload or {"position": 2}}


def test_canonical_bytes_are_compact_with_keys_sorted_by_bytes():
    value = {"b": 1, "a": [True, None, "서울"], "Z": {"y": 2, "x": 1}}
    assert canonical_bytes(value) == '{"Z":{"x":1,"y":2},"a":[true,null,"서울"],"b":1}'.encode()


@pytest.mark.parametrize(
    "text", ['{"a":1,"a":2}', '{"a":NaN}', '{"a":Infinity}', "{", '{"a":-Infinity}']
)
def test_strict_parsing_refuses_repeated_keys_and_non_json_numbers(text):
    with pytest.raises(CanonicalJsonError):
        parse_strict(text)


def test_depth_counts_containers_iteratively():
    assert depth(1) == 0
    assert depth({}) == 1
    assert depth({"a": [{"b": 1}]}) == 3
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    assert depth(deep) == 10_001  # no RecursionError


def test_an_envelope_round_trips_through_its_stored_form():
    envelope = StateEnvelope.from_json(raw(), kind=CHECKPOINT)
    stored = StoredState.of(envelope)
    assert stored.text == '{"payload":{"position":2},"schema":"test.position","schema_version":1}'
    assert stored.checksum == sha256_hex(stored.text.encode())
    assert load_stored(stored.text, stored.checksum, kind=CHECKPOINT) == envelope


@pytest.mark.parametrize(
    "value",
    [
        [],
        {"schema": "s", "schema_version": 1},
        {"schema": "s", "schema_version": 1, "payload": {}, "extra": 1},
        raw(schema=""),
        raw(schema=" padded"),
        raw(schema=7),
        raw(version=0),
        raw(version=True),
        raw(version="1"),
        {"schema": "s", "schema_version": 1, "payload": []},
        {"schema": "s", "schema_version": 1, "payload": "x"},
    ],
)
def test_malformed_envelopes_are_invalid(value):
    with pytest.raises(InvalidEnvelope):
        StateEnvelope.from_json(value, kind=CHECKPOINT)


def test_size_is_measured_on_canonical_bytes():
    limits = StateLimits(max_bytes=120)
    fits = raw({"blob": "x" * 40})
    too_big = raw({"blob": "x" * 60})
    assert StateEnvelope.from_json(fits, kind=CHECKPOINT, limits=limits)
    with pytest.raises(InvalidEnvelope):
        StateEnvelope.from_json(too_big, kind=CHECKPOINT, limits=limits)


def test_depth_counts_the_envelope_root():
    limits = StateLimits(max_depth=3)
    assert StateEnvelope.from_json(raw({"a": {"b": 1}}), kind=CHECKPOINT, limits=limits)
    with pytest.raises(InvalidEnvelope):
        StateEnvelope.from_json(raw({"a": {"b": {"c": 1}}}), kind=CHECKPOINT, limits=limits)


def test_default_limits_and_ceilings():
    assert StateLimits() == StateLimits(64 * 1024, 16)
    assert StateLimits(1024 * 1024, 64)
    for bad in ({"max_bytes": 0}, {"max_bytes": 1024 * 1024 + 1}, {"max_depth": 65}):
        with pytest.raises(ValueError, match="max_"):
            StateLimits(**bad)


def test_partition_contexts_are_limited_to_4_kib():
    fits = raw({"range": "x" * 3900})
    too_big = raw({"range": "x" * 4100})
    kind = EnvelopeKind.PARTITION_CONTEXT
    assert StateEnvelope.from_json(fits, kind=kind, limits=PARTITION_CONTEXT_LIMITS)
    with pytest.raises(InvalidEnvelope, match="4096"):
        StateEnvelope.from_json(too_big, kind=kind, limits=PARTITION_CONTEXT_LIMITS)


@pytest.mark.parametrize(
    ("text", "checksum"),
    [
        ('{"payload":{"position":3},"schema":"test.position","schema_version":1}', None),
        ('{"payload":{"position":2},"schema":"test.position","schema_version":1}', "0" * 64),
        ('{"schema":"test.position","payload":{"position":2},"schema_version":1}', None),
        ("[]", None),
        ('{"payload":{},"schema":"s","schema_version":0}', None),
    ],
    ids=["edited", "wrong-checksum", "not-canonical", "not-an-envelope", "bad-version"],
)
def test_stored_state_that_does_not_verify_fails_closed(text, checksum):
    good = StoredState.of(StateEnvelope.from_json(raw(), kind=CHECKPOINT))
    if checksum is None:
        # A checksum that matches the tampered bytes, except for the "edited" case
        # where the original checksum is kept.
        checksum = good.checksum if 'position":3' in text else sha256_hex(text.encode())
    with pytest.raises(StoredStateCorrupt):
        load_stored(text, checksum, kind=CHECKPOINT)


def test_an_envelope_repr_never_shows_its_payload():
    envelope = StateEnvelope.from_json(raw({"secret": "sentinel-value"}), kind=CHECKPOINT)
    assert "sentinel-value" not in repr(envelope)


@pytest.mark.parametrize(
    ("payload", "limits"),
    [
        ({"blob": "x" * 60}, StateLimits(max_bytes=120)),
        ({"a": {"b": {"c": 1}}}, StateLimits(max_depth=3)),
    ],
)
def test_a_checked_envelope_is_checked_again_against_stricter_limits(payload, limits):
    """The repository re-checks what the API checked, against its own limits:
    without serializing it again, and refusing as a first check would."""
    checked = StateEnvelope.from_json(raw(payload), kind=CHECKPOINT)
    built = StateEnvelope("test.position", 1, payload)  # never checked: measured on the spot
    for envelope in (checked, built):
        with pytest.raises(InvalidEnvelope) as refused:
            StoredState.checked(envelope, kind=CHECKPOINT, limits=limits)
        with pytest.raises(InvalidEnvelope) as first:
            StateEnvelope.from_json(raw(payload), kind=CHECKPOINT, limits=limits)
        assert refused.value.reason == first.value.reason
    fitting = StoredState.checked(checked, kind=CHECKPOINT, limits=StateLimits())
    assert fitting == StoredState.of(built)
    assert checked == built  # what a check measured is not part of the value
