"""An input serializer's fields are built once per class (``Input.fields``), and
that changes nothing a request can see: the same fields as DRF's per-instance
copy, and no state carried from one validation to the next, in one thread or
many (the errors and values of each request are its own)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from rest_framework import serializers

from oxide_batch.api import serializers as s
from oxide_batch.api.serializers.base import Input


def _inputs() -> list[type[Input]]:
    found: list[type[Input]] = []
    pending = list(Input.__subclasses__())
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return sorted(set(found), key=lambda cls: cls.__name__)


def _shape(field: Any) -> Any:
    """What a field is, as validation uses it (nested serializers recursively)."""
    shape: dict[str, Any] = {
        "type": type(field).__name__,
        "required": field.required,
        "allow_null": field.allow_null,
        "read_only": field.read_only,
        "source": field.source,
        "validators": [type(v).__name__ for v in field.validators],
    }
    if isinstance(field, serializers.ListSerializer):
        shape["child"] = _shape(field.child)
    elif isinstance(field, serializers.Serializer):
        shape["fields"] = {name: _shape(child) for name, child in field.fields.items()}
    return shape


def test_every_input_has_the_fields_drf_would_give_each_instance() -> None:
    inputs = _inputs()
    assert len(inputs) > 20  # every input of the API, found by subclassing
    for cls in inputs:
        shared = cls().fields
        assert cls().fields is shared, cls.__name__
        # DRF's own: a deep copy of the declared fields, bound to this instance.
        fresh = super(Input, cls()).fields
        assert fresh is not shared
        assert list(shared) == list(fresh), cls.__name__
        for name, field in shared.items():
            assert field.field_name == name
            assert _shape(field) == _shape(fresh[name]), (cls.__name__, name)


def _chunk(version: Any, read: Any) -> dict[str, Any]:
    return {
        "expected_version": version,
        "counts": {"read": read},
        "checkpoint": {"schema": "reader", "schema_version": 1, "payload": {"at": read}},
    }


def _outcome(body: dict[str, Any]) -> Any:
    serializer = s.ChunkInput(data=body)
    if serializer.is_valid():
        expected, counts, checkpoint, _ = serializer.to_domain()
        assert checkpoint is not None
        return ("valid", expected, counts.read, dict(checkpoint.payload))
    return ("invalid", serializer.errors)


BODIES = [
    _chunk(3, 10),
    _chunk("3", 10),  # a string is not an integer
    _chunk(4, -1),  # a negative count
    {**_chunk(5, 1), "surprise": True},  # an unknown member
    _chunk(6, 2),
    {"counts": {"read": 1}},  # expected_version missing
]


def test_a_validation_leaves_nothing_behind_for_the_next() -> None:
    alone = [_outcome(body) for body in BODIES]
    assert [kind for kind, *_ in alone] == [
        "valid",
        "invalid",
        "invalid",
        "invalid",
        "valid",
        "invalid",
    ]
    # Any order, repeated: each body gets exactly the answer it got alone.
    for body, expected in reversed(list(zip(BODIES, alone, strict=True))):
        assert _outcome(body) == expected
        assert _outcome(BODIES[0]) == alone[0]


@pytest.mark.parametrize("threads", [8])
def test_threads_validating_at_once_each_get_their_own_answer(threads: int) -> None:
    alone = [_outcome(body) for body in BODIES]
    mismatches: list[Any] = []
    barrier = threading.Barrier(threads)

    def work(offset: int) -> None:
        barrier.wait()
        for i in range(300):
            index = (i + offset) % len(BODIES)
            got = _outcome(BODIES[index])
            if got != alone[index]:
                mismatches.append((index, got))

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert mismatches == []
