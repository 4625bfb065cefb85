"""System check: the database schema version against the code's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.db import DatabaseError

from oxide_batch.domain.errors import MigrationRequired, NewerSchema, SchemaUninitialized
from oxide_batch.repository.schema import check_schema_version, read_schema_version

# Set while ``migrate`` runs its checks (oxide_batch's ``migrate`` command).
_MIGRATING: ContextVar[bool] = ContextVar("oxide_batch_migrating", default=False)


@contextlib.contextmanager
def migrating() -> Iterator[None]:
    """The checks run by ``migrate`` itself: "run migrate" would be noise there."""
    token = _MIGRATING.set(True)
    try:
        yield
    finally:
        _MIGRATING.reset(token)


@checks.register()
def schema_version_check(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Report ``schema_uninitialized`` / ``migration_required`` as warnings (``migrate``
    fixes them, so they must not stop it — and ``migrate`` itself does not show
    them) and ``newer_schema`` as an error (this code cannot serve a schema it
    does not know)."""
    try:
        check_schema_version(read_schema_version())
    except SchemaUninitialized as error:
        if _MIGRATING.get():
            return []
        return [checks.Warning(error.message, hint="run manage.py migrate", id="oxide_batch.W001")]
    except MigrationRequired as error:
        if _MIGRATING.get():
            return []
        return [checks.Warning(error.message, hint="run manage.py migrate", id="oxide_batch.W002")]
    except NewerSchema as error:
        return [
            checks.Error(
                error.message,
                hint="deploy the code that matches the database schema",
                id="oxide_batch.E001",
            )
        ]
    except DatabaseError:
        return [
            checks.Warning(
                "database unavailable: schema version not checked", id="oxide_batch.W003"
            )
        ]
    return []
