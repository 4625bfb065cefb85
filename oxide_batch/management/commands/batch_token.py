"""``manage.py batch_token``: the API tokens runtimes and operators authenticate with.

- ``create --user NAME --name LABEL [--expires AGE] [--group GROUP]… [--create-user]
  [--replace]`` prints the new token and nothing else on stdout
  (``TOKEN=$(manage.py batch_token create …)``; a note goes to stderr unless
  ``-v 0``). It is shown this once: the database keeps only its prefix and a
  digest.
- ``list [--user NAME]``: prefix, name, user, created, expires, revoked — never a secret.
- ``revoke PREFIX``: the token stops authenticating at once (401); it stays in the list.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.management.commands._cli import OxideCommand, add_mutation_arguments, age_arg
from oxide_batch.management.commands._operator import instant
from oxide_batch.repository.clock import SystemClock
from oxide_batch.repository.tokens import issue_api_token_for, revoke_api_token
from oxide_batch.selectors.tokens import api_tokens

COLUMNS = (
    f"{'PREFIX':<12}  {'NAME':<24}  {'USER':<24}  {'STATE':<7}  CREATED / EXPIRES / REVOKED (UTC)"
)


def expiry_arg(text: str) -> timedelta:
    """``--expires``: an age as ``parse_age`` reads it (``90d``, ``12h``), above zero."""
    age = age_arg(text)
    if age <= timedelta(0):
        raise argparse.ArgumentTypeError("--expires must be more than 0 (omit it: never)")
    return age


def token_json(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A token as ``list`` shows it, with its state at ``now``."""
    if row["revoked_at"] is not None:
        state = "revoked"
    elif row["expires_at"] is not None and row["expires_at"] <= now:
        state = "expired"
    else:
        state = "active"
    return {
        "key_prefix": row["key_prefix"],
        "name": row["name"],
        "user": row["user"],
        "state": state,
        "created_at": instant(row["created_at"]),
        "expires_at": instant(row["expires_at"]),
        "revoked_at": instant(row["revoked_at"]),
        "jobs": row["job_patterns"],
    }


class Command(OxideCommand):
    help = "Create (printed once), list or revoke the API tokens of users."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        create = actions.add_parser("create", help="create a token and print it, once")
        create.add_argument("--user", required=True, help="the user's name")
        create.add_argument("--name", required=True, help="what it is for, e.g. nightly-runtime")
        create.add_argument(
            "--expires", type=expiry_arg, metavar="AGE", help="e.g. 90d (default: never)"
        )
        create.add_argument(
            "--group",
            action="append",
            default=[],
            metavar="GROUP",
            help="add the user to this group first, e.g. batch-runtime (repeatable)",
        )
        create.add_argument(
            "--create-user",
            action="store_true",
            help="create the user (no password: API only) if there is none of that name",
        )
        create.add_argument(
            "--replace",
            action="store_true",
            help="revoke the user's other live tokens of the same name",
        )
        create.add_argument(
            "--job",
            action="append",
            metavar="PATTERN",
            help=(
                "limit the token to jobs whose name matches PATTERN (* any characters, "
                "? one; repeatable): it cannot create, launch, read or write other jobs"
            ),
        )
        listing = actions.add_parser("list", help="list tokens (never a secret)")
        listing.add_argument("--user", help="only this user's tokens")
        revoke = actions.add_parser("revoke", help="revoke a token: it answers 401 at once")
        revoke.add_argument("prefix", help="the token's prefix, as list shows it")
        add_mutation_arguments(revoke, operation_id=False)
        for subparser in (create, listing, revoke):
            subparser.add_argument("--json", action="store_true", help="print one JSON object")
            self.json_usage_errors(subparser)

    def handle(self, *args: Any, **options: Any) -> None:
        self.read_only = options["action"] == "list"
        self.verbosity = int(options["verbosity"])
        super().handle(*args, **options)

    def run(self, **options: Any) -> dict[str, Any]:
        self.action = options["action"]
        now = SystemClock().now()
        if self.action == "create":
            issued = issue_api_token_for(
                username=options["user"],
                name=options["name"],
                now=now,
                expires_in=options["expires"],
                groups=options["group"],
                create_user=options["create_user"],
                replace=options["replace"],
                job_patterns=options["job"],
            )
            row = issued.row
            return {
                "token": issued.token,
                "key_prefix": row.key_prefix,
                "name": row.name,
                "user": options["user"],
                "created_at": instant(row.created_at),
                "expires_at": instant(row.expires_at),
                "jobs": row.job_patterns,
            }
        if self.action == "list":
            rows = api_tokens(username=options["user"])
            return {"tokens": [token_json(row, now) for row in rows]}
        prefix = options["prefix"]
        self.confirm(options, f"revoke API token {prefix} (it stops authenticating at once)", None)
        revocation = revoke_api_token(key_prefix=prefix, now=now)
        return {
            "key_prefix": revocation.row.key_prefix,
            "name": revocation.row.name,
            "revoked_at": instant(revocation.row.revoked_at),
            "already_revoked": revocation.already,
        }

    def render(self, document: dict[str, Any]) -> None:
        if self.action == "create":
            self.stdout.write(document["token"])
            if self.verbosity > 0:
                jobs = document["jobs"]
                scope = "" if jobs is None else f", limited to jobs {', '.join(jobs)}"
                self.stderr.write(
                    f"API token {document['key_prefix']}… ({document['name']}) of "
                    f"{document['user']}{scope}: shown this once, store it now"
                )
        elif self.action == "list":
            self._render_list(document["tokens"])
        elif document["already_revoked"]:
            self.stdout.write(
                f"{document['key_prefix']} ({document['name']}) was already revoked at "
                f"{document['revoked_at']}"
            )
        else:
            self.stdout.write(
                f"revoked {document['key_prefix']} ({document['name']}) at {document['revoked_at']}"
            )

    def _render_list(self, tokens: list[dict[str, Any]]) -> None:
        if not tokens:
            self.stdout.write("no tokens")
            return
        self.stdout.write(COLUMNS)
        for token in tokens:
            times = " / ".join(
                token[key] or "-" for key in ("created_at", "expires_at", "revoked_at")
            )
            jobs = "" if token["jobs"] is None else f"  jobs: {', '.join(token['jobs'])}"
            self.stdout.write(
                f"{token['key_prefix']:<12}  {token['name'][:24]:<24}  "
                f"{token['user'][:24]:<24}  {token['state']:<7}  {times}{jobs}"
            )
