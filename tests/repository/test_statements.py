"""The explicit single-row statements (``oxide_batch/repository/statements.py``)
agree with the ORM on both databases: a read returns exactly what
``.values(...).get(pk=…)`` returns, and a write stores exactly what the ORM's
``update()`` stores (compared on the raw stored values)."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps
from django.db import IntegrityError, connection, models, transaction
from django.db.models import F

from oxide_batch import models as models_
from oxide_batch.facts import newest_step_write
from oxide_batch.repository import statements
from oxide_batch.roles import ensure_roles
from tests.api.hostile.world import CHECKPOINT, TOKEN, World, build_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db: None, monkeypatch: pytest.MonkeyPatch, settings: Any) -> World:
    ensure_roles()
    return build_world(monkeypatch, settings)


def batch_models() -> list[type[models.Model]]:
    return [
        model
        for model in apps.get_app_config("oxide_batch").get_models()
        if model._meta.managed and not model._meta.proxy
    ]


def columns(model: type[models.Model]) -> tuple[str, ...]:
    return tuple(field.attname for field in model._meta.concrete_fields)


def rich_rows(world: World) -> None:
    """Rows with a value in every column type: JSON, instants, booleans, bytes,
    failures, checkpoints, owner tokens, stops, holds, partitions, decisions."""
    rt = world.rt
    execution = world.starting()
    claim = {"owner_token": TOKEN, "expected_version": execution["version"]}
    execution = rt.move(rt.post(f"executions/{execution['id']}/claim", claim, 200), "STARTED")
    step = world.started_step(execution, "load")
    rt.post(
        f"steps/{step['id']}/checkpoint",
        {
            "expected_version": step["version"],
            "counts": {"read": 3, "written": 2, "filtered": 1},
            "checkpoint": CHECKPOINT,
        },
        200,
    )
    world.completed_partition()
    failed = world.started()
    rt.move(failed, "FAILED", failure={"category": "USER_COMPONENT", "failure_id": 7})
    stopping = world.started()
    rt.post(
        f"executions/{stopping['id']}/stop",
        {"operation_id": "op-stop-1", "expected_version": stopping["version"]},
        200,
    )
    instance = world.instance()
    rt.put(
        f"instances/{instance['id']}/hold",
        {"reason_code": "LEGAL", "operation_id": "op-hold-1"},
        200,
    )
    flow, _ = world.flow_started()
    world.started_step(flow, "load")


def raw_row(model: type[models.Model], pk: int, names: tuple[str, ...]) -> tuple[Any, ...]:
    quote = connection.ops.quote_name
    fields = [model._meta.get_field(name) for name in names]
    selected = ", ".join(quote(str(field.column)) for field in fields)  # type: ignore[union-attr]
    pk_field = model._meta.pk
    assert pk_field is not None
    table, key = quote(model._meta.db_table), quote(pk_field.column)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {selected} FROM {table} WHERE {key} = %s", [pk])
        row = cursor.fetchone()
    assert row is not None
    return tuple(bytes(value) if isinstance(value, memoryview) else value for value in row)


def assert_reads_agree(model: type[models.Model], names: tuple[str, ...], *, lock: bool) -> int:
    statement = statements.select(connection, model, names, lock=lock)
    checked = 0
    for pk in model._default_manager.values_list("pk", flat=True):
        with transaction.atomic(), connection.cursor() as cursor:
            explicit = statement.run(cursor, connection, pk)
        expected = model._default_manager.values(*names).get(pk=pk)
        assert explicit == expected, (statement.name, pk)
        assert [type(value) for value in explicit.values()] == [
            type(value) for value in expected.values()
        ], statement.name
        checked += 1
    return checked


@pytest.mark.parametrize("lock", [False, True], ids=["read", "lock"])
def test_every_column_of_every_table_reads_as_the_orm_reads_it(world: World, lock: bool) -> None:
    rich_rows(world)
    checked = {
        model.__name__: assert_reads_agree(model, columns(model), lock=lock)
        for model in batch_models()
    }
    for name in ("JobInstance", "JobExecution", "StepExecution", "StepPartition", "JobDefinition"):
        assert checked.get(name), f"no {name} rows were compared"


def test_the_statements_the_requests_ran_read_as_the_orm(world: World) -> None:
    statements._selects.clear()
    statements._locked_executions.clear()
    statements._locked_steps.clear()
    rich_rows(world)
    used = [key for key in list(statements._selects) if key[0] == connection.vendor]
    assert {key[1].__name__ for key in used} >= {"StepPartition"}
    for _vendor, model, names, lock in used:
        assert_reads_agree(model, names, lock=lock)
    locked = [
        names for vendor, names in statements._locked_executions if vendor == connection.vendor
    ]
    assert locked, "no execution was locked with its extras"
    for names in locked:
        assert_execution_reads_agree(names)
    steps = [names for vendor, names in statements._locked_steps if vendor == connection.vendor]
    assert steps, "no step was locked with its execution's claimant"
    for names in steps:
        assert_step_reads_agree(names)


def assert_step_reads_agree(names: tuple[str, ...]) -> None:
    """``lock_step``: the step's columns and its execution's claimant, as the
    ORM's ``values()`` across the foreign key has them."""
    statement = statements.lock_step(connection, names)
    rows = models_.StepExecution.objects.all()
    own = rows.annotate(step_owner_token=F("owner_token"))
    pks = list(rows.values_list("pk", flat=True))
    assert pks
    for pk in pks:
        with transaction.atomic(), connection.cursor() as cursor:
            explicit = statement.run(cursor, connection, pk)
        expected = own.values(*names, *statements.STEP_OWN_EXTRAS, *statements.STEP_EXTRAS)
        assert explicit == expected.get(pk=pk), pk
    # The claim's shared read of a parent (issue 43) reads the same way.
    shared = statements.share_claim_parent(connection, names)
    for pk in pks:
        with transaction.atomic(), connection.cursor() as cursor:
            explicit = shared.run(cursor, connection, pk)
        expected = own.values(*names, *statements.STEP_OWN_EXTRAS, *statements.CLAIM_EXTRAS)
        assert explicit == expected.get(pk=pk), pk
    claimed = [rows.values(*statements.STEP_EXTRAS).get(pk=pk) for pk in pks]
    assert any(row["job_execution__owner_user_id"] is not None for row in claimed), (
        "no step of a claimed execution was compared"
    )


def assert_execution_reads_agree(names: tuple[str, ...]) -> None:
    """``lock_execution``: the execution's columns, its newest step write and its
    definition, as the ORM's annotated ``values()`` has them."""
    statement = statements.lock_execution(connection, names)
    rows = models_.JobExecution.objects.annotate(newest_step_write_at=newest_step_write())
    pks = list(rows.values_list("pk", flat=True))
    assert pks
    for pk in pks:
        with transaction.atomic(), connection.cursor() as cursor:
            explicit = statement.run(cursor, connection, pk)
        assert explicit == rows.values(*names, *statements.EXECUTION_EXTRAS).get(pk=pk), pk
    shown = [rows.values(*statements.EXECUTION_EXTRAS).get(pk=pk) for pk in pks]
    assert any(
        row["newest_step_write_at"] is not None and row["definition__job_name"] is not None
        for row in shown
    ), "no execution with steps and a named definition was compared"


def test_the_writes_the_requests_ran_store_what_the_orm_stores(world: World) -> None:
    statements._updates.clear()
    rich_rows(world)
    used = [key for key in list(statements._updates) if key[0] == connection.vendor]
    assert {key[1].__name__ for key in used} >= {"JobExecution", "StepExecution", "StepPartition"}
    for _vendor, model, names in used:
        statement = statements.update(connection, model, names)
        for pk in model._default_manager.values_list("pk", flat=True):
            values = model._default_manager.values(*names).get(pk=pk)
            # Each value written both ways, on the same row: the stored bytes agree.
            with transaction.atomic(), connection.cursor() as cursor:
                statement.run(cursor, connection, pk, tuple(values.values()))
            explicit = raw_row(model, pk, names)
            model._default_manager.filter(pk=pk).update(**values)
            assert explicit == raw_row(model, pk, names), (statement.name, pk)
            # And NULL, column by column where the column takes one: stored as
            # NULL, or refused by a constraint exactly when the ORM's is.
            for name in names:
                if not model._meta.get_field(name).null:  # type: ignore[union-attr]
                    continue
                null = statements.update(connection, model, (name,))
                try:
                    with transaction.atomic(), connection.cursor() as cursor:
                        null.run(cursor, connection, pk, (None,))
                except IntegrityError:
                    with pytest.raises(IntegrityError), transaction.atomic():
                        model._default_manager.filter(pk=pk).update(**{name: None})
                    continue
                assert raw_row(model, pk, (name,)) == (None,), null.name
                model._default_manager.filter(pk=pk).update(**values)
