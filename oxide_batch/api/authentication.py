"""Token authentication in ONE precompiled statement, with the batch permissions.

DRF's ``TokenAuthentication`` has the ORM build and compile
``Token.objects.select_related("user").get(key=…)`` on every request, and
Django's ``has_perm`` would then read the user's and its groups' permissions
(two more queries). This reads the token, the user's flags and the batch
permissions the user holds in one round trip: a statement built once per
process (and database vendor) from the models' table and column names, run
through Django's cursor (so it is counted, wrapped and error-translated like
any query).

The statement returns one row per batch permission held (the permission
columns NULL when none), so it needs no vendor-specific aggregate and runs
unchanged on PostgreSQL and SQLite; the rows are folded in Python. The
semantics are those of Django's ``ModelBackend``: a permission counts when the
user holds it directly or through one of its groups, matched by app label and
codename; superusers hold every permission; an unknown token or an inactive
user is refused with DRF's own messages (401 with ``WWW-Authenticate``).

``request.user`` is a real user instance built from the row (``from_db``, as
the ORM would): its primary key, username, ``is_active`` and ``is_superuser``
are loaded; any other field is deferred and would be read lazily, as the ORM
does for ``.only()``. ``request.auth`` is the token, likewise built from the
row (its ``created`` deferred).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connections, router
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from oxide_batch.api.roles import APP_LABEL, PERMISSIONS

# The batch permission codenames the authenticated user holds (see permissions.py).
ATTRIBUTE = "_oxide_batch_permissions"
CODENAMES = tuple(PERMISSIONS)
ALL_HELD = frozenset(CODENAMES)

# The user's fields the API reads (the audit actor, the throttle, authorization).
USER_FIELDS = frozenset({"is_active", "is_superuser"})


@dataclass(frozen=True)
class _Statement:
    sql: str
    user_model: Any
    user_fields: tuple[str, ...]  # attnames, in the order ``from_db`` expects


def _column(model: Any, name: str) -> str:
    return str(model._meta.get_field(name).column)


@functools.cache
def _statement(alias: str, vendor: str, token_model: Any) -> _Statement:
    """The statement, built once from the models' table and column names."""
    del vendor  # part of the key only: quoting differs between vendors
    quote = connections[alias].ops.quote_name
    user_model: Any = get_user_model()
    wanted = USER_FIELDS | {user_model._meta.pk.name, user_model.USERNAME_FIELD}
    # ``from_db`` takes the loaded values in concrete-field order.
    fields = [f for f in user_model._meta.concrete_fields if f.name in wanted]
    # PermissionsMixin's many-to-many tables (Django's ModelBackend reads the same).
    user_permissions: Any = user_model.user_permissions.through
    user_groups: Any = user_model.groups.through
    group_permissions: Any = Group.permissions.through

    def table(model: Any) -> str:
        return str(quote(model._meta.db_table))

    def col(alias_: str, model: Any, name: str) -> str:
        return f"{alias_}.{quote(_column(model, name))}"

    user_pk = col("u", user_model, user_model._meta.pk.name)
    permission_id = col("p", Permission, "id")
    placeholders = ", ".join(["%s"] * len(CODENAMES))
    selected = ", ".join(f"u.{quote(f.column)}" for f in fields)
    sql = (
        f"SELECT {selected}, {col('p', Permission, 'codename')} "  # nosec B608 # quoted model names; values bound
        f"FROM {table(token_model)} t "
        f"JOIN {table(user_model)} u ON {user_pk} = {col('t', token_model, 'user')} "
        f"LEFT JOIN {table(Permission)} p "
        f"ON {col('p', Permission, 'codename')} IN ({placeholders}) "
        f"AND {col('p', Permission, 'content_type')} IN "
        f"(SELECT {col('ct', ContentType, 'id')} FROM {table(ContentType)} ct "
        f"WHERE {col('ct', ContentType, 'app_label')} = %s) "
        f"AND ({permission_id} IN (SELECT {col('up', user_permissions, 'permission')} "
        f"FROM {table(user_permissions)} up "
        f"WHERE {col('up', user_permissions, 'user')} = {user_pk}) "
        f"OR {permission_id} IN (SELECT {col('gp', group_permissions, 'permission')} "
        f"FROM {table(group_permissions)} gp JOIN {table(user_groups)} ug "
        f"ON {col('ug', user_groups, 'group')} = {col('gp', group_permissions, 'group')} "
        f"WHERE {col('ug', user_groups, 'user')} = {user_pk})) "
        f"WHERE {col('t', token_model, 'key')} = %s"
    )
    return _Statement(sql, user_model, tuple(f.attname for f in fields))


def _user(statement: _Statement, alias: str, row: Sequence[Any]) -> Any:
    """The user instance the ORM would build for ``.only(<the loaded fields>)``."""
    values = list(row[: len(statement.user_fields)])
    user_model = statement.user_model
    for index, attname in enumerate(statement.user_fields):
        if attname in USER_FIELDS:
            values[index] = bool(values[index])  # SQLite answers 0/1
    return user_model.from_db(alias, statement.user_fields, values)


def authenticate_token(token_model: Any, key: str) -> tuple[Any, Any]:
    """The user (with its batch permissions) and the token of ``key`` — one statement."""
    alias = router.db_for_read(token_model)  # where DRF's ``Token.objects.get`` reads
    connection = connections[alias]
    statement = _statement(alias, connection.vendor, token_model)
    with connection.cursor() as cursor:
        cursor.execute(statement.sql, [*CODENAMES, APP_LABEL, key])
        rows = cursor.fetchall()
    if not rows:
        raise exceptions.AuthenticationFailed(_("Invalid token."))
    user = _user(statement, alias, rows[0])
    if not user.is_active:
        raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
    held = ALL_HELD if user.is_superuser else frozenset(r[-1] for r in rows if r[-1] is not None)
    setattr(user, ATTRIBUTE, held)
    token = token_model.from_db(alias, ("key", "user_id"), (key, user.pk))
    token_model._meta.get_field("user").set_cached_value(token, user)
    return user, token


class BatchTokenAuthentication(TokenAuthentication):
    """DRF's token authentication (keyword ``Token``, same answers), in one statement
    that also reads the batch permissions."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        return authenticate_token(self.get_model(), key)
