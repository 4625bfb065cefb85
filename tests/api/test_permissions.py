"""The permission matrix: every endpoint × anonymous / no role / viewer / runtime /
operator / superuser. Anonymous → 401, a missing permission → 403, else the
request reaches the endpoint (whatever it then answers)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from oxide_batch.roles import (
    ABANDON_EXECUTION,
    HOLD_INSTANCE,
    MANAGE_NOTIFICATIONS,
    OPERATOR_PERMISSIONS,
    PURGE_METADATA,
    RECOVER_EXECUTION,
    RUN_BATCH,
    STOP_EXECUTION,
    VIEW_BATCH,
    VIEW_BATCH_PAYLOAD,
)
from tests.api.conftest import ROLES
from tests.api.support import problem, url

PUBLIC = "public"
N = 987654321  # an id that exists nowhere

# (method, path, permission): one row per endpoint of the API.
ENDPOINTS = [
    ("GET", "descriptor", VIEW_BATCH),
    ("POST", "definitions", RUN_BATCH),
    ("POST", "definitions/upgrades", RUN_BATCH),
    ("GET", "instances", VIEW_BATCH),
    ("POST", "instances", RUN_BATCH),
    ("GET", f"instances/{N}", VIEW_BATCH),
    ("GET", f"instances/{N}/executions", VIEW_BATCH),
    ("POST", f"instances/{N}/executions", RUN_BATCH),
    ("GET", f"instances/{N}/flow-steps/load", VIEW_BATCH),
    ("GET", f"instances/{N}/flow-decisions/reusable", VIEW_BATCH),
    ("POST", "launches", RUN_BATCH),
    ("GET", "executions", VIEW_BATCH),
    ("GET", f"executions/{N}", VIEW_BATCH),
    ("POST", f"executions/{N}/transition", RUN_BATCH),
    ("POST", f"executions/{N}/exit-status", RUN_BATCH),
    ("POST", f"executions/{N}/claim", RUN_BATCH),
    ("POST", f"executions/{N}/control", RUN_BATCH),
    ("GET", f"executions/{N}/steps", VIEW_BATCH),
    ("POST", f"executions/{N}/steps", RUN_BATCH),
    ("GET", f"executions/{N}/flow-decisions", VIEW_BATCH),
    ("POST", f"executions/{N}/flow-decisions", RUN_BATCH),
    ("GET", f"steps/{N}", VIEW_BATCH),
    ("POST", f"steps/{N}/transition", RUN_BATCH),
    ("POST", f"steps/{N}/exit-status", RUN_BATCH),
    ("GET", f"steps/{N}/checkpoint", VIEW_BATCH_PAYLOAD),
    ("POST", f"steps/{N}/checkpoint", RUN_BATCH),
    ("GET", f"steps/{N}/partitions", VIEW_BATCH),
    ("POST", f"steps/{N}/partitions", RUN_BATCH),
    ("POST", f"steps/{N}/partitions/restart", RUN_BATCH),
    ("POST", f"steps/{N}/partitions/claim", RUN_BATCH),
    ("POST", f"steps/{N}/aggregate", RUN_BATCH),
    ("POST", f"partitions/{N}/assign", RUN_BATCH),
    ("POST", f"partitions/{N}/complete", RUN_BATCH),
    ("GET", f"executions/{N}/recovery-proposal", VIEW_BATCH),
    ("GET", f"executions/{N}/restart-plan", VIEW_BATCH),
    ("POST", f"executions/{N}/recover", RECOVER_EXECUTION),
    ("POST", f"executions/{N}/stop", STOP_EXECUTION),
    ("POST", f"executions/{N}/abandon", ABANDON_EXECUTION),
    ("POST", f"executions/{N}/lost-write/resolve", RECOVER_EXECUTION),
    ("PUT", f"instances/{N}/hold", HOLD_INSTANCE),
    ("DELETE", f"instances/{N}/hold", HOLD_INSTANCE),
    ("POST", "purge/survey", PURGE_METADATA),
    ("POST", "purge/apply", PURGE_METADATA),
    ("GET", "audit/recovery-decisions", VIEW_BATCH),
    ("GET", "audit/operator-requests", VIEW_BATCH),
    ("GET", "audit/retention-records", VIEW_BATCH),
    ("GET", "notifications/rules", MANAGE_NOTIFICATIONS),
    ("POST", "notifications/rules", MANAGE_NOTIFICATIONS),
    ("DELETE", "notifications/rules/oncall", MANAGE_NOTIFICATIONS),
    ("POST", "notifications/rules/oncall/enable", MANAGE_NOTIFICATIONS),
    ("POST", "notifications/rules/oncall/disable", MANAGE_NOTIFICATIONS),
    ("POST", "notifications/rules/oncall/test", MANAGE_NOTIFICATIONS),
    ("GET", "notifications/deliveries", MANAGE_NOTIFICATIONS),
    ("POST", f"notifications/deliveries/{N}/redeliver", MANAGE_NOTIFICATIONS),
    ("GET", "notifications/deadlines", MANAGE_NOTIFICATIONS),
    ("PUT", "notifications/deadlines", MANAGE_NOTIFICATIONS),
    ("DELETE", "notifications/deadlines", MANAGE_NOTIFICATIONS),
    ("GET", "schema/", PUBLIC),
    ("GET", "docs/", PUBLIC),
    ("GET", "redoc/", PUBLIC),
]

HOLDERS = {
    VIEW_BATCH: {"viewer", "runtime", "operator", "superuser"},
    RUN_BATCH: {"runtime", "superuser"},
    VIEW_BATCH_PAYLOAD: {"runtime", "operator", "superuser"},
    **{action: {"operator", "superuser"} for action in OPERATOR_PERMISSIONS},
    MANAGE_NOTIFICATIONS: {"operator", "superuser"},
    PUBLIC: set(ROLES),
}


def expected(role: str, permission: str) -> int | None:
    """401 / 403 when due, ``None`` when the request must get past authorization."""
    if permission == PUBLIC:
        return None
    if role == "anonymous":
        return 401
    return None if role in HOLDERS[permission] else 403


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(
    ("method", "path", "permission"), ENDPOINTS, ids=[f"{m} {p}" for m, p, _ in ENDPOINTS]
)
def test_permission_matrix(
    client_for: Callable[[str], APIClient], role: str, method: str, path: str, permission: str
) -> None:
    client = client_for(role)
    if method == "GET":
        response = client.get(url(path))
    else:
        response = client.generic(method, url(path), "{}", content_type="application/json")
    due = expected(role, permission)
    if due is None:
        assert response.status_code not in (401, 403), (response.status_code, response.content)
        assert response.status_code < 500
    else:
        body = problem(response, due)
        assert body["code"] == ("not_authenticated" if due == 401 else "permission_denied")
        if due == 401:
            assert response["WWW-Authenticate"] == "Token, Bearer"


def test_every_routed_path_is_in_the_matrix() -> None:
    from django.urls import get_resolver

    from oxide_batch.api import urls

    routed = {str(pattern.pattern) for pattern in urls.urlpatterns}
    assert len(routed) == len({path for _, path, _ in ENDPOINTS})
    assert get_resolver().resolve(url("descriptor")).url_name == "descriptor"


def test_a_bad_token_is_401(client_for: Callable[[str], APIClient]) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    problem(client.get(url("descriptor")), 401, "authentication_failed")


def test_session_authentication_reads(client_for: Callable[[str], APIClient]) -> None:
    from django.contrib.auth import get_user_model

    User = get_user_model()

    client_for("viewer")  # creates the user
    client = APIClient()
    client.force_login(User.objects.get(username="viewer-user"))
    assert client.get(url("descriptor")).status_code == 200
    problem(client.post(url("instances"), {"job_name": "j"}, format="json"), 403)


def test_an_unsupported_method_is_405_for_a_user_and_401_for_anonymous(
    client_for: Callable[[str], APIClient],
) -> None:
    body = problem(client_for("viewer").delete(url("descriptor")), 405, "method_not_allowed")
    assert "method" in body["detail"].lower() or body["detail"]
    problem(client_for("anonymous").delete(url("descriptor")), 401)
    response = client_for("viewer").put(url(f"executions/{N}/transition"), {}, format="json")
    problem(response, 405)
    assert "POST" in response["Allow"]


def test_a_permission_granted_to_the_user_directly_counts() -> None:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    User = get_user_model()

    from tests.api.conftest import token_client

    user = User.objects.create_user("direct")
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="oxide_batch", codename=RUN_BATCH)
    )
    client = token_client(user)
    response = client.post(url("instances"), {"job_name": "direct_job"}, format="json")
    assert response.status_code == 201, response.content
    problem(client.get(url("descriptor")), 403, "permission_denied")


def test_an_inactive_user_is_refused() -> None:
    from django.contrib.auth import get_user_model

    User = get_user_model()

    from tests.api.conftest import token_client

    user = User.objects.create_superuser("gone", password=None)
    client = token_client(user)
    User.objects.filter(pk=user.pk).update(is_active=False)
    problem(client.get(url("descriptor")), 401, "authentication_failed")


OPERATOR_ENDPOINTS = [entry for entry in ENDPOINTS if entry[2] in OPERATOR_PERMISSIONS]


@pytest.mark.parametrize("held", OPERATOR_PERMISSIONS)
def test_each_operator_action_needs_its_own_permission(db: None, held: str) -> None:
    """contract §4.1: recover, abandon, stop, hold/release and purge are separate
    permissions. A user granted one of them passes authorization for exactly
    the endpoints of that action and is 403 on every other operator endpoint."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    User = get_user_model()

    from oxide_batch.roles import APP_LABEL
    from tests.api.support import token_client

    user = User.objects.create_user(f"only-{held}")
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label=APP_LABEL, codename=VIEW_BATCH),
        Permission.objects.get(content_type__app_label=APP_LABEL, codename=held),
    )
    client = token_client(user)
    assert {permission for _, _, permission in OPERATOR_ENDPOINTS} == set(OPERATOR_PERMISSIONS)
    for method, path, permission in OPERATOR_ENDPOINTS:
        response = client.generic(method, url(path), "{}", content_type="application/json")
        if permission == held:
            assert response.status_code not in (401, 403), (method, path, response.content)
        else:
            assert response.status_code == 403, (method, path, response.status_code)
