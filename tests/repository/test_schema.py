"""The recorded schema version, the descriptor and the system check."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection

from oxide_batch import models
from oxide_batch.checks import schema_version_check
from oxide_batch.domain import RepositoryCapability
from oxide_batch.domain.errors import MigrationRequired, NewerSchema, SchemaUninitialized
from oxide_batch.repository.schema import SUPPORTED_SCHEMA_VERSION

pytestmark = pytest.mark.django_db


def check_ids() -> list[str | None]:
    return [message.id for message in schema_version_check()]


def set_version(version: int) -> None:
    models.SchemaVersion.objects.filter(id=1).update(version=version)


def test_migrations_record_the_supported_schema_version(repo):
    descriptor = repo.descriptor()
    assert descriptor.schema_version == SUPPORTED_SCHEMA_VERSION
    assert descriptor.descriptor_version == 1
    assert check_ids() == []


def test_the_descriptor_declares_the_six_capabilities(repo):
    descriptor = repo.descriptor()
    assert descriptor.capabilities == set(RepositoryCapability)
    assert {c.value for c in descriptor.capabilities} == {
        "operator_requests",
        "stop_requests",
        "execution_ownership",
        "instance_holds",
        "retention_purge",
        "step_partitions",
    }


def test_an_older_schema_requires_migration(repo):
    set_version(SUPPORTED_SCHEMA_VERSION - 1)
    with pytest.raises(MigrationRequired) as error:
        repo.descriptor()
    assert (error.value.current, error.value.supported) == (
        SUPPORTED_SCHEMA_VERSION - 1,
        SUPPORTED_SCHEMA_VERSION,
    )
    assert check_ids() == ["oxide_batch.W002"]


def test_a_newer_schema_is_refused_not_guessed(repo):
    set_version(SUPPORTED_SCHEMA_VERSION + 1)
    with pytest.raises(NewerSchema) as error:
        repo.descriptor()
    assert error.value.current == SUPPORTED_SCHEMA_VERSION + 1
    assert check_ids() == ["oxide_batch.E001"]


def test_a_missing_version_row_is_uninitialized(repo):
    models.SchemaVersion.objects.all().delete()
    with pytest.raises(SchemaUninitialized):
        repo.descriptor()
    assert check_ids() == ["oxide_batch.W001"]


def test_a_missing_version_table_is_uninitialized(repo):
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE ob_schema_version")
    with pytest.raises(SchemaUninitialized):
        repo.descriptor()
    assert check_ids() == ["oxide_batch.W001"]


@pytest.mark.parametrize("state", ["uninitialized", "migration_required"])
def test_the_check_does_not_stop_migrate(state):
    if state == "uninitialized":
        models.SchemaVersion.objects.all().delete()
    else:
        set_version(0)
    call_command("migrate", verbosity=0, skip_checks=False)


def test_a_newer_schema_does_stop_migrate():
    """The counterpart: an error-level check result really blocks ``migrate``."""
    set_version(SUPPORTED_SCHEMA_VERSION + 1)
    with pytest.raises(SystemCheckError):
        call_command("migrate", verbosity=0, skip_checks=False)
