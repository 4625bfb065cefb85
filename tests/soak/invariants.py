"""The soak's invariants: the merged ledger against the database snapshot.

Each check returns the violations it found, as sentences naming the row, so a
failing soak says what went wrong (empty = holds). Pure functions over plain
values: the self-tests feed them doctored ledgers and snapshots.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from tests.soak.database import INSTANCE, Snapshot
from tests.soak.ledger import (
    APPLIED,
    COUNT_NAMES,
    EXECUTION,
    LAUNCH_OWN_KEY,
    REJECTED,
    REPLAYED,
    RUNNING,
    STEP,
    Ledger,
    OperatorEntry,
)
from tests.soak.operator import OPERATION_PREFIX, OPERATOR_AUDIT, RETENTION_AUDIT
from tests.soak.purge import PURGE_PREFIX

FINISHED = frozenset({"STOPPED", "FAILED", "COMPLETED", "ABANDONED"})
# Races a soak loses on purpose: by the runtimes (another launch, an operator's
# recovery, a purge), by the operator (a runtime moved first, a purge), by the
# purge command (re-surveyed too often). Anything else is a finding.
EXPECTED_CODES = frozenset(
    {
        "stale_version",
        "execution_already_active",
        "completed_instance",
        "abandoned_instance",
        "illegal_transition",
        "invalid_state",
        "job_instance_not_found",
        "job_execution_not_found",
        "step_execution_not_found",
        "concurrent_modification",
        "operation_id_conflict",
        "recovery_evidence_stale",
        "execution_not_stale",
        "recovery_not_allowed",
        "unresolved_recovery_required",
        "purge_exit_5",
    }
)


# Refusals a soak meets by design at one operation only: a restart creates its
# steps again, and those that COMPLETED in an earlier attempt are refused
# (contract §2.3.2: a restart skips them; the runtime goes on with the next step).
EXPECTED_FOR = frozenset({("POST executions/{id}/steps", "not_restartable")})


def check(snapshot: Snapshot, ledger: Ledger, *, operator_actor: str) -> list[str]:
    return [
        *calls(ledger),
        *losses(ledger),
        *ledger.anomalies,
        *versions(snapshot, ledger),
        *step_counts(snapshot, ledger),
        *execution_counts(snapshot, ledger),
        *stops(snapshot, ledger),
        *operator_audit(snapshot, ledger, actor=operator_actor),
        *retention_audit(snapshot, ledger, actor=operator_actor),
        *purged_rows(snapshot, ledger),
    ]


def calls(ledger: Ledger) -> list[str]:
    """No 5xx, no transport error, no refusal a soak cannot explain."""
    found = []
    bad = Counter(
        (call.operation, call.status, call.code)
        for call in ledger.calls
        if call.server_error
        or call.transport_error
        or (
            call.code
            and call.code not in EXPECTED_CODES
            and (call.operation, call.code) not in EXPECTED_FOR
        )
    )
    for (operation, status, code), times in bad.most_common():
        found.append(f"{times}× {operation} answered {status} {code}")
    return found


def losses(ledger: Ledger) -> list[str]:
    """A refusal needs a cause: a launch of a key nobody else uses cannot lose,
    and nobody but an operator's recovery touches a running lifecycle (its
    steps least of all) — so a running lifecycle refused for any other reason
    was refused wrongly."""
    resolved = {
        e.target
        for e in ledger.operator
        if e.kind in ("RECOVER", "ABANDON") and e.outcome == APPLIED and e.replay_of is None
    }
    found = []
    for phase, execution_id, code in ledger.losses:
        if phase == LAUNCH_OWN_KEY or (phase == RUNNING and execution_id not in resolved):
            found.append(f"a runtime was refused {code} ({phase}, execution {execution_id})")
    return found


def versions(snapshot: Snapshot, ledger: Ledger) -> list[str]:
    """Every row's version = the successes recorded on it, each version once: a
    lost update shows as a repeated version or a version the row never reached;
    a write nobody was told about, as a version no success produced."""
    found = []
    births: dict[str, Iterable[int]] = {EXECUTION: ledger.executions, STEP: ledger.steps}
    for kind, row_ids in births.items():
        for row_id in row_ids:
            row = snapshot.row(kind, row_id)
            if row is None:
                found.append(f"{kind} {row_id} vanished: neither in the database nor purged")
                continue
            produced = sorted(ledger.versions.get((kind, row_id), []))
            if kind == STEP and row_id in snapshot.resolved_steps:
                # The recovery that resolved it wrote last (the runtime is fenced).
                produced.append(max(produced, default=0) + 1)
            if produced != list(range(1, row["version"] + 1)):
                found.append(
                    f"{kind} {row_id} is at version {row['version']} ({row['status']}) but the "
                    f"successes recorded on it produced versions {produced}"
                )
    for kind, row_id in ledger.versions:
        if row_id not in births[kind]:
            found.append(f"{kind} {row_id} was mutated but its creation was never recorded")
    for kind, present in ((EXECUTION, snapshot.executions), (STEP, snapshot.steps)):
        for row_id in present:
            if row_id not in births[kind]:
                found.append(f"{kind} {row_id} exists but no success created it")
    return found


def _counts(values: Any) -> dict[str, int]:
    return {name: int(values.get(name, 0)) for name in COUNT_NAMES}


def expected_step_counts(ledger: Ledger) -> tuple[dict[int, dict[str, int]], list[str]]:
    """Each step's counts: what it took over from the newest earlier row of the
    same step in its instance, plus its chunk deltas and terminal rollbacks.
    Also returns the takeovers that did not match that earlier row."""
    found = []
    lineage: defaultdict[tuple[int, str], list[int]] = defaultdict(list)
    for step_id, birth in ledger.steps.items():
        lineage[(birth.instance_id, birth.name)].append(step_id)
    expected: dict[int, dict[str, int]] = {}
    for step_ids in lineage.values():
        carried = _counts({})
        for step_id in sorted(step_ids):
            birth = ledger.steps[step_id]
            if _counts(birth.counts) != carried:
                found.append(
                    f"step {step_id} ({birth.name}) took over {dict(birth.counts)}, but its "
                    f"predecessor ended with {carried}"
                )
            deltas = ledger.chunk_deltas.get(step_id, Counter())
            total = {name: carried[name] + deltas.get(name, 0) for name in COUNT_NAMES}
            total["rolled_back"] += ledger.terminal_rollbacks.get((STEP, step_id), 0)
            expected[step_id] = carried = total
    return expected, found


def step_counts(snapshot: Snapshot, ledger: Ledger) -> list[str]:
    expected, found = expected_step_counts(ledger)
    for step_id, counts in expected.items():
        row = snapshot.row(STEP, step_id)
        if row is not None and row["counts"] != counts:
            found.append(f"step {step_id} counts {row['counts']}, the ledger's sum is {counts}")
    return found


def execution_counts(snapshot: Snapshot, ledger: Ledger) -> list[str]:
    """Job-level counts change only through terminal rollbacks (contract §2.1)."""
    found = []
    for execution_id in ledger.executions:
        row = snapshot.row(EXECUTION, execution_id)
        if row is None:
            continue
        counts = _counts(
            {"rolled_back": ledger.terminal_rollbacks.get((EXECUTION, execution_id), 0)}
        )
        if row["counts"] != counts:
            found.append(f"execution {execution_id} counts {row['counts']}, expected {counts}")
    return found


def stops(snapshot: Snapshot, ledger: Ledger) -> list[str]:
    """Never STOPPING-and-COMPLETED: once the runtime learned of a stop (the
    execution is then STOPPING), it can end STOPPED, FAILED or be resolved by
    an operator, but never COMPLETED."""
    found = []
    for execution_id in sorted(ledger.stop_seen):
        row = snapshot.row(EXECUTION, execution_id)
        if row is not None and row["status"] == "COMPLETED":
            found.append(f"execution {execution_id} saw its stop request yet ended COMPLETED")
    return found


def _audit_rows(
    rows: list[dict[str, Any]], actions: Iterable[str]
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    wanted = set(actions)
    grouped: defaultdict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["action"] in wanted and row["operation_id"].startswith(OPERATION_PREFIX):
            grouped[(row["action"], row["operation_id"])].append(row)
    return grouped


def _audit(
    entries: list[OperatorEntry],
    rows: dict[tuple[str, str], list[dict[str, Any]]],
    describe: Any,
) -> list[str]:
    """One row per audited request (APPLIED or REJECTED, as answered), none for
    the unaudited answers, none more for replays and conflicts."""
    found = []
    originals = {(e.kind, e.operation_id): e for e in entries if e.replay_of is None}
    for key, original in originals.items():
        recorded = rows.get(key, [])
        audited = original.outcome in (APPLIED, REJECTED)
        if len(recorded) != int(audited):
            found.append(
                f"{key[0]} {key[1]} answered {original.outcome} {original.code or ''} but has "
                f"{len(recorded)} audit rows"
            )
        elif audited:
            mismatch = describe(original, recorded[0])
            if mismatch:
                found.append(f"{key[0]} {key[1]}: audit row {mismatch}")
    for key in rows.keys() - originals.keys():
        found.append(f"audit row {key} matches no request the operator sent")
    for entry in entries:
        if entry.replay_of is not None and (entry.kind, entry.operation_id) not in originals:
            found.append(f"{entry.replay_of} of unknown request {entry.operation_id}")
    return found


def operator_audit(snapshot: Snapshot, ledger: Ledger, *, actor: str) -> list[str]:
    entries = [e for e in ledger.operator if e.audit == OPERATOR_AUDIT]

    def describe(entry: OperatorEntry, row: dict[str, Any]) -> str | None:
        got = (row["outcome"], row["rejection_code"], row["job_execution_id"], row["actor"])
        wanted = (entry.outcome, entry.code, entry.target, actor)
        return None if got == wanted else f"{got} != answered {wanted}"

    found = _audit(
        entries, _audit_rows(snapshot.operator_requests, ["STOP", "ABANDON", "RECOVER"]), describe
    )
    for entry in entries:
        # A replay answers the recorded outcome, even after its execution was purged.
        if entry.replay_of == "replay" and entry.outcome != REPLAYED:
            found.append(f"replay of {entry.operation_id} answered {entry.outcome} ({entry.code})")
    return found


def retention_audit(snapshot: Snapshot, ledger: Ledger, *, actor: str) -> list[str]:
    entries = [e for e in ledger.operator if e.audit == RETENTION_AUDIT]

    def describe(entry: OperatorEntry, row: dict[str, Any]) -> str | None:
        got = (row["job_instance_id"], row["actor"])
        return None if got == (entry.target, actor) else f"{got} != ({entry.target}, {actor})"

    found = _audit(
        entries, _audit_rows(snapshot.retention_records, ["HOLD", "RELEASE_HOLD"]), describe
    )
    for entry in entries:
        if entry.replay_of == "replay" and entry.outcome != REPLAYED:
            found.append(f"replay of {entry.operation_id} answered {entry.outcome} {entry.code}")
    return found


def purged_rows(snapshot: Snapshot, ledger: Ledger) -> list[str]:
    """Whole instances only, each finished and not held when deleted, each row
    deleted once, and the purge records' counts = the rows deleted."""
    found = []
    purged = snapshot.purged
    for kind, rows in purged.items():
        found += [
            f"{kind} {i} deleted twice" for i, row in rows.items() if row.get("deleted_twice")
        ]
    for instance_id, row in purged[INSTANCE].items():
        if row["held"]:
            found.append(f"instance {instance_id} was purged while held")
    for execution_id, row in purged[EXECUTION].items():
        if row["status"] not in FINISHED:
            found.append(f"execution {execution_id} was purged while {row['status']}")
    for kind in (EXECUTION, STEP):
        for row_id, row in purged[kind].items():
            if row["job_instance_id"] not in purged[INSTANCE]:
                found.append(f"{kind} {row_id} was purged without its instance")
    for kind, present in ((EXECUTION, snapshot.executions), (STEP, snapshot.steps)):
        for row_id, row in present.items():
            if row["job_instance_id"] in purged[INSTANCE]:
                found.append(f"{kind} {row_id} outlived its purged instance")
    records = [r for r in snapshot.retention_records if r["operation_id"].startswith(PURGE_PREFIX)]
    recorded = {
        INSTANCE: sum(r["deleted_job_instances"] for r in records),
        EXECUTION: sum(r["deleted_job_executions"] for r in records),
        STEP: sum(r["deleted_step_executions"] for r in records),
    }
    if recorded != snapshot.rows_purged():
        found.append(f"purge records count {recorded}, rows deleted {snapshot.rows_purged()}")
    reported = sum((run.get("counts") or {}).get("job_instances", 0) for run in ledger.purges)
    if ledger.purges and reported != recorded[INSTANCE]:
        found.append(f"the purge command reported {reported} instances, records {recorded}")
    return found
