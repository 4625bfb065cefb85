"""Audit rows are append-only: the models refuse changes (both databases) and a
PostgreSQL trigger refuses them below the ORM; only pruning may delete."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from oxide_batch import models
from tests.conftest import on_postgres

pytestmark = pytest.mark.django_db


def operator_request(**overrides) -> models.OperatorRequest:
    values = {
        "action": "STOP",
        "operation_id": "op-1",
        "actor": "alice",
        "request_digest": "a" * 64,
        "outcome": "APPLIED",
        "requested_at": timezone.now(),
    }
    values.update(overrides)
    return models.OperatorRequest.objects.create(**values)


def retention_record() -> models.RetentionRecord:
    return models.RetentionRecord.objects.create(
        action="HOLD",
        operation_id="op-1",
        actor="alice",
        reason_code="LEGAL_HOLD",
        request_digest="b" * 64,
        job_instance_id=1,
        applied_at=timezone.now(),
    )


def recovery_decision() -> models.RecoveryDecision:
    return models.RecoveryDecision.objects.create(
        job_instance_id=1,
        job_execution_id=1,
        execution_version=1,
        prior_status="STARTED",
        resulting_status="FAILED",
        reason_code="WORKER_LOST",
        operator_reference="alice",
        evidence_digest="c" * 64,
        decided_at=timezone.now(),
    )


ROWS = {
    "operator_request": operator_request,
    "retention_record": retention_record,
    "recovery_decision": recovery_decision,
}


@pytest.mark.parametrize("make", ROWS.values(), ids=ROWS.keys())
def test_the_models_refuse_updates_and_deletes(make):
    row = make()
    table = type(row)
    with pytest.raises(models.AppendOnlyError):
        row.save()
    with pytest.raises(models.AppendOnlyError):
        row.delete()
    with pytest.raises(models.AppendOnlyError):
        table.objects.filter(pk=row.pk).update(id=row.pk)
    with pytest.raises(models.AppendOnlyError):
        table.objects.filter(pk=row.pk).delete()
    assert table.objects.filter(pk=row.pk).exists()


@pytest.mark.postgres
@pytest.mark.parametrize("make", ROWS.values(), ids=ROWS.keys())
@pytest.mark.parametrize("statement", ["UPDATE {table} SET id = id", "DELETE FROM {table}"])
def test_the_trigger_refuses_raw_sql_updates_and_deletes(make, statement):
    row = make()
    table = type(row)._meta.db_table
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement.format(table=table))
    assert type(row).objects.filter(pk=row.pk).exists()


@pytest.mark.parametrize("make", ROWS.values(), ids=ROWS.keys())
def test_pruning_is_the_one_way_to_delete(make):
    row = make()
    table = type(row)
    with transaction.atomic():
        if on_postgres():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL oxide_batch.audit_prune = 'on'")
        assert table.objects.filter(pk=row.pk).prune() == 1
    assert not table.objects.filter(pk=row.pk).exists()


@pytest.mark.postgres
def test_pruning_without_the_setting_is_refused_by_the_trigger():
    row = operator_request()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        models.OperatorRequest.objects.filter(pk=row.pk).prune()


def test_action_and_operation_id_are_unique():
    operator_request()
    with pytest.raises(DatabaseError), transaction.atomic():
        operator_request(request_digest="d" * 64)
    operator_request(action="ABANDON")  # another action may reuse the id
