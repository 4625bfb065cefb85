"""The database side of the soak: a recorder of purged rows and the final
snapshot the invariants read.

The purge deletes rows, and the audit keeps only counts — so, to check *what*
was deleted and in which state, a ``BEFORE DELETE`` trigger (test-only, on
the test database, removed afterwards) copies every deleted instance,
execution and step row, as it was inside the purge's transaction, into a side
table. A purge that rolls back rolls its copies back with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from oxide_batch import models
from tests.soak.ledger import COUNT_NAMES, EXECUTION, STEP

INSTANCE = "instance"
RECORDED_TABLES = {
    INSTANCE: "ob_job_instance",
    EXECUTION: "ob_job_execution",
    STEP: "ob_step_execution",
}
SIDE_TABLE = "soak_purged_row"
FUNCTION = "soak_record_purged_row"


@contextmanager
def purge_recorder() -> Iterator[None]:
    """Copy every row deleted from the recorded tables while the block runs."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {SIDE_TABLE} (seq bigserial PRIMARY KEY, kind text NOT NULL, "
            "txid bigint NOT NULL DEFAULT txid_current(), row jsonb NOT NULL)"
        )
        cursor.execute(
            f"CREATE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"INSERT INTO {SIDE_TABLE} (kind, row) VALUES (TG_ARGV[0], to_jsonb(OLD)); "
            "RETURN OLD; END $$"
        )
        for kind, table in RECORDED_TABLES.items():
            cursor.execute(
                f"CREATE TRIGGER soak_purged_{kind} BEFORE DELETE ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION {FUNCTION}('{kind}')"
            )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for kind, table in RECORDED_TABLES.items():
                cursor.execute(f"DROP TRIGGER IF EXISTS soak_purged_{kind} ON {table}")
            cursor.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}() CASCADE")
            cursor.execute(f"DROP TABLE IF EXISTS {SIDE_TABLE}")


def _row(values: Mapping[str, Any]) -> dict[str, Any]:
    """The columns the invariants read, alike for live rows and purged copies."""
    row: dict[str, Any] = {
        "id": int(values["id"]),
        "job_instance_id": int(values["job_instance_id"]),
        "status": values["status"],
        "version": int(values["version"]),
        "counts": {name: int(values[f"{name}_count"]) for name in COUNT_NAMES},
    }
    if "job_execution_id" in values:
        row["job_execution_id"] = int(values["job_execution_id"])
    if "stop_requested_at" in values:
        row["stop_requested"] = values["stop_requested_at"] is not None
    return row


@dataclass
class Snapshot:
    """What the database holds after the run (and what the purge deleted)."""

    executions: dict[int, dict[str, Any]] = field(default_factory=dict)
    steps: dict[int, dict[str, Any]] = field(default_factory=dict)
    instances: dict[int, dict[str, Any]] = field(default_factory=dict)
    purged: dict[str, dict[int, dict[str, Any]]] = field(
        default_factory=lambda: {INSTANCE: {}, EXECUTION: {}, STEP: {}}
    )
    operator_requests: list[dict[str, Any]] = field(default_factory=list)
    retention_records: list[dict[str, Any]] = field(default_factory=list)
    # Steps a recovery decision resolved to FAILED (contract §2.5.6): one write each
    # that no runtime success recorded.
    resolved_steps: set[int] = field(default_factory=set)

    def row(self, kind: str, row_id: int) -> dict[str, Any] | None:
        present = self.executions if kind == EXECUTION else self.steps
        return present.get(row_id) or self.purged[kind].get(row_id)

    def rows_purged(self) -> dict[str, int]:
        return {kind: len(rows) for kind, rows in self.purged.items()}


RUN_COLUMNS = ("id", "job_instance_id", "status", "version", *(f"{n}_count" for n in COUNT_NAMES))


def read_snapshot() -> Snapshot:
    snapshot = Snapshot()
    for values in models.JobExecution.objects.values(*RUN_COLUMNS, "stop_requested_at"):
        snapshot.executions[values["id"]] = _row(values)
    for values in models.StepExecution.objects.values(*RUN_COLUMNS, "job_execution_id"):
        snapshot.steps[values["id"]] = _row(values)
    for values in models.JobInstance.objects.values("id", "hold_placed_at"):
        snapshot.instances[values["id"]] = {"held": values["hold_placed_at"] is not None}
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT kind, row FROM {SIDE_TABLE} ORDER BY seq")
        for kind, document in cursor.fetchall():
            values = json.loads(document) if isinstance(document, str) else document
            if kind == INSTANCE:
                row = {"id": int(values["id"]), "held": values["hold_placed_at"] is not None}
            else:
                row = _row(values)
            if row["id"] in snapshot.purged[kind]:
                row["deleted_twice"] = True
            snapshot.purged[kind][row["id"]] = row
    snapshot.operator_requests = list(
        models.OperatorRequest.objects.order_by("id").values(
            "action", "operation_id", "outcome", "rejection_code", "job_execution_id", "actor"
        )
    )
    snapshot.retention_records = list(
        models.RetentionRecord.objects.order_by("id").values(
            "action",
            "operation_id",
            "job_instance_id",
            "actor",
            "deleted_job_instances",
            "deleted_job_executions",
            "deleted_step_executions",
        )
    )
    for resolved in models.RecoveryDecision.objects.values_list("resolved_step_ids", flat=True):
        snapshot.resolved_steps.update(resolved or ())
    return snapshot
