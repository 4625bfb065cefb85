"""The site's user accounts, as the commands credit their acts to them."""

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
