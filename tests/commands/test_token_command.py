"""``manage.py batch_token``: create prints the token once and nothing else on
stdout, and it works against the API; list never shows a secret; revoke makes
the token a 401 at once; errors are a message and an exit code (contract §6.2)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from oxide_batch import models
from oxide_batch.domain.tokens import PREFIX_LENGTH, token_digest
from oxide_batch.management.commands import _cli
from oxide_batch.roles import RUNTIME
from tests.api.support import url
from tests.conftest import on_postgres

User = get_user_model()

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cli, "stdin_is_terminal", lambda: False)


def token_command(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("batch_token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def as_json(*args: str) -> Any:
    return json.loads(token_command(*args, "--json")[0])


def failure(*args: str) -> tuple[int, str]:
    with pytest.raises(CommandError) as raised:
        token_command(*args)
    return raised.value.returncode, str(raised.value)


def api_status(token: str, path: str = "descriptor") -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return int(client.get(url(path)).status_code)


def create(*extra: str, user: str = "runner") -> str:
    """A batch-runtime token of ``user`` named ``nightly-runtime``: stdout."""
    out, _ = token_command(
        "create", "--user", user, "--name", "nightly-runtime", "--group", RUNTIME, *extra
    )
    return out


def test_create_prints_the_token_once_and_nothing_else_and_it_works() -> None:
    User.objects.create_user("runner")
    out, err = token_command(
        "create", "--user", "runner", "--name", "nightly-runtime", "--group", RUNTIME
    )
    token = out.removesuffix("\n")
    assert "\n" not in token
    assert len(token) > 40
    assert api_status(token, "executions") == 200  # batch-runtime reads
    row = models.ApiToken.objects.get()
    assert (row.name, row.user.username) == ("nightly-runtime", "runner")
    assert row.key_prefix == token[:12]
    assert row.digest == token_digest(token)
    assert row.expires_at is None
    # The note goes to stderr, naming the prefix only.
    assert row.key_prefix in err
    assert token not in err
    # Shown this once: nothing can show it again.
    listed = token_command("list")[0] + json.dumps(as_json("list"))
    assert token not in listed
    assert token[PREFIX_LENGTH + 1 :] not in listed


def test_create_with_an_expiry_a_new_user_and_json() -> None:
    document = as_json(
        "create", "--user", "svc", "--create-user", "--name", "weekly", "--expires", "90d"
    )
    assert document["ok"] is True
    row = models.ApiToken.objects.get(key_prefix=document["key_prefix"])
    assert row.expires_at == row.created_at + timedelta(days=90)
    assert document["expires_at"] is not None
    assert document["user"] == "svc"
    # Authenticated (not 401), with no batch role (403).
    assert api_status(document["token"]) == 403


@pytest.mark.parametrize(
    ("args", "exit_code", "message"),
    [
        (("--user", "nobody", "--name", "n"), 4, "user_not_found: no user is named 'nobody'"),
        (("--user", "runner", "--name", "n", "--group", "nope"), 4, "group_not_found"),
        (("--user", "runner", "--name", "two words"), 2, "invalid_characters: token name"),
        (("--user", "runner", "--name", "n" * 65), 2, "name_too_long"),
    ],
)
def test_a_refused_create_is_an_error_message_and_creates_nothing(
    args: tuple[str, ...], exit_code: int, message: str
) -> None:
    User.objects.create_user("runner")
    code, text = failure("create", *args)
    assert (code, text.startswith(message)) == (exit_code, True), text
    assert not models.ApiToken.objects.exists()


@pytest.mark.parametrize(
    "args",
    [
        ("create", "--name", "n"),
        ("create", "--user", "runner", "--name", "n", "--expires", "0"),
        ("create", "--user", "runner", "--name", "n", "--expires", "soon"),
        ("revoke",),
        ("rotate",),
        (),
    ],
)
def test_usage_errors_are_messages(args: tuple[str, ...]) -> None:
    _code, text = failure(*args)
    assert text.startswith("Error: "), text
    assert "Traceback" not in text


def test_list_shows_prefix_name_user_and_state_never_a_secret() -> None:
    User.objects.create_user("runner")
    User.objects.create_user("ops")
    live = create()
    revoked = create()
    token_command("revoke", revoked[:PREFIX_LENGTH], "--yes")
    other = token_command("create", "--user", "ops", "--name", "cli")[0]
    text, _ = token_command("list")
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["PREFIX", "NAME", "USER", "STATE"]
    assert [line.split()[:4] for line in lines[1:]] == [
        [live[:PREFIX_LENGTH], "nightly-runtime", "runner", "active"],
        [revoked[:PREFIX_LENGTH], "nightly-runtime", "runner", "revoked"],
        [other[:PREFIX_LENGTH], "cli", "ops", "active"],
    ]
    document = as_json("list", "--user", "ops")
    assert [row["key_prefix"] for row in document["tokens"]] == [other[:PREFIX_LENGTH]]
    everything = text + json.dumps(as_json("list"))
    for token in (live, revoked, other):
        assert token.strip() not in everything
        assert token.strip()[PREFIX_LENGTH + 1 :] not in everything
    assert not any(row.digest in everything for row in models.ApiToken.objects.all())


def test_list_shows_an_expired_token_as_expired() -> None:
    User.objects.create_user("runner")
    create("--expires", "1h")
    models.ApiToken.objects.update(
        created_at=models.ApiToken.objects.get().created_at - timedelta(hours=2),
        expires_at=models.ApiToken.objects.get().created_at - timedelta(hours=1),
    )
    assert [row["state"] for row in as_json("list")["tokens"]] == ["expired"]


def test_revoke_makes_the_token_a_401_at_once_and_again_says_so() -> None:
    User.objects.create_user("runner")
    token = create().strip()
    assert api_status(token) == 200
    out, _ = token_command("revoke", token[:PREFIX_LENGTH], "--yes")
    assert out.startswith(f"revoked {token[:PREFIX_LENGTH]} (nightly-runtime) at ")
    assert api_status(token) == 401
    again = as_json("revoke", token[:PREFIX_LENGTH], "--yes")
    assert (again["ok"], again["already_revoked"]) == (True, True)
    assert models.ApiToken.objects.get().revoked_at is not None  # kept, for the list


def test_revoke_needs_explicit_intent_and_a_known_prefix() -> None:
    User.objects.create_user("runner")
    token = create().strip()
    # The runtime guide's `batch_token revoke PREFIX`, as a script runs it (no
    # terminal): the refusal says what it would do and names --yes.
    assert failure("revoke", token[:PREFIX_LENGTH]) == (
        8,
        f"confirmation_required: batch_token would revoke API token {token[:PREFIX_LENGTH]} "
        "(it stops authenticating at once), and there is no terminal to confirm it: "
        "add --yes (or --no-input) to run it from a script",
    )
    assert api_status(token) == 200
    code, text = failure("revoke", "ob_unknown00", "--yes")
    assert (code, text) == (4, "api_token_not_found: no API token has the prefix 'ob_unknown00'")


def test_create_replace_rotates_a_named_token() -> None:
    User.objects.create_user("runner")
    old = create().strip()
    new = create("--replace").strip()
    assert (api_status(old), api_status(new)) == (401, 200)


@pytest.mark.skipif(on_postgres(), reason="a subprocess on its own SQLite file")
def test_the_token_can_be_captured_from_manage_py(tmp_path: Path) -> None:
    """``TOKEN=$(manage.py batch_token create …)``: stdout is the token line alone."""
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env["SQLITE_PATH"] = str(tmp_path / "db.sqlite3")

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    assert manage("migrate", "-v", "0").returncode == 0
    args = ("create", "--user", "svc", "--create-user", "--group", RUNTIME, "--name", "n")
    done = manage("batch_token", *args)
    assert done.returncode == 0, done.stderr
    (token,) = done.stdout.splitlines()
    assert done.stdout == token + "\n"
    assert token[:PREFIX_LENGTH] in done.stderr
    quiet = manage("batch_token", "-v", "0", *args)
    assert (quiet.returncode, quiet.stderr, len(quiet.stdout.splitlines())) == (0, "", 1)
    refused = manage("batch_token", "create", "--user", "nobody", "--name", "n")
    assert refused.returncode == 4
    assert refused.stdout == ""
    assert "user_not_found" in refused.stderr
    assert "Traceback" not in refused.stderr
