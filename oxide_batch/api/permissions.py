"""Who may call what: one permission class reading the view's per-method table.

Each view names the permission each of its methods needs
(``required_permissions = {"GET": VIEW_BATCH, "POST": RUN_BATCH}``); HEAD
follows GET. A method the view does not list only needs a login, so it answers
405 rather than 403. Anonymous → 401 (``NotAuthenticated``, because token
authentication is listed first); a user without the permission → 403.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import exceptions
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from oxide_batch.api.authentication import ATTRIBUTE
from oxide_batch.roles import OPERATOR_PERMISSIONS, VIEW_BATCH_PAYLOAD, groups_granting, perm


def required_permission(request: Request, view: Any) -> str | None:
    """The permission the view's method needs (HEAD follows GET); ``None``: a login."""
    table: Mapping[str, str] = getattr(view, "required_permissions", {})
    return table.get("GET" if request.method == "HEAD" else str(request.method))


def requires_operate(request: Request, view: Any) -> bool:
    """Whether the view's method is an operator action (the operator throttle counts it)."""
    return required_permission(request, view) in OPERATOR_PERMISSIONS


def has_batch_permission(user: Any, codename: str) -> bool:
    if user is None or not user.is_authenticated:
        return False
    held = getattr(user, ATTRIBUTE, None)
    if held is not None:  # read with the token (one query for both)
        return bool(user.is_active and (user.is_superuser or codename in held))
    return bool(user.has_perm(perm(codename)))


def may_see_payloads(request: Request) -> bool:
    """Checkpoint, context and partition-context payloads: runtimes and operators only."""
    return has_batch_permission(request.user, VIEW_BATCH_PAYLOAD)


class MissingPermission(exceptions.PermissionDenied):
    """403 ``permission_denied`` naming the permission the action needs and the
    groups that grant it (contract §4.6: errors that say what to do)."""

    def __init__(self, codename: str) -> None:
        self.permission = perm(codename)
        self.groups = groups_granting(codename)
        granted = (
            f", granted by the group {' or '.join(self.groups)}"
            if self.groups
            else " (superusers only)"
        )
        super().__init__(
            f"this needs the permission {self.permission}{granted}; ask an administrator "
            "to add the user to it",
            code="permission_denied",
        )


class BatchPermission(BasePermission):
    message = "you may not perform this action"

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if user is None or not user.is_authenticated:
            return False  # NotAuthenticated: 401
        codename = required_permission(request, view)
        if codename is None:
            return True
        if not has_batch_permission(user, codename):
            raise MissingPermission(codename)
        return True
