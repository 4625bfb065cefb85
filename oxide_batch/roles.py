"""Roles: Django groups and the permissions they carry (contract §4.1), for
the API, the console and the selectors alike.

The permissions are rows on the ``oxide_batch.jobexecution`` content type (no
model change needed); migration ``0009_api_groups`` creates them and the
groups, and :func:`ensure_roles` re-creates them idempotently (tests flush
the database; an operator can run it after a manual clean-up).

| group | view_batch | run_batch | view_batch_payload | the five operator actions |
| --- | --- | --- | --- | --- |
| ``batch-viewer`` | ✔ | | | |
| ``batch-runtime`` | ✔ | ✔ | ✔ | |
| ``batch-operator`` | ✔ | | ✔ | ✔ |

The operator actions are separate permissions (contract §4.1): ``recover_execution``,
``abandon_execution``, ``stop_execution``, ``hold_instance`` (place and release)
and ``purge_metadata`` (survey and apply); migration ``0013`` creates them and
grants them to ``batch-operator``. The ``operate_batch`` permission of 0009 is
left in place but grants nothing any more. Superusers hold every permission.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

APP_LABEL = "oxide_batch"
CONTENT_TYPE_MODEL = "jobexecution"

VIEW_BATCH = "view_batch"
RUN_BATCH = "run_batch"
VIEW_BATCH_PAYLOAD = "view_batch_payload"
RECOVER_EXECUTION = "recover_execution"
ABANDON_EXECUTION = "abandon_execution"
STOP_EXECUTION = "stop_execution"
HOLD_INSTANCE = "hold_instance"
PURGE_METADATA = "purge_metadata"
# Defining who hears what (issue 41): a permission of its own, granted to
# ``batch-operator`` by migration 0022 (not one of the five actions above).
MANAGE_NOTIFICATIONS = "manage_notifications"
# Each operator action's own permission (contract §4.1).
OPERATOR_PERMISSIONS = (
    RECOVER_EXECUTION,
    ABANDON_EXECUTION,
    STOP_EXECUTION,
    HOLD_INSTANCE,
    PURGE_METADATA,
)

PERMISSIONS: Mapping[str, str] = {
    VIEW_BATCH: "Can read batch metadata",
    RUN_BATCH: "Can record runtime operations (launch, restart, steps, checkpoints)",
    VIEW_BATCH_PAYLOAD: "Can read checkpoint, context and partition context payloads",
    RECOVER_EXECUTION: "Can recover an execution (mark it failed or abandon it, audited)",
    ABANDON_EXECUTION: "Can abandon a stopped or failed execution",
    STOP_EXECUTION: "Can request the stop of an execution",
    HOLD_INSTANCE: "Can place and release retention holds",
    PURGE_METADATA: "Can survey and apply retention purges",
    MANAGE_NOTIFICATIONS: "Can manage notification rules and deliveries",
}

VIEWER = "batch-viewer"
RUNTIME = "batch-runtime"
OPERATOR = "batch-operator"

ROLES: Mapping[str, tuple[str, ...]] = {
    VIEWER: (VIEW_BATCH,),
    RUNTIME: (VIEW_BATCH, RUN_BATCH, VIEW_BATCH_PAYLOAD),
    OPERATOR: (VIEW_BATCH, VIEW_BATCH_PAYLOAD, *OPERATOR_PERMISSIONS, MANAGE_NOTIFICATIONS),
}


def groups_granting(codename: str) -> tuple[str, ...]:
    """The role groups that carry ``codename``, in the table's order."""
    return tuple(group for group, codenames in ROLES.items() if codename in codenames)


def perm(codename: str) -> str:
    """The ``app_label.codename`` name ``User.has_perm`` expects."""
    return f"{APP_LABEL}.{codename}"


def ensure_roles(
    group_model: Any | None = None,
    permission_model: Any | None = None,
    content_type_model: Any | None = None,
) -> None:
    """Create the permissions and groups (idempotent; never removes anything).

    Takes the models so a migration can pass its historical ones; by default
    the real ``Group``, ``Permission`` and ``ContentType``.
    """
    if group_model is None or permission_model is None or content_type_model is None:
        from django.contrib.auth.models import Group, Permission
        from django.contrib.contenttypes.models import ContentType

        group_model, permission_model, content_type_model = Group, Permission, ContentType
    content_type, _ = content_type_model.objects.get_or_create(
        app_label=APP_LABEL, model=CONTENT_TYPE_MODEL
    )
    permissions = {}
    for codename, name in PERMISSIONS.items():
        permissions[codename], _ = permission_model.objects.get_or_create(
            content_type=content_type, codename=codename, defaults={"name": name}
        )
    for group_name, codenames in ROLES.items():
        group, _ = group_model.objects.get_or_create(name=group_name)
        group.permissions.add(*(permissions[codename] for codename in codenames))
