"""``manage.py batch_user create`` (issue 39): a staff account that signs in to
the console in a role group — the operator's may act, the viewer's only reads —
with a password never given on the command line, and clear refusals."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from oxide_batch.management.commands import _cli, batch_user
from oxide_batch.roles import OPERATOR, VIEWER

pytestmark = pytest.mark.django_db
User = get_user_model()
PASSWORD = "long-enough passphrase 42"


@pytest.fixture(autouse=True)
def no_terminal(monkeypatch):
    monkeypatch.setattr(_cli, "stdin_is_terminal", lambda: False)


def create(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    call_command("batch_user", "create", *args, "--json", stdout=out, stderr=io.StringIO())
    document: dict[str, Any] = json.loads(out.getvalue())
    return document


def refused(*args: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    with pytest.raises(CommandError) as error:
        call_command("batch_user", "create", *args, "--json", stdout=out, stderr=io.StringIO())
    return error.value.returncode, json.loads(out.getvalue())["error"]


def signed_in(username: str, password: str) -> Client:
    """A browser's session: the console's login form, posted."""
    client = Client()
    login = reverse("admin:login")
    answer = client.post(login, {"username": username, "password": password, "next": "/"})
    assert answer.status_code == 302, "the login form refused the account"
    return client


@pytest.mark.parametrize(("role", "group"), [("operator", OPERATOR), ("viewer", VIEWER)])
def test_the_account_signs_in_to_the_console_in_its_role_group(monkeypatch, role, group):
    monkeypatch.setenv("CONSOLE_PASSWORD", PASSWORD)
    document = create("ana", "--role", role, "--password-from-env", "CONSOLE_PASSWORD")
    assert (document["username"], document["group"]) == ("ana", group)
    user = User.objects.get(username="ana")
    assert user.is_staff
    assert not user.is_superuser
    assert [g.name for g in user.groups.all()] == [group]
    client = signed_in("ana", PASSWORD)
    assert client.get(reverse("admin:oxide_batch_dashboard")).status_code == 200
    # The operator may open a recover confirmation; the viewer is refused it.
    act = client.get(reverse("admin:oxide_batch_jobexecution_act", args=["recover"]) + "?ids=1")
    assert act.status_code == (200 if role == "operator" else 403)


def test_on_a_terminal_the_password_is_asked_twice(monkeypatch):
    monkeypatch.setattr(_cli, "stdin_is_terminal", lambda: True)
    answers = iter([PASSWORD, PASSWORD])
    monkeypatch.setattr(batch_user, "ask_password", lambda prompt: next(answers))
    create("vic", "--role", "viewer")
    signed_in("vic", PASSWORD)


def test_two_different_passwords_create_nothing(monkeypatch):
    monkeypatch.setattr(_cli, "stdin_is_terminal", lambda: True)
    answers = iter([PASSWORD, PASSWORD + "!"])
    monkeypatch.setattr(batch_user, "ask_password", lambda prompt: next(answers))
    code, error = refused("vic", "--role", "viewer")
    assert (code, error["code"]) == (2, "password_mismatch")
    assert not User.objects.filter(username="vic").exists()


def test_without_a_terminal_the_password_source_is_required():
    code, error = refused("ana", "--role", "operator")
    assert (code, error["code"]) == (2, "password_source_required")
    assert "--password-from-env" in error["message"]
    assert not User.objects.exists()


def test_an_unset_variable_is_refused_by_name(monkeypatch):
    monkeypatch.delenv("NO_SUCH_VAR", raising=False)
    code, error = refused("ana", "--role", "operator", "--password-from-env", "NO_SUCH_VAR")
    assert (code, error["code"]) == (2, "password_env_unset")
    assert "NO_SUCH_VAR" in error["message"]


def test_a_weak_password_is_refused_with_the_validators_words(monkeypatch, settings):
    # The project's validators (a host project may configure none).
    settings.AUTH_PASSWORD_VALIDATORS = [
        {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"}
    ]
    monkeypatch.setenv("CONSOLE_PASSWORD", "12345678")
    code, error = refused("ana", "--role", "operator", "--password-from-env", "CONSOLE_PASSWORD")
    assert (code, error["code"]) == (2, "password_invalid")
    assert "too common" in error["message"]
    assert not User.objects.exists()


def test_a_taken_name_is_a_conflict_that_changes_nothing(monkeypatch, django_user_model):
    django_user_model.objects.create_user("ana", password="old password 1234")
    monkeypatch.setenv("CONSOLE_PASSWORD", PASSWORD)
    code, error = refused("ana", "--role", "operator", "--password-from-env", "CONSOLE_PASSWORD")
    assert (code, error["code"]) == (5, "user_exists")
    assert "changepassword ana" in error["message"]
    assert not User.objects.get(username="ana").is_staff


def test_a_bad_user_name_is_a_usage_error(monkeypatch):
    monkeypatch.setenv("CONSOLE_PASSWORD", PASSWORD)
    code, error = refused(
        "ana smith", "--role", "viewer", "--password-from-env", "CONSOLE_PASSWORD"
    )
    assert (code, error["code"]) == (2, "username_invalid")


def test_an_unknown_role_is_a_usage_error():
    with pytest.raises(CommandError, match="invalid choice: 'boss'"):
        call_command("batch_user", "create", "ana", "--role", "boss", stderr=io.StringIO())
