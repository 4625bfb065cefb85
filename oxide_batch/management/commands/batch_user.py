"""``manage.py batch_user create NAME --role operator|viewer
[--password-from-env VAR] [--json]``: a staff account that signs in to the
console (issue 39, contract §6.8) — in the role group ``batch-operator`` (reads, and the
audited actions) or ``batch-viewer`` (reads only).

The password is never an argument (it would sit in the shell's history and in
``ps``): it is asked twice on a terminal, or read from the environment variable
``--password-from-env`` names; without a terminal that option is required.
It must pass the project's ``AUTH_PASSWORD_VALIDATORS``. An existing account of
that name is refused (exit 5): change its password with ``manage.py
changepassword NAME``, its groups in the console. Exit codes as every
command's: 0 created, 2 usage (a bad name, no password source, a password
refused), 5 the name is taken, 7 the database unavailable.
"""

from __future__ import annotations

import getpass
import os
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import CommandParser

from oxide_batch import roles
from oxide_batch.management.commands import _cli
from oxide_batch.management.commands._cli import CommandFailed, ExitCode, OxideCommand
from oxide_batch.repository.accounts import console_user_exists, create_console_user

ROLE_GROUPS = {"operator": roles.OPERATOR, "viewer": roles.VIEWER}


def ask_password(prompt: str) -> str:
    """A password typed at the terminal, not echoed (tests stand in for a person)."""
    return getpass.getpass(prompt)


class Command(OxideCommand):
    help = "Create a staff account that signs in to the console as an operator or a viewer."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        create = actions.add_parser("create", help="create a console account in a role group")
        create.add_argument("username", metavar="NAME", help="the account's user name")
        create.add_argument(
            "--role",
            required=True,
            choices=sorted(ROLE_GROUPS),
            help="operator: batch-operator (reads and the audited actions); "
            "viewer: batch-viewer (reads only)",
        )
        create.add_argument(
            "--password-from-env",
            metavar="VAR",
            help="read the password from this environment variable (required without a "
            "terminal; with one, the password is asked twice)",
        )
        create.add_argument("--json", action="store_true", help="print one JSON object")
        self.json_usage_errors(create)

    def run(self, **options: Any) -> dict[str, Any]:
        username = self._username(options["username"])
        group = ROLE_GROUPS[options["role"]]
        if console_user_exists(username):
            raise CommandFailed(
                ExitCode.CONFLICT,
                "user_exists",
                f"an account is already named {username!r}: change its password with "
                f"manage.py changepassword {username}, its groups in the console",
            )
        password = self._password(options["password_from_env"])
        self._check_password(password, username)
        created = create_console_user(username=username, password=password, group=group)
        return {"user_id": created.id, "username": created.username, "group": created.group}

    def render(self, document: dict[str, Any]) -> None:
        self.stdout.write(
            f"created {document['username']} (staff, in {document['group']}): it signs in "
            "to the console with its password"
        )

    @staticmethod
    def _username(text: str) -> str:
        user_model: Any = get_user_model()
        field = user_model._meta.get_field(user_model.USERNAME_FIELD)
        try:
            field.run_validators(text)
            if not text or len(text) > (field.max_length or 150):
                raise ValidationError(f"use 1 to {field.max_length or 150} characters")
        except ValidationError as error:
            raise CommandFailed(
                ExitCode.USAGE, "username_invalid", f"invalid user name: {' '.join(error.messages)}"
            ) from None
        return text

    @staticmethod
    def _password(variable: str | None) -> str:
        if variable is not None:
            value = os.environ.get(variable)
            if not value:
                raise CommandFailed(
                    ExitCode.USAGE,
                    "password_env_unset",
                    f"the environment variable {variable} is not set or is empty",
                )
            return value
        if not _cli.stdin_is_terminal():
            raise CommandFailed(
                ExitCode.USAGE,
                "password_source_required",
                "no terminal to ask the password on: pass --password-from-env VAR "
                "(the password is never an argument)",
            )
        first = ask_password("Password: ")
        if first != ask_password("Password (again): "):
            raise CommandFailed(
                ExitCode.USAGE, "password_mismatch", "the two passwords differ; nothing created"
            )
        if not first:
            raise CommandFailed(ExitCode.USAGE, "password_empty", "the password is empty")
        return first

    @staticmethod
    def _check_password(password: str, username: str) -> None:
        user_model: Any = get_user_model()
        try:
            validate_password(password, user_model(**{user_model.USERNAME_FIELD: username}))
        except ValidationError as error:
            raise CommandFailed(
                ExitCode.USAGE, "password_invalid", "password refused: " + " ".join(error.messages)
            ) from None
