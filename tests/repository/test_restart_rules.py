"""Restart skips what completed (contract §2.3.2, §2.4.5): in a restart
attempt a step takes over its newest earlier row only when that row is FAILED or
STOPPED (or was left active by an attempt that ended); COMPLETED is
``not_restartable`` unless ``allow_start_if_complete`` (then it starts fresh);
ABANDONED and UNKNOWN are ``not_restartable``. Flow nodes decide by their own
attribute; a COMPLETED worker of a partition that never completed starts fresh;
an upgrade edge's mapped source row follows the same rules. On the Django adapter
(both databases) and the in-memory fake; statement counts are the adapter's."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from enum import Enum
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.domain import (
    BatchStatus,
    ExecutionCounts,
    JobExecution,
    LifecycleTransition,
    StepExecution,
)
from oxide_batch.domain.definitions import UpgradeEdge
from oxide_batch.domain.errors import NotRestartable, StepExecutionExists
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.repository import DjangoJobRepository, FixedClock
from tests.conftest import on_postgres
from tests.fakes import FakeJobRepository
from tests.helpers import failure, key, launch, move
from tests.repository.test_flow import Flow, launch_flow
from tests.repository.test_flow import restart as restart_flow
from tests.repository.test_partitions import assign, complete, make_family, plan

pytestmark = pytest.mark.contract
S = BatchStatus
CHECKPOINT = StateEnvelope("test.position", 1, {"position": 4})
CONTEXT = StateEnvelope("test.context", 1, {"files": ["a"]})
CHUNK = ExecutionCounts(read=2, processed=2, written=2, committed=1)
ZERO = ExecutionCounts()


class Outcome(Enum):
    TAKE_OVER = "takes over counts, checkpoint and context"
    FRESH = "starts fresh"
    REFUSED = "not_restartable"


T, F, R = Outcome.TAKE_OVER, Outcome.FRESH, Outcome.REFUSED

# How a step reaches each status; once STARTED it commits one chunk (CHUNK,
# CHECKPOINT, CONTEXT), so what a restart takes over is visible.
PATHS: dict[BatchStatus, tuple[BatchStatus, ...]] = {
    S.STARTING: (),
    S.STARTED: (S.STARTED,),
    S.STOPPING: (S.STARTED, S.STOPPING),
    S.STOPPED: (S.STARTED, S.STOPPED),
    S.FAILED: (S.STARTED, S.FAILED),
    S.COMPLETED: (S.STARTED, S.COMPLETED),
    S.ABANDONED: (S.STARTED, S.FAILED, S.ABANDONED),
    S.UNKNOWN: (S.STARTED, S.UNKNOWN),
}
# The earlier row's status → the restarted step's outcome without and with
# allow_start_if_complete. A STARTING row never committed a chunk: taking it
# over takes nothing (counts zero, no checkpoint).
RULES: dict[BatchStatus, tuple[Outcome, Outcome]] = {
    S.STARTING: (T, T),
    S.STARTED: (T, T),
    S.STOPPING: (T, T),
    S.STOPPED: (T, T),
    S.FAILED: (T, T),
    S.COMPLETED: (R, F),
    S.ABANDONED: (R, R),
    S.UNKNOWN: (R, R),
}
CASES = [
    pytest.param(status, allow, outcomes[allow], id=f"{status.value}-allow={allow}")
    for status, outcomes in RULES.items()
    for allow in (False, True)
]
MESSAGES = {
    S.COMPLETED: "a restart skips it; to run it again from the start, create it with "
    "allow_start_if_complete: true",
    S.ABANDONED: "a restart skips it",
    S.UNKNOWN: "must be resolved first",
}


def test_the_tables_cover_every_status():
    assert set(PATHS) == set(RULES) == set(BatchStatus)


# -- builders --------------------------------------------------------------------------


def run_step(repo: DjangoJobRepository, step: StepExecution, status: BatchStatus) -> StepExecution:
    """Take a STARTING step to ``status`` (one chunk committed once it is STARTED)."""
    with repo.begin() as uow:
        for target in PATHS[status]:
            step = uow.transition_step_execution(
                step.id,
                step.version,
                LifecycleTransition(target, failure=failure() if target is S.FAILED else None),
            )
            if target is S.STARTED:
                step = uow.commit_chunk(
                    step.id, step.version, CHUNK, checkpoint=CHECKPOINT, context=CONTEXT
                )
        uow.commit()
    return step


def next_attempt(
    repo: DjangoJobRepository,
    clock: FixedClock,
    execution: JobExecution,
    *,
    ending: BatchStatus = S.FAILED,
    definition_digest: str | None = None,
) -> JobExecution:
    """End ``execution`` in ``ending`` and start the instance's next attempt."""
    move(repo, execution, ending, clock=clock)
    with repo.begin() as uow:
        attempt = uow.create_job_execution(
            execution.job_instance_id, definition_digest=definition_digest
        )
        uow.commit()
    return move(repo, attempt, S.STARTED, clock=clock)


@dataclass
class Restart:
    """A restart attempt (STARTED) and the first attempt's steps by name."""

    attempt: JobExecution
    earlier: dict[str, StepExecution]


def restart_after(
    repo: DjangoJobRepository,
    clock: FixedClock,
    *,
    ending: BatchStatus = S.FAILED,
    **statuses: BatchStatus,
) -> Restart:
    """A first attempt whose steps (in the given order) end in ``statuses``, ended
    in ``ending``, and the started restart attempt."""
    execution = move(repo, launch(repo, key()), S.STARTED, clock=clock)
    earlier = {}
    for name, status in statuses.items():
        with repo.begin() as uow:
            step = uow.create_step_execution(execution.id, name)
            uow.commit()
        earlier[name] = run_step(repo, step, status)
    return Restart(next_attempt(repo, clock, execution, ending=ending), earlier)


def create(repo: DjangoJobRepository, execution_id: int, name: str, **options: Any) -> Any:
    """Create (and commit) a step of ``execution_id``; the step or the refusal."""
    with repo.begin() as uow:
        try:
            step = uow.create_step_execution(execution_id, name, **options)
        except NotRestartable as refused:
            return refused
        uow.commit()
    return step


def outcome(repo: DjangoJobRepository, created: Any, earlier: StepExecution) -> Outcome:
    """What the restart did: refused, took ``earlier``'s state over, or started fresh."""
    if isinstance(created, NotRestartable):
        return R
    with repo.begin() as uow:
        state = uow.step_state(created.id)
    assert (state.step.status, state.step.version) == (S.STARTING, 0)
    if (state.step.counts, state.checkpoint, state.context) == (
        earlier.counts,
        CHECKPOINT if earlier.counts == CHUNK else None,
        CONTEXT if earlier.counts == CHUNK else None,
    ):
        return T
    assert (state.step.counts, state.checkpoint, state.context) == (ZERO, None, None), state
    return F


def assert_refused(error: Any, status: BatchStatus, step_name: str, earlier_id: int) -> None:
    assert isinstance(error, NotRestartable), error
    assert (error.status, error.step_name, error.step_execution_id) == (
        status,
        step_name,
        earlier_id,
    )
    assert MESSAGES[status] in error.message


def step_ids(repo: Any) -> set[int]:
    """Every stored step's id (the fake's rows or the model's)."""
    if isinstance(repo, FakeJobRepository):
        return set(repo.tables.steps)
    return set(models.StepExecution.objects.values_list("id", flat=True))


def statements(operation: Any) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        operation()
    return [query["sql"] for query in queries.captured_queries]


def verbs(sql: list[str]) -> list[str]:
    return [statement.split()[0] for statement in sql]


# -- a two-step job whose second step failed ------------------------------------------------


@pytest.fixture
def two_steps(repo, clock) -> Restart:
    """``extract`` COMPLETED, then ``load`` FAILED (each after one chunk); the job
    FAILED and was restarted."""
    return restart_after(repo, clock, extract=S.COMPLETED, load=S.FAILED)


def test_a_restart_refuses_the_step_that_completed_naming_the_earlier_row(repo, two_steps):
    refused = create(repo, two_steps.attempt.id, "extract")
    assert_refused(refused, S.COMPLETED, "extract", two_steps.earlier["extract"].id)
    assert refused.code == "not_restartable"
    assert refused.details() == {
        "status": "COMPLETED",
        "step_name": "extract",
        "step_execution_id": two_steps.earlier["extract"].id,
    }


def test_allow_start_if_complete_runs_the_completed_step_again_from_nothing(repo, two_steps):
    again = create(repo, two_steps.attempt.id, "extract", allow_start_if_complete=True)
    assert isinstance(again, StepExecution)
    assert again.counts == ZERO
    with repo.begin() as uow:
        state = uow.step_state(again.id)
    assert (state.step.counts, state.checkpoint, state.context) == (ZERO, None, None)
    assert (state.step.status, state.step.version, state.step.exit_code) == (
        S.STARTING,
        0,
        "UNKNOWN",
    )
    assert state.step.job_execution_id == two_steps.attempt.id
    assert outcome(repo, again, two_steps.earlier["extract"]) is F


def test_the_failed_step_takes_over_its_counts_checkpoint_and_context(repo, two_steps):
    resumed = create(repo, two_steps.attempt.id, "load")
    assert isinstance(resumed, StepExecution)
    with repo.begin() as uow:
        state = uow.step_state(resumed.id)
    assert (state.step.counts, state.checkpoint, state.context) == (CHUNK, CHECKPOINT, CONTEXT)
    assert resumed.id != two_steps.earlier["load"].id


def test_the_failed_step_takes_over_whatever_the_flag_says(repo, two_steps):
    """``allow_start_if_complete`` only concerns a COMPLETED row."""
    resumed = create(repo, two_steps.attempt.id, "load", allow_start_if_complete=True)
    assert outcome(repo, resumed, two_steps.earlier["load"]) is T


def test_a_refusal_leaves_the_unit_of_work_usable(repo, two_steps):
    """The runtime skips the completed step and resumes the failed one: the
    refusal is a domain error, not a poisoned transaction."""
    with repo.begin() as uow:
        with pytest.raises(NotRestartable):
            uow.create_step_execution(two_steps.attempt.id, "extract")
        resumed = uow.create_step_execution(two_steps.attempt.id, "load")
        uow.commit()
    with repo.begin() as uow:
        assert [s.step_name for s in uow.step_executions(two_steps.attempt.id)] == ["load"]
        assert uow.step_state(resumed.id).checkpoint == CHECKPOINT


def test_a_refused_create_inserts_nothing(repo, two_steps):
    before = step_ids(repo)
    with repo.begin() as uow:
        with pytest.raises(NotRestartable):
            uow.create_step_execution(two_steps.attempt.id, "extract")
        uow.commit()
    assert step_ids(repo) == before
    with repo.begin() as uow:
        assert uow.step_executions(two_steps.attempt.id) == []


def test_a_step_refused_once_may_still_be_created_with_the_flag(repo, two_steps):
    assert isinstance(create(repo, two_steps.attempt.id, "extract"), NotRestartable)
    again = create(repo, two_steps.attempt.id, "extract", allow_start_if_complete=True)
    assert isinstance(again, StepExecution)
    # And the rule looks at the newest row of earlier attempts only: in this
    # attempt the name is taken.
    with repo.begin() as uow, pytest.raises(StepExecutionExists):
        uow.create_step_execution(two_steps.attempt.id, "extract", allow_start_if_complete=True)


def test_the_rule_holds_after_a_stopped_attempt_too(repo, clock):
    restart = restart_after(repo, clock, ending=S.STOPPED, extract=S.COMPLETED, load=S.STOPPED)
    assert_refused(
        create(repo, restart.attempt.id, "extract"),
        S.COMPLETED,
        "extract",
        restart.earlier["extract"].id,
    )
    assert outcome(repo, create(repo, restart.attempt.id, "load"), restart.earlier["load"]) is T


# -- every status of the earlier row -------------------------------------------------------


@pytest.mark.parametrize(("status", "allow", "expected"), CASES)
def test_the_earlier_rows_status_decides(repo, clock, status, allow, expected):
    restart = restart_after(repo, clock, work=status)
    earlier = restart.earlier["work"]
    assert earlier.status is status
    before = step_ids(repo)
    created = create(repo, restart.attempt.id, "work", allow_start_if_complete=allow)
    assert outcome(repo, created, earlier) is expected
    if expected is R:
        assert_refused(created, status, "work", earlier.id)
        assert step_ids(repo) == before


@pytest.mark.parametrize("status", [S.ABANDONED, S.UNKNOWN], ids=str)
def test_abandoned_and_unknown_rows_are_refused_with_their_message(repo, clock, status):
    restart = restart_after(repo, clock, work=status)
    refused = create(repo, restart.attempt.id, "work", allow_start_if_complete=True)
    assert_refused(refused, status, "work", restart.earlier["work"].id)
    assert "allow_start_if_complete" not in refused.message


def test_an_unknown_row_says_an_operator_must_resolve_it(repo, clock):
    restart = restart_after(repo, clock, work=S.UNKNOWN)
    refused = create(repo, restart.attempt.id, "work")
    assert "its last commit may or may not have applied" in refused.message
    assert "UNKNOWN_EFFECT" in refused.message


def test_a_row_left_started_by_an_attempt_that_ended_is_taken_over(repo, clock):
    """No operator action can resolve a step of a finished execution: Spring Batch
    re-runs it, from its last commit."""
    restart = restart_after(repo, clock, work=S.STARTED)
    resumed = create(repo, restart.attempt.id, "work")
    with repo.begin() as uow:
        state = uow.step_state(resumed.id)
    assert (state.step.counts, state.checkpoint, state.context) == (CHUNK, CHECKPOINT, CONTEXT)
    # The earlier row stays as it was.
    with repo.begin() as uow:
        assert uow.get_step_execution(restart.earlier["work"].id) == restart.earlier["work"]


def test_an_unknown_step_resolved_by_recovery_is_taken_over(repo, clock):
    """UNKNOWN waits for an operator: recovering the execution resolves its
    unfinished steps to FAILED (contract §2.5.6), which the restart takes over."""
    from oxide_batch.domain import FailureCategory, FailureSummary, RecoveryRequest

    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "work")
        uow.commit()
    step = run_step(repo, step, S.UNKNOWN)
    execution = move(repo, execution, S.UNKNOWN, clock=clock)
    with repo.begin() as uow:
        uow.recover_job_execution(
            execution.id,
            RecoveryRequest.mark_failed(
                expected_version=execution.version,
                reason_code="UNKNOWN_EFFECT",
                operator_reference="operator-1",
                evidence_digest=b"\x01" * 32,
                failure=FailureSummary(FailureCategory.UNKNOWN_COMMIT, 5),
            ),
        )
        attempt = uow.create_job_execution(execution.job_instance_id)
        uow.commit()
    attempt = move(repo, attempt, S.STARTED, clock=clock)
    resumed = create(repo, attempt.id, "work")
    assert isinstance(resumed, StepExecution)
    with repo.begin() as uow:
        assert uow.get_step_execution(step.id).status is S.FAILED
        assert uow.step_state(resumed.id).checkpoint == CHECKPOINT


def test_the_newest_earlier_row_decides_not_an_older_one(repo, clock):
    """Attempt 1 failed the step; attempt 2 completed it (and failed elsewhere):
    attempt 3 skips it, although an older row was FAILED."""
    first = restart_after(repo, clock, work=S.FAILED)
    with repo.begin() as uow:
        second_row = uow.create_step_execution(first.attempt.id, "work")
        uow.commit()
    second_row = run_step(repo, second_row, S.COMPLETED)
    third = next_attempt(repo, clock, first.attempt)
    assert_refused(create(repo, third.id, "work"), S.COMPLETED, "work", second_row.id)


def test_attempts_that_never_ran_the_step_do_not_hide_its_row(repo, clock):
    first = restart_after(repo, clock, work=S.COMPLETED)
    third = next_attempt(repo, clock, first.attempt)  # attempt 2 never ran "work"
    assert_refused(create(repo, third.id, "work"), S.COMPLETED, "work", first.earlier["work"].id)


# -- statements ----------------------------------------------------------------------------


# The earlier row's status → the create's statements: lock the job execution,
# read (and lock) the earlier row, [whether it worked for a partition that never
# completed: only for a COMPLETED row without the flag], insert unless refused.
STATEMENTS = {
    (S.COMPLETED, False): ["SELECT", "SELECT", "SELECT"],
    (S.COMPLETED, True): ["SELECT", "SELECT", "INSERT"],
    (S.ABANDONED, False): ["SELECT", "SELECT"],
    (S.UNKNOWN, False): ["SELECT", "SELECT"],
    (S.FAILED, False): ["SELECT", "SELECT", "INSERT"],
}


@pytest.mark.adapter
@pytest.mark.parametrize(
    ("status", "allow", "expected"),
    [(status, allow, sql) for (status, allow), sql in STATEMENTS.items()],
    ids=[f"{status.value}-allow={allow}" for status, allow in STATEMENTS],
)
def test_the_statements_of_a_restart_create(repo, clock, status, allow, expected):
    restart = restart_after(repo, clock, work=status)
    with repo.begin() as uow:

        def attempt() -> None:
            with contextlib.suppress(NotRestartable):
                uow.create_step_execution(restart.attempt.id, "work", allow_start_if_complete=allow)

        sql = statements(attempt)
    assert verbs(sql) == expected, sql
    assert '"ob_step_execution"' in sql[1].split("WHERE")[0]
    if len(sql) > 2 and sql[2].startswith("SELECT"):
        assert '"ob_step_partition"' in sql[2].split("WHERE")[0]
    if on_postgres():
        assert "FOR NO KEY UPDATE" in sql[0]
        assert "FOR NO KEY UPDATE" in sql[1]


# -- flow steps: the manifest node decides ------------------------------------------------

FLOW_JOB = "flow_job"


def restart_manifest(format_: int = 2) -> dict[str, Any]:
    """``extract`` may start if complete, ``load`` may not (said), ``report`` may
    not (by default)."""
    return {
        "format": format_,
        "job": FLOW_JOB,
        "entry": "extract",
        "nodes": [
            {"id": "extract", "kind": "step", "allow_start_if_complete": True},
            {"id": "load", "kind": "step", "allow_start_if_complete": False},
            {"id": "report", "kind": "step"},
        ],
        "transitions": [
            {"source": "extract", "pattern": "*", "target": {"node": "load"}},
            {"source": "load", "pattern": "*", "target": {"node": "report"}},
            {"source": "report", "pattern": "*", "target": {"terminal": "COMPLETE"}},
        ],
    }


def flow_step(repo: DjangoJobRepository, execution_id: int, node: str, **options: Any) -> Any:
    """Create (and commit) the flow step of ``node`` (step name = node); the step
    or the refusal."""
    with repo.begin() as uow:
        try:
            step = uow.create_flow_step_execution(execution_id, node, node, **options)
        except NotRestartable as refused:
            return refused
        uow.commit()
    return step


def flow_restart(
    repo: DjangoJobRepository, clock: FixedClock, format_: int = 2, **statuses: BatchStatus
) -> tuple[Flow, dict[str, StepExecution]]:
    """A flow attempt whose nodes end in ``statuses``, failed and restarted."""
    flow = launch_flow(repo, clock, restart_manifest(format_))
    earlier = {}
    for node_id, status in statuses.items():
        earlier[node_id] = run_step(repo, flow_step(repo, flow.execution.id, node_id), status)
    restart_flow(repo, clock, flow)
    return flow, earlier


# node → its outcome over a COMPLETED earlier row without and with the request's flag.
NODE_RULES = {
    "extract": (F, F),  # the node allows it: the request cannot refuse it
    "load": (R, R),  # the node forbids it: the request cannot allow it
    "report": (R, R),  # the attribute's default is false
}


@pytest.mark.parametrize("format_", [2, 3], ids=lambda f: f"format-{f}")
@pytest.mark.parametrize(
    ("node_id", "allow", "expected"),
    [(n, allow, outcomes[allow]) for n, outcomes in NODE_RULES.items() for allow in (False, True)],
    ids=[f"{n}-request={allow}" for n in NODE_RULES for allow in (False, True)],
)
def test_the_manifest_node_decides_over_the_request_for_a_completed_flow_step(
    repo, clock, format_, node_id, allow, expected
):
    flow, earlier = flow_restart(
        repo, clock, format_, extract=S.COMPLETED, load=S.COMPLETED, report=S.COMPLETED
    )
    before = step_ids(repo)
    created = flow_step(repo, flow.execution.id, node_id, allow_start_if_complete=allow)
    assert outcome(repo, created, earlier[node_id]) is expected
    if expected is R:
        assert_refused(created, S.COMPLETED, node_id, earlier[node_id].id)
        assert step_ids(repo) == before


@pytest.mark.parametrize(("status", "allow", "expected"), CASES)
def test_a_flow_step_follows_the_status_table(repo, clock, status, allow, expected):
    """``load`` neither allows a start if complete nor lets the request do so:
    the other statuses decide as for any step."""
    flow, earlier = flow_restart(repo, clock, load=status)
    created = flow_step(repo, flow.execution.id, "load", allow_start_if_complete=allow)
    wanted = R if status is S.COMPLETED else expected
    assert outcome(repo, created, earlier["load"]) is wanted


@pytest.mark.parametrize("status", [S.ABANDONED, S.UNKNOWN], ids=str)
def test_a_node_that_allows_a_start_if_complete_still_refuses_abandoned_and_unknown(
    repo, clock, status
):
    flow, earlier = flow_restart(repo, clock, extract=status)
    refused = flow_step(repo, flow.execution.id, "extract")
    assert_refused(refused, status, "extract", earlier["extract"].id)


def test_a_node_the_plan_does_not_name_takes_the_requests_flag(repo, clock):
    flow, _ = flow_restart(repo, clock)
    earlier = run_step(repo, flow_step(repo, flow.execution.id, "adhoc"), S.COMPLETED)
    restart_flow(repo, clock, flow)
    assert_refused(flow_step(repo, flow.execution.id, "adhoc"), S.COMPLETED, "adhoc", earlier.id)
    again = flow_step(repo, flow.execution.id, "adhoc", allow_start_if_complete=True)
    assert outcome(repo, again, earlier) is F


def format_1_attempt(repo: DjangoJobRepository) -> JobExecution:
    with repo.begin() as uow:
        definition = uow.register_definition(
            "import_job", "v1", {"format": 1, "job": "import_job", "step": "work"}
        ).definition
        instance = uow.select_or_create_job_instance(key()).instance
        execution = uow.create_job_execution(instance.id, definition_digest=definition.digest)
        uow.commit()
    return execution


@pytest.mark.parametrize("definition", ["legacy", "format-1"])
def test_a_flow_step_without_a_flow_plan_takes_the_requests_flag(repo, clock, definition):
    first = launch(repo) if definition == "legacy" else format_1_attempt(repo)
    first = move(repo, first, S.STARTED, clock=clock)
    earlier = run_step(repo, flow_step(repo, first.id, "work"), S.COMPLETED)
    attempt = next_attempt(repo, clock, first)
    assert_refused(flow_step(repo, attempt.id, "work"), S.COMPLETED, "work", earlier.id)
    again = flow_step(repo, attempt.id, "work", allow_start_if_complete=True)
    assert outcome(repo, again, earlier) is F


def test_a_flow_step_takes_over_the_newest_row_of_its_node_under_another_name(repo, clock):
    flow, earlier = flow_restart(repo, clock, load=S.COMPLETED)
    with repo.begin() as uow, pytest.raises(NotRestartable) as refused:
        uow.create_flow_step_execution(flow.execution.id, "load-v2", "load")
    assert (refused.value.step_name, refused.value.step_execution_id) == (
        "load-v2",
        earlier["load"].id,
    )


def test_a_repeated_node_in_a_restart_attempt_is_step_execution_exists(repo, clock):
    """The node's newest row is this attempt's own: it is no earlier state to
    skip or take over, the node is repeated (contract §2.3.1)."""
    flow, _ = flow_restart(repo, clock, load=S.FAILED)
    own = run_step(repo, flow_step(repo, flow.execution.id, "load"), S.COMPLETED)
    before = step_ids(repo)
    for allow in (False, True):
        with repo.begin() as uow, pytest.raises(StepExecutionExists) as error:
            uow.create_flow_step_execution(
                flow.execution.id, "load-again", "load", allow_start_if_complete=allow
            )
        assert error.value.job_execution_id == own.job_execution_id
    assert step_ids(repo) == before


# Flow statements: lock the instance, lock the job execution, read the node's
# count and newest row, [the partition read], insert unless refused.
FLOW_STATEMENTS = {
    "extract": ["SELECT", "SELECT", "SELECT", "INSERT"],  # allowed by the node: no partition read
    "load": ["SELECT", "SELECT", "SELECT", "SELECT"],  # refused: nothing inserted
}


@pytest.mark.adapter
@pytest.mark.parametrize(("node_id", "expected"), FLOW_STATEMENTS.items())
def test_the_statements_of_a_restarted_flow_step_over_a_completed_row(
    repo, clock, node_id, expected
):
    flow, _ = flow_restart(repo, clock, extract=S.COMPLETED, load=S.COMPLETED)
    with repo.begin() as uow:

        def attempt() -> None:
            with contextlib.suppress(NotRestartable):
                uow.create_flow_step_execution(flow.execution.id, node_id, node_id)

        sql = statements(attempt)
    assert verbs(sql) == expected, sql
    if expected[-1] == "SELECT":
        assert '"ob_step_partition"' in sql[-1].split("WHERE")[0]


# -- partition workers ---------------------------------------------------------------------


@dataclass
class Workers:
    """A partitioned step's first attempt: worker ``w-done`` COMPLETED with its
    partition ``done`` completed; worker ``w-lost`` COMPLETED but its partition
    ``lost`` never completed (the process died in between); then the restart."""

    attempt: JobExecution
    workers: dict[str, StepExecution]
    partitions: dict[str, Any]


@pytest.fixture
def workers(repo, clock) -> Workers:
    family = make_family(repo, clock, "w-done", "w-lost")
    partitions = plan(repo, family.parent.id, "done", "lost")
    done = assign(repo, partitions["done"], family.workers["w-done"].id)
    lost = assign(repo, partitions["lost"], family.workers["w-lost"].id)
    ran = {name: run_step(repo, step, S.COMPLETED) for name, step in family.workers.items()}
    complete(repo, done, ran["w-done"].id)
    attempt = next_attempt(repo, clock, family.execution)
    with repo.begin() as uow:
        stored = {p.key: p.status for p in uow.step_partition_plan(family.parent.id)}
    assert stored == {"done": S.COMPLETED, "lost": S.STARTED}
    return Workers(attempt, ran, {"done": done, "lost": lost})


def test_a_completed_worker_of_a_partition_that_never_completed_starts_fresh(repo, workers):
    again = create(repo, workers.attempt.id, "w-lost")
    assert outcome(repo, again, workers.workers["w-lost"]) is F


def test_a_completed_worker_of_a_completed_partition_is_not_restartable(repo, workers):
    """Its partition is carried, not rerun (contract §2.4.5): a restart skips its worker."""
    refused = create(repo, workers.attempt.id, "w-done")
    assert_refused(refused, S.COMPLETED, "w-done", workers.workers["w-done"].id)
    again = create(repo, workers.attempt.id, "w-done", allow_start_if_complete=True)
    assert outcome(repo, again, workers.workers["w-done"]) is F


@pytest.mark.adapter
def test_the_partition_check_is_one_read_made_only_when_it_can_matter(repo, workers):
    with repo.begin() as uow:
        rerun = statements(lambda: uow.create_step_execution(workers.attempt.id, "w-lost"))
        allowed = statements(
            lambda: uow.create_step_execution(
                workers.attempt.id, "w-done", allow_start_if_complete=True
            )
        )
    assert verbs(rerun) == ["SELECT", "SELECT", "SELECT", "INSERT"]
    assert '"ob_step_partition"' in rerun[2].split("WHERE")[0]
    assert verbs(allowed) == ["SELECT", "SELECT", "INSERT"]


def test_a_worker_whose_partition_was_carried_through_a_restart_still_starts_fresh(
    repo, clock, workers
):
    """Attempt 2 carried the plan and failed before running ``w-lost``: attempt 3
    finds the same COMPLETED row and the same partition that never completed."""
    third = next_attempt(repo, clock, workers.attempt)
    assert outcome(repo, create(repo, third.id, "w-lost"), workers.workers["w-lost"]) is F
    refused = create(repo, third.id, "w-done")
    assert_refused(refused, S.COMPLETED, "w-done", workers.workers["w-done"].id)


# -- an upgrade edge's mapped source row ---------------------------------------------------


def upgraded_restart(repo, clock, status: BatchStatus) -> tuple[JobExecution, StepExecution]:
    """Attempt 1 under v1 ends step ``import-v1`` in ``status`` and fails; attempt 2
    runs under v2 through an edge mapping ``import-v1`` onto ``import-v2``."""
    with repo.begin() as uow:
        v1, v2 = (
            uow.register_definition(
                "import_job", revision, {"format": 1, "job": "import_job", "step": step}
            ).definition
            for revision, step in (("v1", "import-v1"), ("v2", "import-v2"))
        )
        uow.register_definition_upgrade(
            UpgradeEdge.of(
                job_name="import_job",
                key="v1-to-v2",
                from_digest=v1.digest,
                to_digest=v2.digest,
                step_mapping={"import-v1": "import-v2"},
            )
        )
        instance = uow.select_or_create_job_instance(key()).instance
        first = uow.create_job_execution(instance.id, definition_digest=v1.digest)
        uow.commit()
    first = move(repo, first, S.STARTED, clock=clock)
    with repo.begin() as uow:
        source = uow.create_step_execution(first.id, "import-v1")
        uow.commit()
    source = run_step(repo, source, status)
    return next_attempt(repo, clock, first, definition_digest=v2.digest), source


@pytest.mark.parametrize(("status", "allow", "expected"), CASES)
def test_the_mapped_source_rows_status_decides(repo, clock, status, allow, expected):
    attempt, source = upgraded_restart(repo, clock, status)
    before = step_ids(repo)
    created = create(repo, attempt.id, "import-v2", allow_start_if_complete=allow)
    assert outcome(repo, created, source) is expected
    if expected is R:
        # The refusal names the step being created and the earlier (mapped) row.
        assert_refused(created, status, "import-v2", source.id)
        assert step_ids(repo) == before
