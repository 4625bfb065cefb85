"""Token authentication against hashed tokens is ONE query (token, user flags
and batch permissions), writes nothing, answers DRF's 401s, and holds exactly
the permissions Django's own ``has_perm`` says."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework import exceptions
from rest_framework.test import APIClient

from oxide_batch import models
from oxide_batch.api.authentication import ATTRIBUTE, BatchTokenAuthentication
from oxide_batch.domain.tokens import key_prefix
from oxide_batch.repository import FixedClock
from oxide_batch.repository.statements import TOKEN_FIELDS, USER_FLAGS
from oxide_batch.repository.tokens import issue_api_token, revoke_api_token
from oxide_batch.roles import (
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
from oxide_batch.selectors.tokens import token_credentials
from tests.api.support import Runtime, fixed_api_clock, problem, token_client, url
from tests.helpers import api_token

User = get_user_model()

pytestmark = pytest.mark.django_db

# The tables authentication reads; a request's statements naming any are its own.
AUTH_TABLES = ("ob_api_token", "auth_user", "auth_permission", "auth_group")


def _ours(token: str) -> tuple[Any, Any]:
    return BatchTokenAuthentication().authenticate_credentials(token)


def _refusal(token: str) -> str:
    with pytest.raises(exceptions.AuthenticationFailed) as raised:
        _ours(token)
    assert raised.value.get_codes() == "authentication_failed"
    return str(raised.value.detail)


def _in_groups(name: str, *groups: str) -> Any:
    user = User.objects.create_user(name)
    user.groups.add(*Group.objects.filter(name__in=groups))
    return user


def _batch_permission(codename: str) -> Permission:
    return Permission.objects.get(content_type__app_label=APP_LABEL, codename=codename)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FixedClock:
    """The API's clock (expiry is decided by it), fixed."""
    return fixed_api_clock(monkeypatch)


# ------------------------------------------------------------------ who is refused


def test_a_valid_token_authenticates_its_user_with_the_token_row() -> None:
    user = _in_groups("runner", RUNTIME)
    issued = issue_api_token(user=user, name="nightly-runtime", now=FixedClock().now())
    ours, token = _ours(issued.token)
    assert type(ours) is User
    assert (ours.pk, ours.get_username(), ours.is_active, ours.is_superuser) == (
        user.pk,
        "runner",
        True,
        False,
    )
    assert (token.pk, token.name, token.key_prefix) == (
        issued.row.pk,
        "nightly-runtime",
        key_prefix(issued.token),
    )
    assert token.user is ours
    # Fields not read are deferred, and load lazily with their stored values.
    assert "email" in ours.get_deferred_fields()
    assert (ours.email, ours.date_joined) == (user.email, user.date_joined)
    assert token.created_at == issued.row.created_at


@pytest.mark.parametrize("superuser", [False, True])
def test_the_statement_reads_token_and_user_as_the_orm_does(superuser: bool) -> None:
    """The explicit authentication statement (``repository.statements.credentials``)
    returns each column as the ORM's ``values()`` does — instants aware and
    equal, flags booleans (SQLite stores 0/1) — for a token with every
    nullable column set."""
    user = User.objects.create_user("reader", is_superuser=superuser)
    now = FixedClock().now()
    issued = issue_api_token(user=user, name="read-me", now=now, expires_in=timedelta(days=3))
    revoke_api_token(key_prefix=issued.row.key_prefix, now=now + timedelta(hours=1))
    found = token_credentials(issued.row.key_prefix)
    assert found is not None
    token_fields = TOKEN_FIELDS
    expected_token = models.ApiToken.objects.values(*token_fields).get(pk=issued.row.pk)
    assert {name: getattr(found.token, name) for name in token_fields} == expected_token
    assert found.token.expires_at is not None
    assert found.token.revoked_at is not None
    user_fields = ("id", "username", *USER_FLAGS)
    expected_user = User.objects.values(*user_fields).get(pk=user.pk)
    read_user = {name: getattr(found.user, name) for name in user_fields}
    assert read_user == expected_user
    assert all(type(read_user[flag]) is bool for flag in USER_FLAGS)
    assert token_credentials(issued.row.key_prefix[:-1] + "#") is None


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("unknown prefix", "Invalid token."),
        ("right prefix, wrong secret", "Invalid token."),
        ("one character more", "Invalid token."),
        ("one character less", "Invalid token."),
        ("the prefix alone", "Invalid token."),
        ("the stored digest", "Invalid token."),
        ("expired", "Token expired."),
        ("expired, wrong secret", "Invalid token."),
        ("revoked", "Token revoked."),
        ("revoked, wrong secret", "Invalid token."),
        ("inactive user", "User inactive or deleted."),
        ("inactive superuser", "User inactive or deleted."),
        ("deleted user", "Invalid token."),
    ],
)
def test_a_refused_token_is_told_why_only_when_it_is_the_right_one(
    case: str, message: str, clock: FixedClock
) -> None:
    if case == "inactive superuser":
        user = User.objects.create_superuser("root", password=None, is_active=False)
    else:
        user = User.objects.create_user("someone", is_active=case != "inactive user")
    expires_in = timedelta(hours=1) if case.startswith("expired") else None
    issued = issue_api_token(user=user, name="t", now=clock.now(), expires_in=expires_in)
    token = issued.token
    if case.startswith("expired"):
        clock.advance(timedelta(hours=1))
    if case.startswith("revoked"):
        revoke_api_token(key_prefix=key_prefix(token), now=clock.now())
    if case == "deleted user":
        user.delete()
    presented = {
        "unknown prefix": "ob_zzzzzzzzz" + token[12:],
        "one character more": token + "x",
        "one character less": token[:-1],
        "the prefix alone": key_prefix(token),
        "the stored digest": issued.row.digest,
    }.get(case, token)
    if "wrong secret" in case:
        presented = key_prefix(token) + "_" + "A" * 43
    assert _refusal(presented) == message


def test_expiry_is_the_instant_itself(clock: FixedClock) -> None:
    user = User.objects.create_user("someone")
    token = issue_api_token(
        user=user, name="t", now=clock.now(), expires_in=timedelta(days=90)
    ).token
    clock.advance(timedelta(days=90) - timedelta(milliseconds=1))
    assert _ours(token)[0] == user
    clock.advance(timedelta(milliseconds=1))
    assert _refusal(token) == "Token expired."


@pytest.mark.parametrize("case", ["unknown", "expired", "revoked", "inactive"])
def test_a_refused_token_is_a_401_problem_with_www_authenticate(
    case: str, clock: FixedClock
) -> None:
    user = User.objects.create_user("someone", is_active=case != "inactive")
    issued = issue_api_token(user=user, name="t", now=clock.now(), expires_in=timedelta(hours=1))
    token = "f" * 40 if case == "unknown" else issued.token
    if case == "expired":
        clock.advance(timedelta(hours=2))
    if case == "revoked":
        revoke_api_token(key_prefix=issued.row.key_prefix, now=clock.now())
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    response = client.get(url("descriptor"))
    body = problem(response, 401, "authentication_failed")
    assert response["WWW-Authenticate"] == "Token, Bearer"
    assert (
        body["detail"]
        == {
            "unknown": "Invalid token.",
            "expired": "Token expired.",
            "revoked": "Token revoked.",
            "inactive": "User inactive or deleted.",
        }[case]
    )


def test_the_header_is_drfs_token_header_or_rfc_6750s_bearer() -> None:
    """contract §4.1: ``Bearer <token>`` authenticates exactly as ``Token <token>``
    does — the same keyword rules, the same refusals."""
    token = api_token(_in_groups("viewer", VIEWER))
    for keyword in ("Token", "token", "Bearer", "bearer", "BEARER"):
        for header, status in [
            (f"{keyword} {token}", 200),
            (keyword, 401),
            (f"{keyword} {token} extra", 401),
            (f"{keyword} {token[:-1]}x", 401),
        ]:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=header)
            assert client.get(url("descriptor")).status_code == status, header
    for header in (f"Basic {token}", f"Bearertoken {token}", token):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=header)
        assert client.get(url("descriptor")).status_code == 401, header  # anonymous


def test_a_bearer_token_is_answered_exactly_as_the_same_token() -> None:
    token = api_token(_in_groups("viewer", VIEWER))
    answers = []
    for keyword in ("Token", "Bearer"):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"{keyword} {token}")
        response = client.get(url("descriptor"))
        refused = client.post(url("instances"), {"job_name": "x"}, format="json")
        answers.append((response.status_code, response.json(), refused.status_code))
    assert answers[0] == answers[1]
    assert answers[0][2] == 403  # a viewer: the same refusal with either keyword


# ------------------------------------------------------------------ one query, no write


def test_authentication_is_one_query_and_the_user_needs_no_other(
    django_assert_num_queries: Any,
) -> None:
    token = api_token(_in_groups("runner", RUNTIME))
    with django_assert_num_queries(1):
        user, row = _ours(token)
        # What the API reads: authorization, the audit actor, the throttle's ident.
        assert (user.is_authenticated, user.is_active, user.is_superuser) == (True, True, False)
        assert user.get_username() == "runner"
        assert user.pk == user.id == row.user_id
        assert row.key_prefix == key_prefix(token)
        assert row.user is user
        assert getattr(user, ATTRIBUTE) == {VIEW_BATCH, RUN_BATCH, VIEW_BATCH_PAYLOAD}


def _auth_statements(client: APIClient, path: str) -> tuple[int, list[str]]:
    """The response status and the statements of one request that read the
    token, users, groups or permissions."""
    with CaptureQueriesContext(connection) as captured:
        status = client.get(url(path)).status_code
    # An execution's answer reads its claimant's username in its own statement
    # (decision 313): a read of the data, not of the credentials.
    statements = [
        q["sql"] for q in captured.captured_queries if '"ob_job_execution"' not in q["sql"]
    ]
    return status, [sql for sql in statements if any(f'"{t}' in sql for t in AUTH_TABLES)]


@pytest.mark.parametrize(
    ("role", "groups"),
    [("viewer", (VIEWER,)), ("operator", (OPERATOR,)), ("no role", ()), ("super", None)],
)
@pytest.mark.parametrize("path", ["descriptor", "executions", f"executions/{10**9}"])
def test_a_token_request_authenticates_in_one_select_and_writes_nothing(
    role: str, groups: tuple[str, ...] | None, path: str
) -> None:
    if groups is None:
        user = User.objects.create_superuser("super", password=None)
    else:
        user = _in_groups(role.replace(" ", "-"), *groups)
    client = token_client(user)
    status, statements = _auth_statements(client, path)
    assert status == (403 if role == "no role" else 404 if "/" in path else 200)
    assert len(statements) == 1, statements
    (statement,) = statements
    assert statement.startswith("SELECT")
    assert '"ob_api_token"' in statement
    assert '"auth_permission"' in statement
    assert 't."key_prefix" = ' in statement


def test_an_operator_action_records_the_actor_from_the_authenticated_row(
    rt: Runtime, operator: Runtime
) -> None:
    instance, _ = rt.launch()
    path = f"instances/{instance['id']}/hold"
    body = {"reason_code": "LEGAL_HOLD", "operation_id": "hold-1"}
    with CaptureQueriesContext(connection) as captured:
        operator.put(path, body, 200)
    statements = [q["sql"] for q in captured.captured_queries]
    # The actor (username + id) needs no read of the user beyond authentication.
    assert len([s for s in statements if any(f'"{t}' in s for t in AUTH_TABLES)]) == 1, statements
    user = User.objects.get(username="operator-user")
    row = models.JobInstance.objects.get(pk=instance["id"])
    assert (row.hold_actor, row.hold_user_id) == ("operator-user", user.pk)


# ------------------------------------------------------------------ permissions


def _held(user: Any) -> frozenset[str]:
    found, _ = _ours(api_token(user))
    held: frozenset[str] = getattr(found, ATTRIBUTE)
    return held


def _django_says(user: Any) -> set[str]:
    fresh = User.objects.get(pk=user.pk)  # no permission cache
    return {codename for codename in PERMISSIONS if fresh.has_perm(f"{APP_LABEL}.{codename}")}


@pytest.fixture
def grants() -> dict[str, Any]:
    """What a user may hold: groups, direct permissions, look-alikes of other apps."""
    lone = Group.objects.create(name="lone-recoverer")
    lone.permissions.add(_batch_permission(RECOVER_EXECUTION))
    foreign = Permission.objects.create(
        content_type=ContentType.objects.get_for_model(Group),
        codename=RUN_BATCH,
        name="same codename, another app",
    )
    foreign_group = Group.objects.create(name="foreign")
    foreign_group.permissions.add(foreign)
    # The same batch codename on another content type of the app still counts
    # (ModelBackend matches app label and codename).
    twin = Permission.objects.create(
        content_type=ContentType.objects.get_for_model(models.JobInstance),
        codename=VIEW_BATCH_PAYLOAD,
        name="same codename, another model of the app",
    )
    return {
        "groups": {name: Group.objects.get(name=name) for name in (VIEWER, RUNTIME, OPERATOR)}
        | {"lone-recoverer": lone, "foreign": foreign_group},
        "direct": {
            "run_batch": _batch_permission(RUN_BATCH),
            "stop": _batch_permission("stop_execution"),
            "foreign run_batch": foreign,
            "twin payload": twin,
        },
    }


def _grant_sets() -> Iterator[tuple[tuple[str, ...], tuple[str, ...], bool]]:
    groups = (VIEWER, RUNTIME, OPERATOR, "lone-recoverer", "foreign")
    direct = ("run_batch", "stop", "foreign run_batch", "twin payload")
    group_sets = [(), *((g,) for g in groups), (VIEWER, OPERATOR), (RUNTIME, "foreign")]
    direct_sets = [(), *((d,) for d in direct), ("stop", "twin payload")]
    for chosen_groups, chosen_direct in itertools.product(group_sets, direct_sets):
        yield chosen_groups, chosen_direct, False
    yield (), (), True
    yield (RUNTIME,), ("foreign run_batch",), True


@pytest.mark.parametrize(
    ("groups", "direct", "superuser"),
    list(_grant_sets()),
    ids=lambda value: "+".join(value) if isinstance(value, tuple) else str(value),
)
def test_the_held_permissions_are_those_django_says(
    grants: dict[str, Any], groups: tuple[str, ...], direct: tuple[str, ...], superuser: bool
) -> None:
    """Every combination of groups, direct grants, look-alikes and superuser:
    what authentication reads equals ``User.has_perm``, permission by permission."""
    user = User.objects.create_user("subject", is_superuser=superuser)
    user.groups.add(*(grants["groups"][name] for name in groups))
    user.user_permissions.add(*(grants["direct"][name] for name in direct))
    # Another user's grants do not leak in.
    other = _in_groups("other", OPERATOR)
    other.user_permissions.add(_batch_permission(RUN_BATCH))
    assert _held(user) == _django_says(user)


def test_a_superuser_holds_every_batch_permission_without_any_group() -> None:
    superuser = User.objects.create_superuser("root", password=None)
    assert _held(superuser) == set(PERMISSIONS)


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
