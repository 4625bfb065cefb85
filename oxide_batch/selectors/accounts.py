"""The site's user accounts and permissions: the account a command credits
its acts to, a permission's name for the console's refusal page."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model


def active_account_id(login: str) -> int | None:
    """The id of the active account whose username is ``login``, if any (one
    query on the username's unique index)."""
    user_model: Any = get_user_model()
    found = (
        user_model.objects.filter(**{user_model.USERNAME_FIELD: login, "is_active": True})
        .values_list("pk", flat=True)
        .first()
    )
    return None if found is None else int(found)


def permission_name(app_label: str, codename: str) -> str | None:
    """The name of the permission ``app_label.codename``, if it exists (one
    query)."""
    from django.contrib.auth.models import Permission

    found: str | None = (
        Permission.objects.filter(content_type__app_label=app_label, codename=codename)
        .values_list("name", flat=True)
        .first()
    )
    return found
