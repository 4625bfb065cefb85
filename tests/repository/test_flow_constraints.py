"""The database's own rules for flow decisions (migration 0011): raw SQL that
bypasses the repository cannot store a decision the reader would refuse for its
kind, terminal, step, name lengths or digest lengths — on both databases — and
the migration keeps the rows, the other constraints and the indexes both ways.

The reader's fail-closed checks are tested on rows directly in test_flow.py.
"""

from __future__ import annotations

import importlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.db import DataError, IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from oxide_batch import models
from oxide_batch.domain.flow import TerminalKind
from tests.conftest import on_postgres
from tests.repository.test_flow import launch_flow, load_exit

pytestmark = pytest.mark.django_db
TABLE = "ob_flow_decision"
migration = importlib.import_module("oxide_batch.migrations.0011_flow_decision_checks")
BEFORE = ("oxide_batch", "0010_throttle_cache_table")
NEW_CONSTRAINTS = {
    "ob_flow_kind_valid",
    "ob_flow_terminal_valid",
    "ob_flow_step_sourced_has_step",
    "ob_flow_source_node_length",
    "ob_flow_outcome_length",
    "ob_flow_target_node_length",
    "ob_flow_fingerprint_length",
    "ob_flow_input_digest_length",
}
OLDER_CONSTRAINTS = {
    "ob_flow_decision_sequence",
    "ob_flow_decision_source_once",
    "ob_flow_sequence_pos",
    "ob_flow_one_target",
}
COLUMNS = (
    "job_instance_id",
    "job_execution_id",
    "sequence",
    "source_node_id",
    "source_step_execution_id",
    "kind",
    "observed_outcome",
    "target_node_id",
    "terminal",
    "plan_fingerprint",
    "input_digest",
    "reused_decision_id",
    "decided_at",
)


def stored(decision_id: int) -> dict[str, Any]:
    row: dict[str, Any] = models.FlowDecision.objects.filter(pk=decision_id).values(*COLUMNS).get()
    return row


def raw_insert(values: dict[str, Any]) -> None:
    names = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {TABLE} ({names}) VALUES ({marks})", list(values.values()))


def raw_update(decision_id: int, changes: dict[str, Any]) -> None:
    assignments = ", ".join(f"{column} = %s" for column in changes)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {TABLE} SET {assignments} WHERE id = %s", [*changes.values(), decision_id]
        )


def copy_of(decision_id: int, **changes: Any) -> dict[str, Any]:
    """Another row of the same execution (fresh sequence and source node, so the
    unique constraints do not fire), with ``changes``."""
    values = stored(decision_id)
    values["decided_at"] = connection.ops.adapt_datetimefield_value(values["decided_at"])
    return {**values, "sequence": 2, "source_node_id": "copy", **changes}


# (changes, the constraint that refuses them, a value longer than the column)
REFUSED: list[tuple[dict[str, Any], str, bool]] = [
    ({"kind": "TELEPORT"}, "ob_flow_kind_valid", False),
    ({"kind": "step_exit"}, "ob_flow_kind_valid", False),
    ({"target_node_id": None, "terminal": "EXPLODE"}, "ob_flow_terminal_valid", False),
    ({"target_node_id": None, "terminal": "complete"}, "ob_flow_terminal_valid", False),
    ({"source_step_execution_id": None}, "ob_flow_step_sourced_has_step", False),
    (
        {"kind": "COMPLETED_STEP_REUSE", "source_step_execution_id": None},
        "ob_flow_step_sourced_has_step",
        False,
    ),
    ({"source_node_id": ""}, "ob_flow_source_node_length", False),
    ({"source_node_id": "n" * 129}, "ob_flow_source_node_length", True),
    ({"observed_outcome": ""}, "ob_flow_outcome_length", False),
    ({"observed_outcome": "X" * 65}, "ob_flow_outcome_length", True),
    ({"target_node_id": ""}, "ob_flow_target_node_length", False),
    ({"target_node_id": "t" * 129}, "ob_flow_target_node_length", True),
    ({"plan_fingerprint": "a" * 63}, "ob_flow_fingerprint_length", False),
    ({"plan_fingerprint": "a" * 65}, "ob_flow_fingerprint_length", True),
    ({"input_digest": "not-hex"}, "ob_flow_input_digest_length", False),
    ({"sequence": 0}, "ob_flow_sequence_pos", False),
    ({"terminal": "COMPLETE"}, "ob_flow_one_target", False),
    ({"target_node_id": None}, "ob_flow_one_target", False),
]


def refusal(constraint: str, too_long: bool) -> tuple[type[Exception], str]:
    """PostgreSQL's varchar refuses an over-long value itself (a DataError) before
    any CHECK runs; SQLite ignores varchar lengths, so the constraint does it."""
    if too_long and on_postgres():
        return DataError, "value too long"
    return IntegrityError, constraint


def ids(case: tuple[dict[str, Any], str, bool]) -> str:
    return "-".join(f"{k}={str(v)[:10]}" for k, v in case[0].items())


@pytest.mark.parametrize("case", REFUSED, ids=[ids(case) for case in REFUSED])
def test_a_raw_insert_of_an_invalid_decision_is_refused(repo, clock, case):
    changes, constraint, too_long = case
    first = load_exit(repo, launch_flow(repo, clock))
    error, message = refusal(constraint, too_long)
    with pytest.raises(error, match=message):
        raw_insert(copy_of(first.id, **changes))
    assert models.FlowDecision.objects.count() == 1


@pytest.mark.parametrize("case", REFUSED, ids=[ids(case) for case in REFUSED])
def test_a_raw_update_to_an_invalid_decision_is_refused(repo, clock, case):
    changes, constraint, too_long = case
    first = load_exit(repo, launch_flow(repo, clock))
    before = stored(first.id)
    error, message = refusal(constraint, too_long)
    with pytest.raises(error, match=message):
        raw_update(first.id, changes)
    assert stored(first.id) == before


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"kind": "DECIDER", "source_step_execution_id": None},
        {"kind": "SPLIT_AGGREGATE", "source_step_execution_id": None},
        {"kind": "COMPLETED_STEP_REUSE"},
        *({"target_node_id": None, "terminal": t.value} for t in TerminalKind),
        {"source_node_id": "n" * 128, "observed_outcome": "X" * 64, "target_node_id": "t" * 128},
        # Only the length is the database's: the reader refuses what is not hex.
        {"plan_fingerprint": "A" * 64},
    ],
    ids=lambda changes: "-".join(f"{k}={str(v)[:10]}" for k, v in changes.items()) or "copy",
)
def test_a_raw_insert_of_a_valid_decision_is_accepted(repo, clock, changes):
    """The control: the refusals above are the values', not the raw insert's."""
    first = load_exit(repo, launch_flow(repo, clock))
    raw_insert(copy_of(first.id, **changes))
    assert models.FlowDecision.objects.count() == 2


def test_the_model_declares_what_the_migration_adds():
    declared = {c.name for c in models.FlowDecision._meta.constraints}
    added = {
        operation.constraint.name
        for operation in migration.Migration.operations
        if hasattr(operation, "constraint")
    }
    assert added == NEW_CONSTRAINTS
    assert declared == NEW_CONSTRAINTS | OLDER_CONSTRAINTS


# ---------------------------------------------------------- the migration, both ways


def table_state() -> tuple[set[str], set[str]]:
    """The table's constraint and index names, as the database reports them."""
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, TABLE)
    checks_and_uniques = {name for name, c in found.items() if c["check"] or c["unique"]}
    indexes = {name for name, c in found.items() if c["index"] and not c["unique"]}
    return checks_and_uniques, indexes


def migrate_to(target: tuple[str, str]) -> None:
    # The test's own inserts left deferred foreign-key checks pending, and
    # PostgreSQL will not ALTER a table with pending trigger events: run them
    # now (a real migrate starts a transaction of its own).
    connection.check_constraints()
    MigrationExecutor(connection).migrate([target])


@pytest.mark.postgres
def test_the_migration_goes_back_and_forth_keeping_rows_constraints_and_indexes(repo, clock):
    """In the test's transaction (PostgreSQL's DDL rolls back with it)."""
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("oxide_batch")[0]
    flow = launch_flow(repo, clock)
    first = load_exit(repo, flow)
    rows = list(models.FlowDecision.objects.order_by("id").values(*COLUMNS))
    constraints, indexes = table_state()
    assert constraints >= NEW_CONSTRAINTS | OLDER_CONSTRAINTS
    assert "ob_flow_reusable" in indexes

    migrate_to(BEFORE)
    back, back_indexes = table_state()
    assert back == constraints - NEW_CONSTRAINTS
    assert back_indexes == indexes
    # The old schema takes a row the new one refuses; migrating forward then fails
    # and deletes nothing.
    raw_update(first.id, {"kind": "TELEPORT"})
    with pytest.raises(IntegrityError, match="ob_flow_kind_valid"):
        migrate_to(latest)
    assert stored(first.id)["kind"] == "TELEPORT"
    raw_update(first.id, {"kind": "STEP_EXIT"})

    migrate_to(latest)
    assert table_state() == (constraints, indexes)
    assert list(models.FlowDecision.objects.order_by("id").values(*COLUMNS)) == rows
    with pytest.raises(IntegrityError, match="ob_flow_kind_valid"):
        raw_update(first.id, {"kind": "TELEPORT"})


# A subprocess on its own SQLite file: SQLite's schema editor cannot run inside
# the test's transaction, and the table rebuild is what needs proving.
ROOT = Path(__file__).resolve().parents[2]
POPULATE = """
from oxide_batch import models
from oxide_batch.repository import DjangoJobRepository, FixedClock
from tests.conftest import EPOCH
from tests.repository.test_flow import K, append, decision, launch_flow, load_exit, node

clock = FixedClock(EPOCH)
repo = DjangoJobRepository(clock)
flow = launch_flow(repo, clock)
load_exit(repo, flow)
append(repo, decision(flow, "route", K.DECIDER, "PUBLISH", node("publish")))
purged = append(repo, decision(flow, "gather", K.SPLIT_AGGREGATE, "DONE", node("publish")))
models.FlowDecision.objects.filter(pk=purged.id).delete()
"""


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def sqlite_state(path: str) -> dict[str, Any]:
    with sqlite3.connect(path) as db:
        (table_sql,) = db.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", [TABLE]
        ).fetchone()
        return {
            "rows": db.execute(f"SELECT * FROM {TABLE} ORDER BY id").fetchall(),
            "constraints": {
                name
                for name in NEW_CONSTRAINTS | OLDER_CONSTRAINTS
                if f'CONSTRAINT "{name}"' in table_sql
            },
            "indexes": db.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
                "ORDER BY name",
                [TABLE],
            ).fetchall(),
            "high_water": db.execute(
                "SELECT seq FROM sqlite_sequence WHERE name = ?", [TABLE]
            ).fetchone(),
        }


@pytest.mark.skipif(on_postgres(), reason="SQLite only (the PostgreSQL pass has its own)")
def test_the_migration_rebuilds_the_sqlite_table_keeping_everything(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env["SQLITE_PATH"] = path = str(tmp_path / "db.sqlite3")
    for args in (("migrate", "-v", "0"), ("shell", "-c", POPULATE)):
        done = manage(env, *args)
        assert done.returncode == 0, done.stderr
    latest = sqlite_state(path)
    assert len(latest["rows"]) == 2
    assert latest["constraints"] == NEW_CONSTRAINTS | OLDER_CONSTRAINTS
    assert latest["high_water"] == (3,)  # the purged decision's id

    done = manage(env, "migrate", "oxide_batch", BEFORE[1], "-v", "0")
    assert done.returncode == 0, done.stderr
    back = sqlite_state(path)
    assert back == {**latest, "constraints": OLDER_CONSTRAINTS}

    # A row the old schema took stops the forward migration; nothing is lost.
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE {TABLE} SET kind = 'TELEPORT' WHERE id = 1")
    done = manage(env, "migrate", "-v", "0")
    assert done.returncode != 0
    assert "CHECK constraint failed: ob_flow_kind_valid" in done.stderr
    tampered = sqlite_state(path)
    assert tampered["constraints"] == OLDER_CONSTRAINTS
    assert len(tampered["rows"]) == 2
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE {TABLE} SET kind = 'STEP_EXIT' WHERE id = 1")

    done = manage(env, "migrate", "-v", "0")
    assert done.returncode == 0, done.stderr
    assert sqlite_state(path) == latest
