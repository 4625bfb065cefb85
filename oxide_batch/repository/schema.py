"""The schema version: a constant of the code, recorded by the migrations in one row."""

from __future__ import annotations

from django.db import connections

from oxide_batch.domain.errors import MigrationRequired, NewerSchema, SchemaUninitialized

SUPPORTED_SCHEMA_VERSION = 12
SCHEMA_VERSION_TABLE = "ob_schema_version"
SELECT_VERSION = "SELECT version FROM ob_schema_version WHERE id = 1"


def read_schema_version(using: str = "default") -> int | None:
    """The recorded version, or ``None`` when the table or its row is missing.

    Raises Django's ``DatabaseError`` when the database cannot be reached.
    """
    connection = connections[using]
    with connection.cursor() as cursor:
        if SCHEMA_VERSION_TABLE not in connection.introspection.table_names(cursor):
            return None
        cursor.execute(SELECT_VERSION)
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def check_schema_version(found: int | None, supported: int = SUPPORTED_SCHEMA_VERSION) -> int:
    """Return ``found`` when it equals ``supported``; otherwise raise the typed error."""
    if found is None:
        raise SchemaUninitialized()
    if found < supported:
        raise MigrationRequired(current=found, supported=supported)
    if found > supported:
        raise NewerSchema(current=found, supported=supported)
    return found
