"""A bounded load-and-soak run (issue 8): gunicorn on the PostgreSQL test
database; eight runtime threads running whole job lifecycles over HTTP, an
operator thread stopping, recovering, abandoning and holding, and a purge loop
deleting every finished instance as soon as it may — all at once, until a
deadline. Then the database is checked against what every actor was told:

- every execution and step (live or purged) is at exactly the version its
  recorded successes produced, each version once (no lost update, no write
  nobody was told about);
- every step's counts = what it took over on a restart + its chunk deltas
  (+ terminal rollbacks); job counts move only through terminal rollbacks;
- never STOPPING-and-COMPLETED: an execution whose runtime learned of a stop
  does not end COMPLETED (and STOPPING → COMPLETED is refused);
- one audit row per audited operator request, as answered (APPLIED/REJECTED),
  none for replays, conflicts, not-found;
- the purge deleted whole instances, each finished and not held at that
  moment, and its records count exactly the rows deleted;
- no 5xx, no transport error, no refusal outside the expected races.

It runs twice: against one server on the database, and against two servers
behind PgBouncer in transaction pooling (tests/pooler.py), the purge command
going through the pooler too.

Profiles: ~25 s of load by default; ``OXIDE_BATCH_SOAK=full`` runs ~3 minutes
(long enough for dropped executions to go stale and be recovered);
``OXIDE_BATCH_SOAK_SECONDS=N`` sets the length. Figures are printed and
written to ``var/test-artifacts/soak.json`` (``soak-pgbouncer.json``).
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from oxide_batch.roles import OPERATOR, RUNTIME
from tests.live import ROOT, database_url, gunicorn, token_for
from tests.pooler import POOLED_ENVIRONMENT, scaled_out
from tests.soak.clients import MeteredOperator, MeteredRuntime
from tests.soak.database import INSTANCE, Snapshot, purge_recorder, read_snapshot
from tests.soak.invariants import check
from tests.soak.ledger import (
    APPLIED,
    EXECUTION,
    LAUNCH_SHARED_KEY,
    NOT_AUDITED,
    REJECTED,
    REPLAYED,
    RUNNING,
    STEP,
    Call,
    Ledger,
    OperatorEntry,
    StepBirth,
    merge,
)
from tests.soak.operator import OPERATION_PREFIX, OPERATOR_AUDIT, OperatorActor
from tests.soak.purge import PURGE_PREFIX, PurgeLoop
from tests.soak.report import figures, render
from tests.soak.runtime import RestartPool, RuntimeActor

RUNTIMES = 8
SHORT_SECONDS, FULL_SECONDS = 25.0, 180.0
STALE_AFTER_SECONDS = 60  # the minimum the setting allows
HTTP_TIMEOUT = 20.0
JOIN_GRACE = 90.0  # past the deadline: one HTTP call or one purge command in flight
PURGE_INTERVAL = 1.0
OPERATOR_NAME = "soak-operator"
# Operator actions every run must have applied (new requests, not replays).
EXERCISED_ACTIONS = ("STOP", "RECOVER", "HOLD")
ARTIFACT = ROOT / "var" / "test-artifacts" / "soak.json"
POOLED_ARTIFACT = ROOT / "var" / "test-artifacts" / "soak-pgbouncer.json"


def soak_seconds() -> float:
    if os.environ.get("OXIDE_BATCH_SOAK_SECONDS"):
        return float(os.environ["OXIDE_BATCH_SOAK_SECONDS"])
    return FULL_SECONDS if os.environ.get("OXIDE_BATCH_SOAK") == "full" else SHORT_SECONDS


def guarded(name: str, run: Callable[[], None], crashes: list[str]) -> Callable[[], None]:
    def target() -> None:
        try:
            run()
        except BaseException:  # the test reports it
            crashes.append(f"{name}: {traceback.format_exc()}")

    return target


def run_actors(
    actors: dict[str, Callable[[], None]], deadline: float
) -> tuple[list[str], list[str]]:
    """Start every actor; join each by the deadline plus a grace period.
    Returns the names of the threads still running (hung) and the crashes."""
    crashes: list[str] = []
    threads = [
        threading.Thread(target=guarded(name, run, crashes), name=name, daemon=True)
        for name, run in actors.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline + JOIN_GRACE - time.monotonic()))
    return [thread.name for thread in threads if thread.is_alive()], crashes


@dataclass(frozen=True)
class Deployment:
    """Where the actors send their requests (runtime i to ``urls[i % n]``, the
    operator to the last) and the database the purge command uses."""

    urls: tuple[str, ...]
    database: str
    environment: Mapping[str, str] = field(default_factory=dict)


def cast(
    deployment: Deployment,
    runtime_tokens: list[str],
    operator_token: str,
    *,
    seconds: float,
    deadline: float,
) -> tuple[dict[str, Callable[[], None]], list[Ledger]]:
    """Every actor of the run (by thread name) and the ledgers they write."""
    actors: dict[str, Callable[[], None]] = {}
    ledgers: list[Ledger] = []
    pool = RestartPool()
    urls = deployment.urls
    for index, token in enumerate(runtime_tokens):
        ledger = Ledger(f"runtime-{index}")
        client = MeteredRuntime(urls[index % len(urls)], token, ledger, timeout=HTTP_TIMEOUT)
        runtime = RuntimeActor(
            index, client, ledger, deadline=deadline, pool=pool, seed=1000 + index
        )
        actors[ledger.name] = runtime.run
        ledgers.append(ledger)
    ledger = Ledger("operator")
    operator = OperatorActor(
        MeteredOperator(urls[-1], operator_token, ledger, timeout=HTTP_TIMEOUT),
        ledger,
        deadline=deadline,
        seed=7,
        recover_stale_after=STALE_AFTER_SECONDS if seconds > STALE_AFTER_SECONDS else None,
    )
    actors[ledger.name] = operator.run
    ledgers.append(ledger)
    ledger = Ledger("purge")
    purge = PurgeLoop(
        ledger,
        deadline=deadline,
        database_url=deployment.database,
        interval=PURGE_INTERVAL,
        environment=deployment.environment,
    )
    actors[ledger.name] = purge.run
    ledgers.append(ledger)
    return actors, ledgers


def summarize(
    ledger: Ledger, snapshot: Snapshot, *, elapsed: float, violations: list[str], hung: list[str]
) -> dict[str, Any]:
    report = figures(ledger, seconds=elapsed, rows_purged=snapshot.rows_purged())
    report["checked"] = {
        "executions": len(ledger.executions),
        "steps": len(ledger.steps),
        "operator_requests": sum(1 for e in ledger.operator if e.replay_of is None),
        "purged_instances": len(snapshot.purged[INSTANCE]),
    }
    executions = [*snapshot.executions.values(), *snapshot.purged[EXECUTION].values()]
    report["stop_requested_executions_by_final_status"] = dict(
        Counter(row["status"] for row in executions if row.get("stop_requested")).most_common()
    )
    report["violations"] = violations
    report["hung_threads"] = hung
    return report


@contextmanager
def deployed(kind: str, environment: Mapping[str, str]) -> Iterator[Deployment]:
    """One gunicorn on the test database, or two behind PgBouncer (tests/pooler.py)
    with the purge command going through the pooler too."""
    if kind == "direct":
        with gunicorn(workers=2, threads=4, environment=environment) as url:
            yield Deployment(urls=(url,), database=database_url())
    else:
        with scaled_out(workers=2, threads=4, environment=environment) as running:
            yield Deployment(
                urls=running.urls,
                database=running.bouncer.url(),
                environment=POOLED_ENVIRONMENT,
            )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["direct", "pgbouncer"])
def test_a_bounded_soak_keeps_every_invariant(
    kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seconds = soak_seconds()
    runtime_tokens = [token_for(f"soak-runtime-{i}", RUNTIME) for i in range(RUNTIMES)]
    operator_token = token_for(OPERATOR_NAME, OPERATOR)
    environment = {
        # An operator throttle must not interfere with a soak that expects none.
        "OXIDE_BATCH_OPERATOR_THROTTLE_RATE": "1000000/min",
        "OXIDE_BATCH_PURGE_MIN_AGE": "0s",
        "OXIDE_BATCH_RECOVERY_STALE_AFTER": f"{STALE_AFTER_SECONDS}s",
    }
    with purge_recorder():
        with deployed(kind, environment) as deployment:
            started = time.monotonic()
            deadline = started + seconds
            actors, ledgers = cast(
                deployment, runtime_tokens, operator_token, seconds=seconds, deadline=deadline
            )
            hung, crashes = run_actors(actors, deadline)
            elapsed = time.monotonic() - started
        snapshot = read_snapshot()
    ledger = merge(ledgers)
    violations = check(snapshot, ledger, operator_actor=OPERATOR_NAME)
    report = summarize(ledger, snapshot, elapsed=elapsed, violations=violations, hung=hung)
    report["deployment"] = {"kind": kind, "servers": len(deployment.urls)}
    publish(report, capsys, ARTIFACT if kind == "direct" else POOLED_ARTIFACT)

    assert not hung, f"threads still running {JOIN_GRACE} s past the deadline: {hung}"
    assert not crashes, "\n".join(crashes)
    assert violations == [], "\n".join(violations[:50])
    # A soak that did not exercise these proves nothing about them.
    assert ledger.lifecycles["completed"] > 0
    assert ledger.lifecycles["stopped"] > 0
    new = Counter(e.kind for e in ledger.operator if e.replay_of is None and e.outcome == APPLIED)
    assert all(new[kind] > 0 for kind in EXERCISED_ACTIONS), new
    replays = Counter(e.outcome for e in ledger.operator if e.replay_of == "replay")
    assert replays[REPLAYED] > 0, replays
    assert snapshot.rows_purged()[INSTANCE] > 0


def publish(report: dict[str, Any], capsys: pytest.CaptureFixture[str], artifact: Path) -> None:
    artifact.parent.mkdir(parents=True, exist_ok=True)
    artifact.write_text(json.dumps(report, indent=2) + "\n")
    with capsys.disabled():
        print("\n" + render(report) + f"\n  figures: {artifact.relative_to(ROOT)}")


# ------------------------------------------------- the checker catches what it should
#
# The soak is only as good as its checks: each one is fed a consistent story,
# then the same story with one fault injected, and must name the fault.


def story() -> tuple[Ledger, Snapshot]:
    """A launch with one step and two chunks that completed; a second attempt
    of a failed instance whose step took over the first's counts; an applied
    stop, a rejected one and a replay; one purged instance."""
    ledger = Ledger("story")
    ledger.executions.update({1: 10, 2: 20, 3: 20})
    ledger.steps[5] = StepBirth(10, 1, "read", {})
    ledger.steps[6] = StepBirth(20, 2, "read", {})
    ledger.steps[7] = StepBirth(20, 3, "read", {"read": 3, "committed": 1})
    for kind, row_id, produced in (
        (EXECUTION, 1, [1, 2]),
        (STEP, 5, [1, 2, 3, 4]),
        (EXECUTION, 2, [1, 2]),
        (STEP, 6, [1, 2, 3]),
        (EXECUTION, 3, [1, 2]),
        (STEP, 7, [1, 2]),
    ):
        for version in produced:
            ledger.mutated(kind, row_id, version)
    ledger.chunk(5, {"read": 4, "committed": 1})
    ledger.chunk(5, {"read": 2, "committed": 1})
    ledger.chunk(6, {"read": 3, "committed": 1})
    ledger.chunk(7, {"read": 1, "committed": 1})
    ledger.terminal_rollbacks[(EXECUTION, 2)] += 1
    ledger.stop_seen.add(3)
    ledger.losses.append((LAUNCH_SHARED_KEY, None, "execution_already_active"))
    ledger.calls.append(Call("POST executions/{id}/transition", 409, "stale_version", 0.01))
    stop = f"{OPERATION_PREFIX}1"
    ledger.operator += [
        OperatorEntry(OPERATOR_AUDIT, "STOP", stop, 3, APPLIED),
        OperatorEntry(OPERATOR_AUDIT, "STOP", stop, 3, REPLAYED, None, "replay"),
        OperatorEntry(OPERATOR_AUDIT, "STOP", f"{OPERATION_PREFIX}2", 2, REJECTED, "stale_version"),
        OperatorEntry(
            OPERATOR_AUDIT,
            "ABANDON",
            f"{OPERATION_PREFIX}3",
            9,
            NOT_AUDITED,
            "job_execution_not_found",
        ),
    ]
    ledger.purges.append({"counts": {"job_instances": 1}})

    def run(row_id: int, instance: int, status: str, version: int, **counts: int) -> dict[str, Any]:
        return {
            "id": row_id,
            "job_instance_id": instance,
            "status": status,
            "version": version,
            "counts": {
                n: counts.get(n, 0)
                for n in ("read", "processed", "written", "filtered", "committed", "rolled_back")
            },
        }

    snapshot = Snapshot()
    snapshot.executions = {
        2: run(2, 20, "FAILED", 2, rolled_back=1),
        3: run(3, 20, "STOPPING", 2),
    }
    snapshot.steps = {
        6: run(6, 20, "FAILED", 3, read=3, committed=1),
        7: run(7, 20, "STARTED", 2, read=4, committed=2),
    }
    snapshot.purged[INSTANCE] = {10: {"id": 10, "held": False}}
    snapshot.purged[EXECUTION] = {1: run(1, 10, "COMPLETED", 2)}
    snapshot.purged[STEP] = {5: run(5, 10, "COMPLETED", 4, read=6, committed=2)}
    snapshot.instances = {20: {"held": False}}

    def audit(
        action: str, number: int, outcome: str, code: str | None, execution: int
    ) -> dict[str, Any]:
        return {
            "action": action,
            "operation_id": f"{OPERATION_PREFIX}{number}",
            "outcome": outcome,
            "rejection_code": code,
            "job_execution_id": execution,
            "actor": OPERATOR_NAME,
        }

    snapshot.operator_requests = [
        audit("STOP", 1, "APPLIED", None, 3),
        audit("STOP", 2, "REJECTED", "stale_version", 2),
    ]
    snapshot.retention_records = [
        {
            "action": "APPLY_PURGE",
            "operation_id": f"{PURGE_PREFIX}1:1",
            "job_instance_id": None,
            "actor": "soak-purge",
            "deleted_job_instances": 1,
            "deleted_job_executions": 1,
            "deleted_step_executions": 1,
        }
    ]
    return ledger, snapshot


def violations_of(ledger: Ledger, snapshot: Snapshot) -> list[str]:
    return check(snapshot, ledger, operator_actor=OPERATOR_NAME)


def test_the_checker_accepts_a_consistent_story() -> None:
    assert violations_of(*story()) == []


def test_the_checker_accounts_a_step_resolved_by_a_recovery() -> None:
    """A recovery resolves a step with one write no runtime success recorded; the
    decision's ``resolved_step_ids`` explain it, nothing else does."""
    ledger, snapshot = story()
    snapshot.steps[6]["version"] += 1
    assert violations_of(ledger, snapshot) == [
        "step 6 is at version 4 (FAILED) but the successes recorded on it produced versions "
        "[1, 2, 3]"
    ]
    snapshot.resolved_steps = {6}
    assert violations_of(ledger, snapshot) == []


def lost_update(ledger: Ledger, snapshot: Snapshot) -> None:
    # Two chunk commits both told "you made version 3": one overwrote the other.
    ledger.versions[(STEP, 6)] = [1, 2, 3, 3]


def unacknowledged_write(ledger: Ledger, snapshot: Snapshot) -> None:
    # The row moved once more than any actor was told (e.g. a stop that bumped it).
    snapshot.executions[3]["version"] = 3


def lost_chunk(ledger: Ledger, snapshot: Snapshot) -> None:
    snapshot.steps[7]["counts"]["read"] = 1


def wrong_takeover(ledger: Ledger, snapshot: Snapshot) -> None:
    ledger.steps[7] = StepBirth(20, 3, "read", {})


def stopping_then_completed(ledger: Ledger, snapshot: Snapshot) -> None:
    snapshot.executions[3]["status"] = "COMPLETED"


def replay_audited_twice(ledger: Ledger, snapshot: Snapshot) -> None:
    snapshot.operator_requests.append(dict(snapshot.operator_requests[0]))


def refusal_not_audited(ledger: Ledger, snapshot: Snapshot) -> None:
    del snapshot.operator_requests[1]


def not_found_audited(ledger: Ledger, snapshot: Snapshot) -> None:
    snapshot.operator_requests.append(
        {
            **snapshot.operator_requests[1],
            "action": "ABANDON",
            "operation_id": f"{OPERATION_PREFIX}3",
        }
    )


def purged_while_held(ledger: Ledger, snapshot: Snapshot) -> None:
    snapshot.purged[INSTANCE][10]["held"] = True


def purged_while_running(ledger: Ledger, snapshot: Snapshot) -> None:
    snapshot.purged[EXECUTION][1]["status"] = "STARTED"


def purge_miscounted(ledger: Ledger, snapshot: Snapshot) -> None:
    snapshot.retention_records[0]["deleted_step_executions"] = 2


def server_error(ledger: Ledger, snapshot: Snapshot) -> None:
    ledger.calls.append(Call("POST steps/{id}/checkpoint", 500, "http_error", 0.2))


def transport_error(ledger: Ledger, snapshot: Snapshot) -> None:
    ledger.calls.append(Call("POST steps/{id}/checkpoint", None, "commit_outcome_unknown", 20.0))


def unexplained_refusal(ledger: Ledger, snapshot: Snapshot) -> None:
    # A chunk commit refused while no operator had touched the execution.
    ledger.losses.append((RUNNING, 3, "stale_version"))


def vanished_row(ledger: Ledger, snapshot: Snapshot) -> None:
    del snapshot.steps[7]


@pytest.mark.parametrize(
    ("fault", "named"),
    [
        (lost_update, "step 6 is at version 3"),
        (unacknowledged_write, "execution 3 is at version 3"),
        (lost_chunk, "step 7 counts"),
        (wrong_takeover, "step 7 (read) took over"),
        (stopping_then_completed, "execution 3 saw its stop request yet ended COMPLETED"),
        (replay_audited_twice, "has 2 audit rows"),
        (refusal_not_audited, "has 0 audit rows"),
        (not_found_audited, "has 1 audit rows"),
        (purged_while_held, "instance 10 was purged while held"),
        (purged_while_running, "execution 1 was purged while STARTED"),
        (purge_miscounted, "purge records count"),
        (server_error, "answered 500"),
        (transport_error, "answered None commit_outcome_unknown"),
        (unexplained_refusal, "a runtime was refused stale_version (run, execution 3)"),
        (vanished_row, "step 7 vanished"),
    ],
)
def test_the_checker_names_an_injected_fault(
    fault: Callable[[Ledger, Snapshot], None], named: str
) -> None:
    ledger, snapshot = story()
    fault(ledger, snapshot)
    found = violations_of(ledger, snapshot)
    assert any(named in violation for violation in found), found
