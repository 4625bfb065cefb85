"""Writes of API tokens: issue one (the token is returned, once, and only its
prefix and digest are stored) and revoke (the row stays, for the list).

Tokens are the API's, not batch metadata, so these write the ``ApiToken`` rows
directly, each use case in one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain.errors import ApiTokenNotFound, GroupNotFound, UserNotFound
from oxide_batch.domain.jobscope import validate_patterns
from oxide_batch.domain.tokens import key_prefix, new_token, token_digest, validate_token_name
from oxide_batch.repository.faults import is_unique_violation

# A fresh prefix taken already (46 random bits: about never) is drawn again.
PREFIX_ATTEMPTS = 3


@dataclass(frozen=True)
class IssuedToken:
    """A new token: ``token`` is the only copy there will ever be."""

    token: str
    row: models.ApiToken


@dataclass(frozen=True)
class Revocation:
    """A revoked token; ``already`` when it was revoked before (its first
    revocation time is kept)."""

    row: models.ApiToken
    already: bool


def issue_api_token(
    *,
    user: Any,
    name: str,
    now: datetime,
    expires_in: timedelta | None = None,
    job_patterns: Sequence[str] | None = None,
) -> IssuedToken:
    """A new token of ``user`` named ``name``, expiring ``expires_in`` after
    ``now`` (``None``: never), limited to the jobs ``job_patterns`` match
    (``None``: every job; :mod:`oxide_batch.domain.jobscope`). Raises the
    name's or a pattern's ``DomainError``."""
    validate_token_name(name)
    patterns = None if job_patterns is None else list(validate_patterns(job_patterns))
    if expires_in is not None and expires_in <= timedelta(0):
        raise ValueError("expires_in must be positive")
    expires_at = None if expires_in is None else now + expires_in
    for attempt in range(PREFIX_ATTEMPTS):
        token = new_token()
        try:
            with transaction.atomic():
                row = models.ApiToken.objects.create(
                    user=user,
                    name=name,
                    key_prefix=key_prefix(token),
                    digest=token_digest(token),
                    created_at=now,
                    expires_at=expires_at,
                    job_patterns=patterns,
                )
        except IntegrityError as error:
            if not is_unique_violation(error) or attempt + 1 == PREFIX_ATTEMPTS:
                raise
            continue
        return IssuedToken(token=token, row=row)
    raise AssertionError("unreachable")  # pragma: no cover


def issue_api_token_for(
    *,
    username: str,
    name: str,
    now: datetime,
    expires_in: timedelta | None = None,
    groups: Sequence[str] = (),
    create_user: bool = False,
    replace: bool = False,
    job_patterns: Sequence[str] | None = None,
) -> IssuedToken:
    """``manage.py batch_token create`` in one transaction: the user named
    ``username`` (created without a usable password when ``create_user``; else
    ``UserNotFound``), added to ``groups`` (each must exist: ``GroupNotFound``),
    given a new token; with ``replace`` the user's other live tokens of the same
    name are revoked at ``now``; ``job_patterns`` limit it to those jobs."""
    validate_token_name(name)
    if job_patterns is not None:
        validate_patterns(job_patterns)
    user_model: Any = get_user_model()
    with transaction.atomic():
        found = {group.name: group for group in Group.objects.filter(name__in=groups)}
        missing = [group for group in groups if group not in found]
        if missing:
            raise GroupNotFound(name=missing[0])
        lookup = {user_model.USERNAME_FIELD: username}
        user = user_model.objects.filter(**lookup).first()
        if user is None:
            if not create_user:
                raise UserNotFound(username=username)
            user = user_model.objects.create_user(**lookup, password=None)
        if found:
            user.groups.add(*found.values())
        if replace:
            live(models.ApiToken.objects.filter(user=user, name=name), now).update(revoked_at=now)
        return issue_api_token(
            user=user, name=name, now=now, expires_in=expires_in, job_patterns=job_patterns
        )


def live(tokens: QuerySet[models.ApiToken], now: datetime) -> QuerySet[models.ApiToken]:
    """The tokens of ``tokens`` that authenticate at ``now``: not revoked, not expired."""
    return tokens.filter(revoked_at__isnull=True).exclude(expires_at__lte=now)


def revoke_api_token(*, key_prefix: str, now: datetime) -> Revocation:
    """Revoke the token with ``key_prefix`` at ``now`` (the row locked while it
    is read and written); ``ApiTokenNotFound``. Revoking it again changes
    nothing and says so."""
    with transaction.atomic():
        row = models.ApiToken.objects.select_for_update().filter(key_prefix=key_prefix).first()
        if row is None:
            raise ApiTokenNotFound(key_prefix=key_prefix)
        if row.revoked_at is not None:
            return Revocation(row=row, already=True)
        row.revoked_at = now
        row.save(update_fields=["revoked_at"])
        return Revocation(row=row, already=False)


def revoke_api_tokens(*, ids: Iterable[int], now: datetime) -> int:
    """Revoke those of the tokens ``ids`` not revoked yet (the console's action);
    how many were."""
    return int(
        models.ApiToken.objects.filter(pk__in=list(ids), revoked_at__isnull=True).update(
            revoked_at=now
        )
    )
