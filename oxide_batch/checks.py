"""System check: the database schema version against the code's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any

from django.apps import AppConfig, apps
from django.conf import settings
from django.core import checks
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

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


# What the app needs from the project that installs it (README, "Add oxide_batch
# to your Django project"); Django's admin checks its own middleware and
# context processors (admin.E403–E410).
REQUIRED_APPS: Sequence[tuple[str, str]] = (
    ("django.contrib.admin", "the console is the admin's oxide_batch section"),
    ("django.contrib.auth", "tokens, roles and the console's users"),
    ("django.contrib.contenttypes", "the roles' permissions"),
    ("django.contrib.sessions", "the console's logins"),
    ("django.contrib.messages", "the console's action results"),
    ("django.contrib.staticfiles", "the console's and the API docs' stylesheets and scripts"),
    ("rest_framework", "the API"),
    ("drf_spectacular", "the API's OpenAPI document and its docs pages"),
    ("drf_spectacular_sidecar", "the API docs pages' bundles, served offline"),
)
CSRF_MIDDLEWARE = "django.middleware.csrf.CsrfViewMiddleware"
SUPPORTED_ENGINES = ("postgresql", "sqlite3")


@checks.register()
def installation_check(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """The apps the app needs (``oxide_batch.E201``), the CSRF middleware the
    console's forms rely on (``W201``), and a database it supports
    (``E202``; SQLite without ``BEGIN IMMEDIATE``: ``W202``)."""
    messages: list[checks.CheckMessage] = []
    for name, why in REQUIRED_APPS:
        if not apps.is_installed(name):
            messages.append(
                checks.Error(
                    f"{name} is not in INSTALLED_APPS: oxide_batch needs it for {why}",
                    hint=f"add {name!r} to INSTALLED_APPS",
                    id="oxide_batch.E201",
                )
            )
    if CSRF_MIDDLEWARE not in settings.MIDDLEWARE:
        messages.append(
            checks.Warning(
                f"{CSRF_MIDDLEWARE} is not in MIDDLEWARE: the console's forms (recover, "
                "stop, abandon, purge) would accept requests from other sites",
                hint=f"add {CSRF_MIDDLEWARE!r} to MIDDLEWARE",
                id="oxide_batch.W201",
            )
        )
    # The app's tables and units of work are on the default database.
    alias = DEFAULT_DB_ALIAS
    connection = connections[alias]
    if connection.vendor == "sqlite":
        options = connection.settings_dict.get("OPTIONS", {})
        if str(options.get("transaction_mode", "")).upper() != "IMMEDIATE":
            messages.append(
                checks.Warning(
                    f"database {alias!r}: SQLite without transaction_mode IMMEDIATE: "
                    "a unit of work takes its write lock late, so concurrent writers "
                    "fail with 'database is locked' instead of waiting",
                    hint=f"set DATABASES[{alias!r}]['OPTIONS']['transaction_mode'] = 'IMMEDIATE'",
                    id="oxide_batch.W202",
                )
            )
    elif connection.vendor != "postgresql":
        messages.append(
            checks.Error(
                f"database {alias!r}: oxide_batch supports PostgreSQL and SQLite, "
                f"not {connection.vendor}",
                id="oxide_batch.E202",
            )
        )
    return messages
