"""API tokens: a request's credentials and the command's listing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connections, router

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.repository import statements
from oxide_batch.roles import APP_LABEL, PERMISSIONS

BATCH_CODENAMES = tuple(PERMISSIONS)


@dataclass(frozen=True)
class TokenCredentials:
    """The token row of a prefix with its user and the batch permissions the
    user holds (Django's ``ModelBackend`` semantics; a superuser is not expanded
    here, nor is an inactive user emptied: the caller decides)."""

    token: models.ApiToken
    user: Any
    held: frozenset[str]


def token_credentials(key_prefix: str) -> TokenCredentials | None:
    """The token with ``key_prefix``, its user and the user's batch permissions,
    in one statement (``None``: no such token) —
    :func:`oxide_batch.repository.statements.credentials`, explicit SQL: the
    ORM's form of the same read costs 0.6–0.8 ms of CPU per request to compile
    (docs/performance.md), on every request of every runtime.

    The user is a real instance, as the ORM builds it for ``.only()``: its
    primary key, username, ``is_active`` and ``is_superuser`` are loaded, any
    other field is deferred and read when used. The token likewise (its
    ``created_at`` deferred).
    """
    alias = router.db_for_read(models.ApiToken)
    connection = connections[alias]
    statement = statements.credentials(connection, APP_LABEL, BATCH_CODENAMES)
    with connection.cursor() as cursor:
        rows = statement.run(cursor, connection, key_prefix)
    if not rows:
        return None
    first = rows[0]
    split = len(statement.token_fields)
    user = get_user_model().from_db(alias, statement.user_fields, first[split:-1])
    token = models.ApiToken.from_db(alias, statement.token_fields, first[:split])
    models.ApiToken._meta.get_field("user").set_cached_value(token, user)
    held = frozenset(row[-1] for row in rows if row[-1] is not None)
    return TokenCredentials(token=token, user=user, held=held)


def api_tokens(*, username: str | None = None) -> list[dict[str, Any]]:
    """Every token (of the user named ``username``), oldest first, without
    anything secret: ``{key_prefix, name, user, created_at, expires_at,
    revoked_at, job_patterns}``. One query."""
    user_field = f"user__{get_user_model().USERNAME_FIELD}"
    rows = models.ApiToken.objects.order_by("id")
    if username is not None:
        rows = rows.filter(**{user_field: username})
    columns = ("key_prefix", "name", "created_at", "expires_at", "revoked_at", "job_patterns")
    return [
        {"user": row[user_field], **{column: row[column] for column in columns}}
        for row in rows.values(user_field, *columns)
    ]
