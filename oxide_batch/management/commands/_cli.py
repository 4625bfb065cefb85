"""Plumbing every oxide_batch command shares (contract §6.1, §6.2).

- exit codes, mapped from the typed errors by class in one place
  (:data:`EXIT_CODES`): 0 done or replayed, 1 other error, 2 usage or invalid
  input, 3 refused by a rule, 4 not found, 5 conflict, 6 commit outcome
  unknown, 7 unavailable, 8 confirmation required or declined;
- ``--json``: exactly one JSON object on stdout, success or failure;
- explicit intent: ``--yes``/``--no-input`` or an interactive confirmation;
- operation ids: without a terminal a mutating command needs ``--operation-id``,
  with one an id is generated and printed to stderr;
- ``--actor``, defaulting to ``cli:<login name>``;
- an error whose answer a setting decides names it (:attr:`OxideCommand.settings_named`:
  ``age_bound_too_small: … (OXIDE_BATCH_PURGE_MIN_AGE)``), and one the command's
  own flags can answer says how (:meth:`OxideCommand.error_hint`, a ``hint:`` line);
- a read-only command (:attr:`OxideCommand.read_only`) writes no event lines
  below WARNING: its answer is all it prints.

A command subclasses :class:`OxideCommand`, adds its options in
``add_command_arguments`` and implements ``run(**options) -> dict``; bad input
never shows a traceback.
"""

from __future__ import annotations

import argparse
import enum
import getpass
import json
import secrets
import sys
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections

from oxide_batch.domain.durations import parse_age, parse_duration
from oxide_batch.domain.errors import (
    CommitOutcomeUnknown,
    ConcurrentModification,
    DomainError,
    DuplicatePartitionKey,
    EmptyPartitionPlan,
    IdentifierOutOfRange,
    LifecycleError,
    MigrationRequired,
    NewerSchema,
    NotFound,
    OperationIdConflict,
    OxideBatchError,
    PartitionPlanTooLarge,
    RecoveryEvidenceStale,
    RepositoryError,
    RetentionPlanStale,
    SchemaUninitialized,
    StaleVersion,
    Unavailable,
    UnsupportedManifestVersion,
    VersionAhead,
)
from oxide_batch.domain.names import OperatorStringKind
from oxide_batch.observability import events
from oxide_batch.repository.faults import translate
from oxide_batch.services.audit import Actor, validate_operation_id


class ExitCode(enum.IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    REFUSED = 3
    NOT_FOUND = 4
    CONFLICT = 5
    OUTCOME_UNKNOWN = 6
    UNAVAILABLE = 7
    CONFIRMATION = 8
    LOST_WRITE = 9


# First match wins, so the specific classes come before their families.
EXIT_CODES: tuple[tuple[type[BaseException], ExitCode], ...] = (
    (CommitOutcomeUnknown, ExitCode.OUTCOME_UNKNOWN),
    (Unavailable, ExitCode.UNAVAILABLE),
    (SchemaUninitialized, ExitCode.UNAVAILABLE),
    (MigrationRequired, ExitCode.UNAVAILABLE),
    (NewerSchema, ExitCode.UNAVAILABLE),
    (NotFound, ExitCode.NOT_FOUND),
    (VersionAhead, ExitCode.LOST_WRITE),
    (StaleVersion, ExitCode.CONFLICT),
    (RetentionPlanStale, ExitCode.CONFLICT),
    (RecoveryEvidenceStale, ExitCode.CONFLICT),
    (ConcurrentModification, ExitCode.CONFLICT),
    (OperationIdConflict, ExitCode.CONFLICT),
    (DomainError, ExitCode.USAGE),
    (IdentifierOutOfRange, ExitCode.USAGE),
    (EmptyPartitionPlan, ExitCode.USAGE),
    (PartitionPlanTooLarge, ExitCode.USAGE),
    (DuplicatePartitionKey, ExitCode.USAGE),
    (UnsupportedManifestVersion, ExitCode.USAGE),
    (LifecycleError, ExitCode.REFUSED),
    (RepositoryError, ExitCode.REFUSED),
)


def exit_code_for(error: BaseException) -> ExitCode:
    """The exit code of a typed error (``ERROR`` for anything unknown)."""
    if isinstance(error, CommandFailed):
        return error.exit_code
    for cls, code in EXIT_CODES:
        if isinstance(error, cls):
            return code
    return ExitCode.ERROR


class CommandFailed(Exception):
    """A refusal decided by the command itself (usage, confirmation, interruption)."""

    def __init__(self, exit_code: ExitCode, code: str, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.code = code
        self.message = message


def error_document(
    error: BaseException,
    settings_named: Mapping[str, str] | None = None,
    *,
    hint: str | None = None,
) -> dict[str, Any]:
    """``{code, message, details}``, plus ``setting`` when one of ``settings_named``
    (error code → setting) decided the answer (the message names it too), and
    ``hint`` when the command knows a next step."""
    details: dict[str, Any] = {}
    if isinstance(error, OxideBatchError):
        code, message, details = error.code, error.message, error.details()
    elif isinstance(error, CommandFailed):
        code, message = error.code, error.message
    else:
        # One line: a driver's message may span several (a traceback-like wall).
        code, message = "database_error", " ".join(str(error).split())
    document: dict[str, Any] = {"code": code, "message": message, "details": details}
    setting = (settings_named or {}).get(code)
    if setting is not None:
        document["message"] = f"{message} ({setting})"
        document["setting"] = setting
    if hint is not None:
        document["hint"] = hint
    return document


# -- terminals (module functions so tests can stand in for a person) -----------------


def stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def ask(text: str) -> str:
    try:
        return input(text)
    except EOFError:
        return ""


# -- argument types ----------------------------------------------------------------


def duration_arg(text: str) -> timedelta:
    """``90s``, ``15m``, ``1h``, ``30d`` (argparse type: a usage error otherwise)."""
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def age_arg(text: str) -> timedelta:
    """An age as the API's ``unresolved_for`` takes it: seconds (``900``) or a
    duration (``90s``, ``15m``, ``1h``) — argparse type."""
    try:
        return parse_age(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def instant_arg(text: str) -> datetime:
    """An ISO date (midnight UTC) or date-time (UTC when it names no zone)."""
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
        instant = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid date {text!r}: expected e.g. 2026-01-31 or 2026-01-31T12:00:00Z"
        ) from None
    return instant if instant.tzinfo else instant.replace(tzinfo=UTC)


def add_mutation_arguments(
    parser: CommandParser, *, operation_id: bool = True, dry_run: bool = False
) -> None:
    """``--yes``/``--no-input``, ``--actor``, and optionally ``--operation-id`` and
    ``--dry-run``."""
    if operation_id:
        parser.add_argument(
            "--operation-id",
            help="idempotency key; required without a terminal, generated with one",
        )
        parser.add_argument("--actor", help="audited actor (default: cli:<login name>)")
    if dry_run:
        parser.add_argument("--dry-run", action="store_true", help="only show what would happen")
    parser.add_argument(
        "--yes",
        "--no-input",
        action="store_true",
        dest="confirmed",
        help="confirm a destructive action without asking",
    )


def release_idle_connections() -> None:
    """``close_old_connections()`` for loops outside the request cycle: a connection
    killed by a database restart is replaced (never one inside a transaction)."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


def login_account(login: str | None) -> int | None:
    """The active account whose username is the command's login name, if any."""
    if not login:
        return None
    from oxide_batch.selectors.accounts import active_account_id

    try:
        return active_account_id(login)
    except DatabaseError:
        # No account to credit (the database unreachable, or not migrated yet):
        # the command goes on to check its input, then meets the database itself.
        return None


class OxideCommand(BaseCommand):
    """Base of the oxide_batch commands: one ``run`` that returns a JSON-ready
    dict, rendered as text or as one JSON object; typed errors become exit codes."""

    requires_system_checks: list[str] = []
    json_output = False
    # A read: no event lines below WARNING (the answer is the output).
    read_only = False
    # Error code → the setting that decides it, named in the error's message.
    settings_named: Mapping[str, str] = {}
    # Filled by ``run`` as it goes, so an error still reports what was done.
    report: dict[str, Any]

    @property
    def command_name(self) -> str:
        return type(self).__module__.rsplit(".", 1)[-1]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        self.add_command_arguments(parser)

    def add_command_arguments(self, parser: CommandParser) -> None:
        """Subclasses add their options here."""

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        self.json_usage_errors(parser)
        return parser

    def json_usage_errors(self, parser: CommandParser) -> None:
        """With ``--json`` on the command line, a usage error of ``parser`` (the
        command's, or one of its subcommands') is also one JSON object on stdout."""
        usage_error = parser.error

        def error(message: str) -> NoReturn:
            if parser.called_from_command_line and "--json" in sys.argv:
                document = self._failure(
                    CommandFailed(ExitCode.USAGE, "usage", message), ExitCode.USAGE
                )
                self.stdout.write(json.dumps(document))
            usage_error(message)
            raise AssertionError("unreachable")  # pragma: no cover

        parser.error = error  # type: ignore[method-assign]

    def run(self, **options: Any) -> dict[str, Any]:
        raise NotImplementedError

    def error_settings(self, error: BaseException) -> Mapping[str, str]:
        """Error code → the setting that decided ``error`` (default:
        :attr:`settings_named`; a command overrides it when the error's fields
        tell which of several settings it was)."""
        return self.settings_named

    def error_hint(self, error: BaseException) -> str | None:
        """What the operator may do next about ``error`` with this command's own
        flags (default: nothing); shown on a ``hint:`` line and as ``error.hint``."""
        return None

    def describe_error(self, error: BaseException) -> dict[str, Any]:
        """:func:`error_document` with this command's settings and hint."""
        return error_document(error, self.error_settings(error), hint=self.error_hint(error))

    def render(self, document: dict[str, Any]) -> None:
        """Human output of a successful run (default: indented JSON)."""
        self.stdout.write(json.dumps(document, indent=2))

    def handle(self, *args: Any, **options: Any) -> None:
        self.json_output = bool(options.get("json"))
        self.report = {}
        try:
            if self.read_only:
                with events.muted():
                    document = self.run(**options)
            else:
                document = self.run(**options)
        except (OxideBatchError, CommandFailed, DatabaseError) as error:
            if isinstance(error, DatabaseError):
                # A read outside the repository (a selector) meets the same faults:
                # a database that is down is exit 7 ``unavailable``, not exit 1.
                error = translate(error) or error
            code = exit_code_for(error)
            if self.json_output:
                self.stdout.write(json.dumps(self._failure(error, code)))
            detail = self.describe_error(error)
            text = f"{detail['code']}: {detail['message']}"
            if "hint" in detail:
                text = f"{text}\nhint: {detail['hint']}"
            raise CommandError(text, returncode=code) from None
        if self.json_output:
            self.stdout.write(
                json.dumps({"command": self.command_name, "ok": True, "exit_code": 0, **document})
            )
        else:
            self.render(document)

    def _failure(self, error: BaseException, code: ExitCode) -> dict[str, Any]:
        document = {
            "command": self.command_name,
            "ok": False,
            "exit_code": int(code),
            "error": self.describe_error(error),
        }
        if getattr(self, "report", None):
            document["progress"] = self.report
        return document

    # -- safeguards ----------------------------------------------------------------

    def operation_id(self, options: dict[str, Any], *, prefix: str, reserve: int = 0) -> str:
        """``--operation-id`` (at most 64 − ``reserve`` bytes, leaving room for a
        suffix), a generated id on a terminal (printed to stderr), else a usage error."""
        given = options.get("operation_id")
        limit = OperatorStringKind.OPERATION_ID.max_bytes - reserve
        if given is not None:
            validate_operation_id(given)
            if len(given.encode()) > limit:
                raise CommandFailed(
                    ExitCode.USAGE,
                    "operation_id_too_long",
                    f"--operation-id may have at most {limit} bytes for this command",
                )
            return str(given)
        if not stdin_is_terminal():
            raise CommandFailed(
                ExitCode.USAGE,
                "operation_id_required",
                "without a terminal this command needs --operation-id",
            )
        generated = f"{prefix}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"
        self.stderr.write(f"operation-id: {generated}")
        return generated

    def confirm(self, options: dict[str, Any], summary: str, operation_id: str | None) -> None:
        """Explicit intent: ``--yes``/``--no-input``, or ``yes`` typed at the prompt.
        Exit 8 without a terminal, or when anything but ``yes`` is answered."""
        if options.get("confirmed"):
            return
        if not stdin_is_terminal():
            raise CommandFailed(
                ExitCode.CONFIRMATION,
                "confirmation_required",
                f"{self.command_name} would {summary}, and there is no terminal to confirm "
                "it: add --yes (or --no-input) to run it from a script",
            )
        lines = [f"{self.command_name} [DESTRUCTIVE] {summary}"]
        if operation_id is not None:
            lines.append(f"operation-id: {operation_id}")
        answer = ask("\n".join(lines) + "\nconfirm (yes/no): ")
        if answer.strip().lower() != "yes":
            raise CommandFailed(ExitCode.CONFIRMATION, "confirmation_declined", "not confirmed")

    @staticmethod
    def actor(options: dict[str, Any]) -> Actor:
        """``--actor``, or ``cli:<login name>`` (``cli`` when the name does not fit);
        its account is that of the login running the command, when one has the
        login's name — never one named by ``--actor``, which is the audit's
        free-text label (the admin history credits the account, decision 155)."""
        try:
            login: str | None = getpass.getuser()
        except (OSError, KeyError):
            login = None
        account = login_account(login)
        given = options.get("actor")
        if given is not None:
            return Actor(given, account)
        try:
            return Actor(f"cli:{login}" if login else "cli", account)
        except OxideBatchError:
            return Actor("cli", account)
