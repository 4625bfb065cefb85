"""The console's staff accounts: ``manage.py batch_user create`` (issue 39)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from oxide_batch.roles import ensure_roles


@dataclass(frozen=True)
class ConsoleUser:
    id: int
    username: str
    group: str


def console_user_exists(username: str) -> bool:
    user_model: Any = get_user_model()
    return bool(user_model.objects.filter(**{user_model.USERNAME_FIELD: username}).exists())


def create_console_user(*, username: str, password: str, group: str) -> ConsoleUser:
    """A staff account that can sign in to the console, in the role group
    ``group`` (one of :data:`oxide_batch.roles.ROLES`), in one transaction.
    The roles are made first if a flush removed them (idempotent). The caller
    has checked the name, the password and that no account has that name (a
    concurrent creation of the same name is an ``IntegrityError``)."""
    user_model: Any = get_user_model()
    with transaction.atomic():
        ensure_roles()
        user = user_model.objects.create_user(
            **{user_model.USERNAME_FIELD: username}, password=password, is_staff=True
        )
        user.groups.add(Group.objects.get(name=group))
    return ConsoleUser(id=int(user.pk), username=username, group=group)
