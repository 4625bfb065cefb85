"""Hostile input to every operation (contract §4.6, §4.5).

The operations are enumerated from the generated OpenAPI schema (as
``test_schema.py`` does), so a new endpoint is covered as soon as it is routed.
Each operation gets a *valid* request against real rows (a recipe, or, for an
operation without one, ids of generic rows and a body built from the schema);
then one member at a time is replaced by a hostile value taken from that
member's schema (NUL and other control characters, lone surrogates, integers
past the 64-bit range, floats and booleans where integers are expected, unknown
enum codes, 1 MB strings, nesting past the limit, …), and the whole body, the
content type, the path ids and the query parameters are attacked the same way.
Every answer must be a problem+json with a ``code``: 413 for an oversized body,
415 for a wrong media type, 404 for an absurd id, 400 for everything else — and
nothing may be written (a fingerprint of every batch table is compared after
each request). Finally the valid request itself must succeed, which proves the
refusals came from the hostile member alone. The machinery is in
tests/api/hostile/; arbitrary control text and what the contract admits are in
test_hostile_text.py, the regressions the matrix found in
test_hostile_regressions.py.

Runs on both databases; PostgreSQL is where a NUL byte in text would bite.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from tests.api.hostile.attacks import (
    BODY_LIMIT,
    body_attacks,
    oversized_attacks,
    path_attacks,
    path_ids,
    query_attacks,
)
from tests.api.hostile.recipes import RECIPES
from tests.api.hostile.schema import (
    BODY_OPERATIONS,
    OPERATIONS,
    PATH_OPERATIONS,
    QUERY_OPERATIONS,
    Operation,
)
from tests.api.hostile.verdicts import Attack, Verdicts, attack_then_succeed
from tests.api.hostile.world import Target, World

pytestmark = pytest.mark.standalone


def test_every_mutating_operation_has_a_recipe() -> None:
    """A new operation is attacked with a schema-built body anyway; a recipe
    makes its valid request real, so the final success check can run."""
    assert {op.operation_id for op in BODY_OPERATIONS} <= set(RECIPES)
    assert set(RECIPES) <= {op.operation_id for op in OPERATIONS}


@pytest.mark.parametrize("op", BODY_OPERATIONS, ids=str)
def test_hostile_members_are_400_and_write_nothing(world: World, op: Operation) -> None:
    attack_then_succeed(world, op, lambda target: body_attacks(op, target))


@pytest.mark.parametrize("op", BODY_OPERATIONS, ids=str)
@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=BODY_LIMIT)
def test_a_body_past_the_limit_is_413(world: World, op: Operation) -> None:
    attack_then_succeed(world, op, lambda target: oversized_attacks(op, target))


@pytest.mark.parametrize("op", PATH_OPERATIONS, ids=str)
def test_absurd_path_segments_are_400_or_404(world: World, op: Operation) -> None:
    def attacks(target: Target) -> Iterator[Attack]:
        return path_attacks(op, target, path_ids(op, target))

    attack_then_succeed(world, op, attacks)


@pytest.mark.parametrize("op", QUERY_OPERATIONS, ids=str)
def test_hostile_query_parameters_are_400(world: World, op: Operation) -> None:
    verdicts = Verdicts(world.client)
    for attack in query_attacks(op, world.ids):
        verdicts.send(attack)
    verdicts.assert_none()
