"""Token authentication is ONE statement (token, user flags and batch permissions)
and answers exactly what DRF's ``TokenAuthentication`` answers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from oxide_batch.api.authentication import ATTRIBUTE, BatchTokenAuthentication
from oxide_batch.api.roles import (
    APP_LABEL,
    OPERATOR,
    PERMISSIONS,
    RECOVER_EXECUTION,
    RUN_BATCH,
    RUNTIME,
    VIEW_BATCH,
    VIEW_BATCH_PAYLOAD,
    VIEWER,
)
from tests.api.support import Runtime, problem, token_client, url

pytestmark = pytest.mark.django_db


def _key(user: User) -> str:
    return str(Token.objects.get_or_create(user=user)[0].key)


def _ours(key: str) -> tuple[Any, Any]:
    return BatchTokenAuthentication().authenticate_credentials(key)


def _refusal(authenticate: Callable[[str], Any], key: str) -> tuple[str, str]:
    with pytest.raises(exceptions.AuthenticationFailed) as raised:
        authenticate(key)
    return str(raised.value.detail), str(raised.value.get_codes())


def _in_groups(name: str, *groups: str) -> User:
    user = User.objects.create_user(name)
    user.groups.add(*Group.objects.filter(name__in=groups))
    return user


def _batch_permission(codename: str) -> Permission:
    return Permission.objects.get(content_type__app_label=APP_LABEL, codename=codename)


# ------------------------------------------------------------------ same answers as DRF


@pytest.mark.parametrize("case", ["unknown", "inactive", "deleted user", "revoked"])
def test_a_refused_token_is_refused_as_drf_refuses_it(case: str) -> None:
    user = User.objects.create_user("someone")
    key = _key(user)
    if case == "unknown":
        key = "0" * 40
    elif case == "inactive":
        User.objects.filter(pk=user.pk).update(is_active=False)
    elif case == "deleted user":
        user.delete()
    else:
        Token.objects.filter(key=key).delete()
    drf = _refusal(TokenAuthentication().authenticate_credentials, key)
    assert _refusal(_ours, key) == drf
    expected = "User inactive or deleted." if case == "inactive" else "Invalid token."
    assert drf[0] == expected


@pytest.mark.parametrize("case", ["unknown", "inactive"])
def test_a_refused_token_is_a_401_problem_with_www_authenticate(case: str) -> None:
    user = User.objects.create_user("someone", is_active=case != "inactive")
    client = token_client(user)
    if case == "unknown":
        client.credentials(HTTP_AUTHORIZATION=f"Token {'f' * 40}")
    response = client.get(url("descriptor"))
    body = problem(response, 401, "authentication_failed")
    assert response["WWW-Authenticate"] == "Token"
    assert body["detail"] == (
        "User inactive or deleted." if case == "inactive" else "Invalid token."
    )


def test_the_user_and_token_are_those_drf_returns() -> None:
    user = _in_groups("runner", RUNTIME)
    key = _key(user)
    drf_user, drf_token = TokenAuthentication().authenticate_credentials(key)
    ours, token = _ours(key)
    assert type(ours) is type(drf_user)
    assert ours == drf_user
    assert (ours.pk, ours.get_username(), ours.is_active, ours.is_superuser) == (
        drf_user.pk,
        "runner",
        True,
        False,
    )
    assert token == drf_token
    assert token.user is ours
    # Fields not read are deferred, and load lazily with their stored values.
    assert "email" in ours.get_deferred_fields()
    assert (ours.email, ours.date_joined) == (drf_user.email, drf_user.date_joined)
    assert token.created == drf_token.created


# ------------------------------------------------------------------ one statement


def test_authentication_is_one_statement_and_the_user_needs_no_other(
    django_assert_num_queries: Any,
) -> None:
    key = _key(_in_groups("runner", RUNTIME))
    with django_assert_num_queries(1):
        user, token = _ours(key)
        # What the API reads: authorization, the audit actor, the throttle's ident.
        assert (user.is_authenticated, user.is_active, user.is_superuser) == (True, True, False)
        assert user.get_username() == "runner"
        assert user.pk == user.id == token.user_id
        assert token.key == key
        assert token.user is user
        assert getattr(user, ATTRIBUTE) == {VIEW_BATCH, RUN_BATCH, VIEW_BATCH_PAYLOAD}


AUTH_TABLES = ("authtoken_token", "auth_user", "auth_permission", "auth_group")


def _auth_statements(client: APIClient, path: str) -> tuple[int, list[str]]:
    """The response status and the statements of one request that read the
    token, users, groups or permissions."""
    with CaptureQueriesContext(connection) as captured:
        status = client.get(url(path)).status_code
    statements = [q["sql"] for q in captured.captured_queries]
    return status, [sql for sql in statements if any(f'"{t}' in sql for t in AUTH_TABLES)]


@pytest.mark.parametrize(
    ("role", "groups"),
    [("viewer", (VIEWER,)), ("operator", (OPERATOR,)), ("no role", ()), ("super", None)],
)
@pytest.mark.parametrize("path", ["descriptor", "executions", f"executions/{10**9}"])
def test_a_token_request_authenticates_in_one_statement(
    role: str, groups: tuple[str, ...] | None, path: str
) -> None:
    if groups is None:
        user = User.objects.create_superuser("super", password=None)
    else:
        user = _in_groups(role.replace(" ", "-"), *groups)
    client = token_client(user)
    client.get(url(path))  # warm: the statement is built on first use
    status, statements = _auth_statements(client, path)
    assert status == (403 if role == "no role" else 404 if "/" in path else 200)
    assert len(statements) == 1, statements
    assert '"authtoken_token"' in statements[0]
    assert '"auth_permission"' in statements[0]


def test_an_operator_action_records_the_actor_from_the_authenticated_row(
    rt: Runtime, operator: Runtime
) -> None:
    from oxide_batch.models import JobInstance

    instance, _ = rt.launch()
    operator.get("descriptor")  # warm
    path = f"instances/{instance['id']}/hold"
    body = {"reason_code": "LEGAL_HOLD", "operation_id": "hold-1"}
    with CaptureQueriesContext(connection) as captured:
        operator.put(path, body, 200)
    statements = [q["sql"] for q in captured.captured_queries]
    # The actor (username + id) needs no read of the user beyond authentication.
    assert len([s for s in statements if any(f'"{t}' in s for t in AUTH_TABLES)]) == 1, statements
    user = User.objects.get(username="operator-user")
    row = JobInstance.objects.get(pk=instance["id"])
    assert (row.hold_actor, row.hold_user_id) == ("operator-user", user.pk)


# ------------------------------------------------------------------ permissions


def _held(user: User) -> frozenset[str]:
    _, token = _ours(_key(user))
    held: frozenset[str] = getattr(token.user, ATTRIBUTE)
    return held


def test_permissions_come_from_groups_and_from_the_user_and_are_unioned() -> None:
    user = _in_groups("both", VIEWER, OPERATOR)
    user.user_permissions.add(_batch_permission(RUN_BATCH))
    assert _held(user) == set(PERMISSIONS)
    assert _held(_in_groups("viewer-only", VIEWER)) == {VIEW_BATCH}
    assert _held(User.objects.create_user("nothing")) == frozenset()


def test_a_superuser_holds_every_batch_permission_without_any_group() -> None:
    superuser = User.objects.create_superuser("root", password=None)
    assert _held(superuser) == set(PERMISSIONS)


def test_only_the_users_own_and_its_groups_permissions_count() -> None:
    """Another user's grants, another group's, and a same-named permission of
    another app do not leak in."""
    other = _in_groups("other", OPERATOR)
    other.user_permissions.add(_batch_permission(RUN_BATCH))
    lone = Group.objects.create(name="lone")
    lone.permissions.add(_batch_permission(RECOVER_EXECUTION))
    foreign_type = ContentType.objects.get_for_model(Group)
    foreign = Permission.objects.create(
        content_type=foreign_type, codename=RUN_BATCH, name="same codename, other app"
    )
    user = _in_groups("plain", VIEWER)
    user.user_permissions.add(foreign)
    assert _held(user) == {VIEW_BATCH}
    # Django's own check agrees.
    fresh = User.objects.get(pk=user.pk)
    assert {c for c in PERMISSIONS if fresh.has_perm(f"{APP_LABEL}.{c}")} == {VIEW_BATCH}


def test_a_revoked_grant_takes_effect_on_the_next_request() -> None:
    user = _in_groups("runner", RUNTIME)
    client = token_client(user)
    assert client.post(url("instances"), {"job_name": "a"}, format="json").status_code == 201
    user.groups.clear()
    response = client.post(url("instances"), {"job_name": "b"}, format="json")
    problem(response, 403, "permission_denied")


def test_session_authentication_still_reads_permissions_through_django() -> None:
    user = _in_groups("session-viewer", VIEWER)
    client = APIClient()
    client.force_login(user)
    assert client.get(url("descriptor")).status_code == 200
    problem(client.post(url("instances"), {"job_name": "j"}, format="json"), 403)
