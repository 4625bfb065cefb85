"""Notification rules (issue 41 point 2): ``manage.py batch_notifications``
validates, seals the destination at rest (Fernet; keys rotate), prints a
generated secret once and never shows a destination again, and audits every
change."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command

from oxide_batch import models
from oxide_batch.management.commands import _cli
from oxide_batch.services import notify_keys

pytestmark = pytest.mark.django_db
HOOK = "https://hooks.example.com/services/T000/B000/XXXXSECRETPATH"


@pytest.fixture(autouse=True)
def no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cli, "stdin_is_terminal", lambda: False)


def command(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("batch_notifications", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def as_json(*args: str) -> Any:
    return json.loads(command(*args, "--json")[0])


def failure(*args: str) -> tuple[int, str]:
    with pytest.raises(CommandError) as raised:
        command(*args)
    return raised.value.returncode, str(raised.value)


def add(name: str = "oncall", *extra: str) -> Any:
    return as_json(
        "add",
        "--name",
        name,
        "--jobs",
        "nightly_*,billing",
        "--events",
        "execution.failed,execution.recovered",
        *(extra or ("--webhook", HOOK)),
    )


def test_a_webhook_rule_without_a_secret_gets_one_generated_and_printed_once() -> None:
    out, err = command(
        "add",
        "--name",
        "oncall",
        "--jobs",
        "nightly_*",
        "--events",
        "execution.failed",
        "--webhook",
        HOOK,
    )
    secret = out.splitlines()[1]
    assert secret.startswith("whsec_")
    assert "shown this once" in err
    rule = models.NotificationRule.objects.get(name="oncall")
    # Sealed at rest: neither the URL nor the secret is in the row.
    assert HOOK not in rule.destination_sealed
    assert secret not in rule.destination_sealed
    assert "XXXXSECRETPATH" not in json.dumps(
        list(models.NotificationRule.objects.values()), default=str
    )
    assert notify_keys.unseal(rule.destination_sealed) == {"url": HOOK, "secret": secret}
    # Never shown again.
    listed = command("list")[0] + json.dumps(as_json("list"))
    assert "XXXXSECRETPATH" not in listed
    assert secret not in listed
    assert "https://hooks.example.com/…" in listed


def test_a_given_secret_is_kept_and_not_printed() -> None:
    given = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    document = add("given", "--webhook", HOOK, "--secret", given)
    assert document["secret"] is None
    rule = models.NotificationRule.objects.get(name="given")
    assert notify_keys.unseal(rule.destination_sealed)["secret"] == given


def test_slack_and_email_rules() -> None:
    slack = add("chat", "--webhook", HOOK, "--format", "slack")
    assert (slack["destination"], slack["secret"]) == ("slack", None)
    mail = add("mail", "--email", "a@example.com, b@example.com")
    assert (mail["destination"], mail["hint"]) == ("email", "2 addresses")
    rule = models.NotificationRule.objects.get(name="mail")
    assert notify_keys.unseal(rule.destination_sealed) == {
        "addresses": ["a@example.com", "b@example.com"]
    }


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--webhook", "http://hooks.example.com/x"), "https required"),
        (("--webhook", "ftp://hooks.example.com/x"), "absolute http(s) URL"),
        (("--webhook", "not a url"), "absolute http(s) URL"),
        (("--email", "not-an-address"), "not an address"),
        (("--webhook", HOOK, "--secret", "plain"), "whsec_"),
        (("--email", "a@example.com", "--secret", "whsec_x"), "only for a webhook"),
    ],
)
def test_an_invalid_destination_is_a_usage_error_and_adds_nothing(args, says) -> None:
    code, message = failure(
        "add", "--name", "bad", "--jobs", "*", "--events", "execution.failed", *args
    )
    assert code == 2
    assert "notification_rule_invalid" in message
    assert says in message
    assert not models.NotificationRule.objects.exists()
    assert not models.NotificationRuleChange.objects.exists()


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("--events", "execution.exploded", "unknown kind"),
        ("--jobs", "bad\x07pattern", "jobs"),
        ("--name", "bad name!", "name"),
    ],
)
def test_invalid_kinds_patterns_and_names_are_usage_errors(field, value, says) -> None:
    arguments = {"--name": "r", "--jobs": "*", "--events": "execution.failed"}
    arguments[field] = value
    flat = [item for pair in arguments.items() for item in pair]
    code, message = failure("add", *flat, "--webhook", HOOK)
    assert code == 2
    assert says in message


def test_plain_http_is_allowed_to_a_named_host(settings) -> None:
    settings.OXIDE_BATCH_WEBHOOK_HTTP_HOSTS = ["127.0.0.1"]
    assert add("local", "--webhook", "http://127.0.0.1:9/hook")["destination"] == "webhook"
    code, _ = failure(
        "add",
        "--name",
        "other",
        "--jobs",
        "*",
        "--events",
        "execution.failed",
        "--webhook",
        "http://10.0.0.1/hook",
    )
    assert code == 2


def test_a_taken_name_is_refused() -> None:
    add("twice")
    code, message = failure(
        "add", "--name", "twice", "--jobs", "*", "--events", "execution.failed", "--webhook", HOOK
    )
    assert (code, "exists" in message) == (2, True)


def test_every_change_is_audited_without_the_destination() -> None:
    add("audited")
    command("disable", "audited", "--actor", "alice")
    assert not models.NotificationRule.objects.get(name="audited").enabled
    command("enable", "audited", "--actor", "alice")
    command("remove", "audited", "--actor", "bob")
    assert not models.NotificationRule.objects.exists()
    changes = list(models.NotificationRuleChange.objects.order_by("id"))
    assert [(c.action, c.rule_name) for c in changes] == [
        ("ADD", "audited"),
        ("DISABLE", "audited"),
        ("ENABLE", "audited"),
        ("REMOVE", "audited"),
    ]
    assert changes[1].actor == "alice"
    assert changes[3].actor == "bob"
    assert changes[0].details["events"] == ["execution.failed", "execution.recovered"]
    assert "XXXXSECRETPATH" not in json.dumps([c.details for c in changes])


def test_an_unknown_rule_is_not_found() -> None:
    for action in ("disable", "remove", "test"):
        code, message = failure(action, "nobody")
        assert code == 4, action
        assert "notification_rule_not_found" in message


def test_keys_rotate_through_multifernet(settings) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.OXIDE_BATCH_NOTIFY_KEYS = [old]
    add("rotating")
    sealed = models.NotificationRule.objects.get(name="rotating").destination_sealed
    settings.OXIDE_BATCH_NOTIFY_KEYS = [new, old]
    assert notify_keys.unseal(sealed)["url"] == HOOK  # the old key still opens it
    assert as_json("rotate")["resealed"] == 1
    settings.OXIDE_BATCH_NOTIFY_KEYS = [new]
    resealed = models.NotificationRule.objects.get(name="rotating").destination_sealed
    assert notify_keys.unseal(resealed)["url"] == HOOK
    settings.OXIDE_BATCH_NOTIFY_KEYS = [Fernet.generate_key().decode()]
    with pytest.raises(notify_keys.DestinationUnreadable):
        notify_keys.unseal(resealed)


def test_the_default_key_is_derived_from_the_secret_key_not_the_secret_key_itself(settings):
    settings.OXIDE_BATCH_NOTIFY_KEYS = []
    key = notify_keys.derived_key(settings.SECRET_KEY)
    assert settings.SECRET_KEY.encode() not in key
    sealed = notify_keys.seal({"url": HOOK})
    assert Fernet(key).decrypt(sealed.encode())
    settings.SECRET_KEY = "another-" + "x" * 50
    with pytest.raises(notify_keys.DestinationUnreadable):
        notify_keys.unseal(sealed)


def test_the_permission_of_its_own_is_granted_to_operators_only() -> None:
    from django.contrib.auth.models import Group

    from oxide_batch.roles import MANAGE_NOTIFICATIONS, ensure_roles

    ensure_roles()
    holders = {
        group.name for group in Group.objects.filter(permissions__codename=MANAGE_NOTIFICATIONS)
    }
    assert holders == {"batch-operator"}
