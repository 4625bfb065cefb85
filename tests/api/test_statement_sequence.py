"""The statements each hot runtime request sends, read from PostgreSQL's own log
(``log_statement = all`` for the server's sessions) while a real gunicorn
worker, with its persistent connection, serves the requests.

Each hot request is the authentication statement, BEGIN, one locking read,
one write and COMMIT — nothing else: no health-check ``SELECT 1`` (the
connection's health is read off its socket, ``oxide_batch/db/postgresql``),
no second read of the row for the answer (the locking read selects what the
answer shows). PostgreSQL pass only (scripts/with-postgres's cluster log).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from oxide_batch.repository.outbox_listen import OutboxListener
from oxide_batch.roles import RUNTIME
from tests.faults.test_restart import call
from tests.live import gunicorn, token_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# "2026-12-01 21:00:00.000 UTC [1234] LOG:  statement: BEGIN" and
# "… LOG:  execute _pg3_0: SELECT …" (extended protocol, prepared or not).
LOGGED = re.compile(r"\[(?P<pid>\d+)\] LOG:  (?:statement|execute [^:]*): (?P<sql>.*)")
HEX = "0123456789abcdef" * 2


class Log:
    """The cluster's server log, read from where the last read stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size

    def statements(self) -> list[tuple[int, str]]:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            text = log.read().decode(errors="replace")
            self.offset = log.tell()
        return [
            (int(match["pid"]), match["sql"])
            for match in map(LOGGED.search, text.splitlines())
            if match is not None
        ]


@pytest.fixture
def logged_server() -> Iterator[tuple[str, Log]]:
    data = os.environ.get("OXIDE_BATCH_PG_DATA")
    if not data:
        pytest.skip("needs OXIDE_BATCH_PG_DATA (scripts/with-postgres)")
    log = Path(data).parent / "server.log"
    name = connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER DATABASE \"{name}\" SET log_statement = 'all'")
    try:
        # One sync worker: one persistent connection, reused by every request.
        with gunicorn(workers=1, threads=1) as url:
            yield url, Log(log)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER DATABASE "{name}" RESET log_statement')


def kind(sql: str) -> str:
    """A statement by its verb and table: ``SELECT ob_job_execution FOR UPDATE``."""
    words = sql.split()
    verb = words[0].upper()
    if verb in {"BEGIN", "COMMIT", "ROLLBACK"}:
        return verb
    # The statement's own table: after the FROM / INTO / UPDATE outside parentheses.
    table = None
    for match in re.finditer(r'(?:FROM|INTO|UPDATE) "(\w+)"', sql):
        before = sql[: match.start()]
        if before.count("(") == before.count(")"):
            table = match[1]
            break
    if table is None:
        return sql.strip()  # SELECT 1, SET …
    lock = " FOR UPDATE" if " FOR NO KEY UPDATE" in sql or " FOR UPDATE" in sql else ""
    return f"{verb} {table}{lock}"


def sequence_of(log: Log, request: Any) -> list[str]:
    """The statements one request sent (the server's sessions only)."""
    log.statements()  # whatever came before
    status, _, document = request()
    assert status in (200, 201), document
    own = connection.cursor().connection.info.backend_pid
    return [kind(sql) for pid, sql in log.statements() if pid != own]


def test_each_hot_request_is_authentication_begin_one_locking_read_one_write_commit(
    logged_server: tuple[str, Log],
) -> None:
    url, log = logged_server
    api = f"{url}/api/v1"
    token = token_for("sequence-runtime", RUNTIME)

    def post(path: str, body: dict[str, Any]) -> Any:
        return lambda: call(f"{api}/{path}", token, body)

    status, _, instance = call(f"{api}/instances", token, {"job_name": "sequence_job"})
    assert status == 201, instance
    _, _, execution = call(f"{api}/instances/{instance['id']}/executions", token, {})
    version = execution["version"]
    _, _, _ = call(
        f"{api}/executions/{execution['id']}/claim",
        token,
        {"owner_token": HEX, "expected_version": version},
    )

    hot: dict[str, list[str]] = {}
    hot["execution transition"] = sequence_of(
        log,
        post(
            f"executions/{execution['id']}/transition",
            {"expected_version": version, "status": "STARTED"},
        ),
    )
    version += 1
    hot["control"] = sequence_of(
        log, post(f"executions/{execution['id']}/control", {"owner_token": HEX})
    )
    hot["execution exit status"] = sequence_of(
        log,
        post(
            f"executions/{execution['id']}/exit-status",
            {"expected_version": version, "exit_code": "RUNNING"},
        ),
    )
    version += 1
    step_request = post(f"executions/{execution['id']}/steps", {"step_name": "load"})
    log.statements()
    status, _, step = step_request()
    assert status == 201, step
    hot["step create"] = [kind(sql) for _, sql in log.statements()]
    step_version = step["version"]
    hot["step transition"] = sequence_of(
        log,
        post(
            f"steps/{step['id']}/transition",
            {"expected_version": step_version, "status": "STARTED"},
        ),
    )
    step_version += 1
    for n in range(2):  # the second one on the warm, prepared statements
        hot[f"chunk commit {n + 1}"] = sequence_of(
            log,
            post(
                f"steps/{step['id']}/checkpoint",
                {
                    "expected_version": step_version,
                    "counts": {"read": 10, "written": 10},
                    "checkpoint": {"schema": "c", "schema_version": 1, "payload": {"n": n}},
                },
            ),
        )
        step_version += 1
    hot["step exit status"] = sequence_of(
        log,
        post(
            f"steps/{step['id']}/exit-status", {"expected_version": step_version, "exit_code": "X"}
        ),
    )

    report = "\n".join(f"{name}: {statements}" for name, statements in hot.items())
    for name, statements in hot.items():
        assert "SELECT 1" not in " ".join(statements), report
        assert len(statements) <= 5, report
        # The authentication: one statement on the token table.
        assert statements[0].split()[0] == "SELECT", report
        assert "token" in statements[0], report
        assert statements[1] == "BEGIN", report
        assert statements[-1] == "COMMIT", report
        body = statements[2:-1]
        if name == "step create":
            assert [statement.split()[0] for statement in body] == ["SELECT", "INSERT"], report
            continue
        locked = "ob_step_execution" if name.startswith(("step", "chunk")) else "ob_job_execution"
        assert body == [f"SELECT {locked} FOR UPDATE", f"UPDATE {locked}"], report


def test_the_short_forms_are_one_locking_read_and_one_write_each(
    logged_server: tuple[str, Log],
) -> None:
    """contract §4.2: a chunk that ends its step and a transition with its exit
    code are the hot shape (authentication, BEGIN, one locking read, one write,
    COMMIT) — the transition that ends the run adds its outbox event, one
    INSERT (issue 41), whose trigger (migration 0029) notifies the
    notifier's channel with no statement of its own, delivered at the COMMIT;
    the finishing chunk notifies nothing; a step created STARTED is one
    insert after its reads; the launch writes its attempt once (one INSERT
    into the executions)."""
    url, log = logged_server
    listener = OutboxListener()
    listener.connect()
    api = f"{url}/api/v1"
    token = token_for("short-forms-runtime", RUNTIME)

    def post(path: str, body: dict[str, Any]) -> Any:
        return lambda: call(f"{api}/{path}", token, body)

    log.statements()
    status, _, launched = call(
        f"{api}/launches", token, {"job_name": "short_job", "owner_token": HEX}
    )
    assert status == 201, launched
    launch = [kind(sql) for pid, sql in log.statements()]
    execution = launched["execution"]
    log.statements()
    status, _, step = call(
        f"{api}/executions/{execution['id']}/steps",
        token,
        {"step_name": "load", "status": "STARTED", "owner_token": HEX},
    )
    assert status == 201, step
    start = [kind(sql) for _, sql in log.statements()]
    finishing = sequence_of(
        log,
        post(
            f"steps/{step['id']}/checkpoint",
            {
                "expected_version": step["version"],
                "counts": {"read": 10},
                "finish": "COMPLETED",
                "exit_code": "LOADED",
                "owner_token": HEX,
            },
        ),
    )
    chunk_notified = listener.wait(0.5)
    ending = sequence_of(
        log,
        post(
            f"executions/{execution['id']}/transition",
            {
                "expected_version": execution["version"],
                "status": "COMPLETED",
                "exit_code": "DONE",
                "owner_token": HEX,
            },
        ),
    )
    end_notified = listener.wait(5.0)
    listener.close()
    shaped = {"finishing chunk": finishing, "transition with exit code": ending}
    report = "\n".join(
        f"{name}: {s}" for name, s in {**shaped, "launch": launch, "step": start}.items()
    )
    for name, statements in shaped.items():
        locked = "ob_step_execution" if name.startswith("finishing") else "ob_job_execution"
        # A run's end writes its notification event with it (the outbox, issue 41):
        # exactly one INSERT — its NOTIFY is the INSERT's trigger, not a statement
        # of its own; the finishing chunk (a step's end) writes none.
        outbox = ["INSERT ob_notification_event"] if name.startswith("transition") else []
        assert statements[1:] == [
            "BEGIN",
            f"SELECT {locked} FOR UPDATE",
            f"UPDATE {locked}",
            *outbox,
            "COMMIT",
        ], report
        assert "token" in statements[0], report
    # The run's end woke the notifier (the trigger of its INSERT); the chunk did not.
    assert (chunk_notified, end_notified) == (False, True), report
    assert launch.count("INSERT ob_job_execution") == 1, report
    assert not any(s.startswith("UPDATE ob_job_execution") for s in launch), report
    assert start.count("INSERT ob_step_execution") == 1, report
    assert not any(s.startswith("UPDATE ob_step_execution") for s in start), report
    assert "SELECT 1" not in " ".join(launch + start), report


def test_a_failure_s_detail_is_one_insert_more_and_only_when_kept(
    logged_server: tuple[str, Log],
) -> None:
    """Issue 40: a failing transition without a detail is what it was (its
    locking read, its write, the run's outbox event); with a detail, the same
    locking read (joining the instance's parameters), the same write and one
    INSERT of the detail; a failing step likewise, without the outbox event."""
    url, log = logged_server
    api = f"{url}/api/v1"
    token = token_for("detail-runtime", RUNTIME)
    failure = {"category": "USER_COMPONENT", "failure_id": 7}
    detail = {"type": "ValueError", "message": "bad row 17: password=hunter2"}
    shapes: dict[str, list[str]] = {}
    for name, sent in (("without", failure), ("with", {**failure, "detail": detail})):
        status, _, launched = call(
            f"{api}/launches",
            token,
            {"job_name": f"detail_{name}", "owner_token": HEX},
        )
        assert status == 201, launched
        execution = launched["execution"]
        status, _, step = call(
            f"{api}/executions/{execution['id']}/steps",
            token,
            {"step_name": "load", "status": "STARTED", "owner_token": HEX},
        )
        assert status == 201, step
        shapes[f"step {name}"] = sequence_of(
            log,
            lambda step=step, sent=sent: call(
                f"{api}/steps/{step['id']}/transition",
                token,
                {"expected_version": step["version"], "status": "FAILED", "failure": sent},
            ),
        )
        shapes[f"execution {name}"] = sequence_of(
            log,
            lambda execution=execution, sent=sent: call(
                f"{api}/executions/{execution['id']}/transition",
                token,
                {
                    "expected_version": execution["version"],
                    "status": "FAILED",
                    "failure": sent,
                    "owner_token": HEX,
                },
            ),
        )
    report = "\n".join(f"{name}: {s}" for name, s in shapes.items())
    for kind, locked, outbox in (
        ("step", "ob_step_execution", []),
        ("execution", "ob_job_execution", ["INSERT ob_notification_event"]),
    ):
        without = shapes[f"{kind} without"][1:]
        assert without == [
            "BEGIN",
            f"SELECT {locked} FOR UPDATE",
            f"UPDATE {locked}",
            *outbox,
            "COMMIT",
        ], report
        with_detail = shapes[f"{kind} with"][1:]
        assert with_detail == [
            "BEGIN",
            f"SELECT {locked} FOR UPDATE",
            f"UPDATE {locked}",
            "INSERT ob_failure_detail",
            *outbox,
            "COMMIT",
        ], report


def test_a_chunk_commit_with_skips_is_one_insert_more(logged_server: tuple[str, Log]) -> None:
    """Issue 42: a chunk commit carrying skipped items is the hot shape plus one
    INSERT into the skip ledger, whatever the number of items (after the
    step's write, before the COMMIT); the same commit without them is the hot
    shape, unchanged."""
    url, log = logged_server
    api = f"{url}/api/v1"
    token = token_for("skips-runtime", RUNTIME)
    status, _, launched = call(
        f"{api}/launches", token, {"job_name": "skip_job", "owner_token": HEX}
    )
    assert status == 201, launched
    execution = launched["execution"]
    status, _, step = call(
        f"{api}/executions/{execution['id']}/steps",
        token,
        {"step_name": "load", "status": "STARTED", "owner_token": HEX},
    )
    assert status == 201, step
    version = step["version"]
    detail = {"type": "ValueError", "message": "bad amount"}
    sequences = {}
    for name, skips in (
        ("no skips", []),
        ("one skip", [{"phase": "read", "item": "1", "failure": {"category": "USER_COMPONENT"}}]),
        (
            "forty skips with details",
            [
                {
                    "phase": "process",
                    "item": str(n),
                    "failure": {"category": "USER_COMPONENT", "detail": detail},
                }
                for n in range(40)
            ],
        ),
    ):
        body: dict[str, Any] = {"expected_version": version, "counts": {"read": 50}}
        if skips:
            body["skips"] = skips
        sequences[name] = sequence_of(
            log, lambda body=body: call(f"{api}/steps/{step['id']}/checkpoint", token, body)
        )
        version += 1
    report = "\n".join(f"{name}: {statements}" for name, statements in sequences.items())
    hot = ["SELECT ob_step_execution FOR UPDATE", "UPDATE ob_step_execution"]
    assert sequences["no skips"][1:] == ["BEGIN", *hot, "COMMIT"], report
    for name in ("one skip", "forty skips with details"):
        assert sequences[name][1:] == ["BEGIN", *hot, "INSERT ob_skip", "COMMIT"], report
