"""Token authentication that also reads the user's batch permissions, cheaply.

DRF's ``TokenAuthentication`` reads the token with its user (one query); Django's
``has_perm`` would then read the user's and its groups' permissions through
the ORM (two more queries, and more Python than the chunk commit they guard).
This reads which batch permissions the user holds in ONE precompiled SQL
statement, with the semantics of Django's ``ModelBackend``: the user's own
permissions or its groups'; superusers hold every permission (no query);
inactive users are refused by the token check.
"""

from __future__ import annotations

import functools
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connections
from rest_framework.authentication import TokenAuthentication

from oxide_batch.api.roles import APP_LABEL, PERMISSIONS

# The batch permission codenames the authenticated user holds (see permissions.py).
ATTRIBUTE = "_oxide_batch_permissions"
CODENAMES = tuple(PERMISSIONS)


@functools.cache
def _held_sql(vendor: str) -> str:
    """The statement, built once from the models' table names."""
    del vendor  # one statement per database vendor (quoting)
    connection = connections["default"]
    quote = connection.ops.quote_name
    user_model = get_user_model()
    # PermissionsMixin's many-to-many tables (Django's ModelBackend reads the same).
    user_permissions: Any = user_model.user_permissions.through
    user_groups: Any = user_model.groups.through
    group_permissions = Group.permissions.through
    permission = quote(Permission._meta.db_table)
    content_type = quote(ContentType._meta.db_table)
    placeholders = ", ".join(["%s"] * len(CODENAMES))
    return (
        f"SELECT p.{quote('codename')} FROM {permission} p "  # nosec B608 # quoted model tables; values bound
        f"JOIN {content_type} ct ON ct.{quote('id')} = p.{quote('content_type_id')} "
        f"WHERE ct.{quote('app_label')} = %s AND p.{quote('codename')} IN ({placeholders}) "
        f"AND (p.{quote('id')} IN (SELECT up.{quote('permission_id')} "
        f"FROM {quote(user_permissions._meta.db_table)} up WHERE up.{quote('user_id')} = %s) "
        f"OR p.{quote('id')} IN (SELECT gp.{quote('permission_id')} "
        f"FROM {quote(group_permissions._meta.db_table)} gp "
        f"JOIN {quote(user_groups._meta.db_table)} ug "
        f"ON ug.{quote('group_id')} = gp.{quote('group_id')} WHERE ug.{quote('user_id')} = %s))"
    )


def held_permissions(user: Any) -> frozenset[str]:
    """The batch permission codenames ``user`` holds (one statement; none for a superuser)."""
    if user.is_superuser:
        return frozenset(CODENAMES)
    connection = connections["default"]
    with connection.cursor() as cursor:
        cursor.execute(_held_sql(connection.vendor), [APP_LABEL, *CODENAMES, user.pk, user.pk])
        return frozenset(row[0] for row in cursor.fetchall())


class BatchTokenAuthentication(TokenAuthentication):
    """DRF's token authentication (keyword ``Token``), plus the batch permissions."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        user, token = super().authenticate_credentials(key)
        setattr(user, ATTRIBUTE, held_permissions(user))
        return user, token
