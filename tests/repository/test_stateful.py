"""Stateful property test of the Django job repository against a reference model.

A Hypothesis ``RuleBasedStateMachine`` drives random sequences of repository
operations — instance selection, launch/restart, job and step transitions,
exit-status enrichment, step creation and evidence-based recovery — each in its
own unit of work (committed on success, rolled back on error). A plain-Python
model written here from contract §2.1 (lifecycle table), §2.2 (launch/restart),
§2.3.1 and §2.3.2 (step creation, the counts a restarted step takes over and the
earlier step rows a restart refuses), §2.5.5 and §2.5.6 (repository-level recovery)
predicts every outcome: success or the exact error (class and fields), and the
resulting state (status, version, exit code, timestamps, failure, counts, attempt
chain). Operations on rows that do not exist must report not-found. After every
step an invariant re-reads everything from the repository in a fresh unit of work
and compares it with the model.

The budget is bounded for the suite (SQLite and PostgreSQL); raise it with
``OXIDE_BATCH_HYPOTHESIS_EXAMPLES``.

The model deliberately does not import the domain's rule functions or its
transition table: it has its own literal copy of the table.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from oxide_batch import models
from oxide_batch.domain import (
    BatchStatus,
    ExecutionCounts,
    FailureCategory,
    FailureSummary,
    JobExecution,
    JobInstanceKey,
    JobParameter,
    LifecycleTransition,
    ParameterType,
    RecoveryDisposition,
    RecoveryRequest,
    StepExecution,
)
from oxide_batch.domain.errors import (
    AbandonedInstance,
    CompletedInstance,
    ExecutionAlreadyActive,
    FailedTransitionMissingFailure,
    IllegalTransition,
    InvalidState,
    JobExecutionNotFound,
    JobInstanceNotFound,
    LostWriteUnresolved,
    NotRestartable,
    OxideBatchError,
    RecoveryNotAllowed,
    RestartRequiresNewAttempt,
    StaleVersion,
    StepExecutionExists,
    StepExecutionNotFound,
    VersionAhead,
)
from oxide_batch.repository import DjangoJobRepository, DjangoUnitOfWork, FixedClock

T = TypeVar("T")
R = TypeVar("R", bound="ModelRow")
S = BatchStatus

EXAMPLES = int(os.environ.get("OXIDE_BATCH_HYPOTHESIS_EXAMPLES", "40"))
STEPS_PER_EXAMPLE = 40
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)

# ----------------------------------------------------------------- reference rules
# A literal copy of the contract §2.1 table (✔ cells), independent of the domain's.

MODEL_TABLE: dict[BatchStatus, frozenset[BatchStatus]] = {
    S.STARTING: frozenset({S.STARTED, S.STOPPING, S.FAILED, S.UNKNOWN}),
    S.STARTED: frozenset({S.STOPPING, S.STOPPED, S.FAILED, S.COMPLETED, S.UNKNOWN}),
    S.STOPPING: frozenset({S.STOPPED, S.FAILED, S.UNKNOWN}),
    S.STOPPED: frozenset({S.ABANDONED}),
    S.FAILED: frozenset({S.ABANDONED}),
    S.UNKNOWN: frozenset({S.FAILED, S.ABANDONED}),
    S.COMPLETED: frozenset(),
    S.ABANDONED: frozenset(),
}
MODEL_FINISHED = frozenset({S.STOPPED, S.FAILED, S.COMPLETED, S.ABANDONED})
MODEL_UNRESOLVED = frozenset({S.STARTING, S.STARTED, S.STOPPING, S.UNKNOWN})
MODEL_RESTARTABLE = frozenset({S.STOPPED, S.FAILED})
MODEL_STEP_PARENT = frozenset({S.STARTING, S.STARTED})
# contract §2.3.2: a restart skips (refuses) a step whose newest earlier row is one of these
# (no allow_start_if_complete here); any other earlier row is taken over.
MODEL_STEP_NOT_RESTARTABLE = frozenset({S.COMPLETED, S.ABANDONED, S.UNKNOWN})
NEW_EXIT_CODE = "UNKNOWN"

STEP_NAMES = ("extract", "transform", "load")
EXIT_CODES = ("COMPLETED", "NOOP", "PARTIAL_OUTPUT", "UNKNOWN")
REASON_CODES = ("WORKER_LOST", "UNKNOWN_EFFECT")
OPERATOR = "operator@stateful-test"
MISSING_ID = 2**62  # never allocated by the test database's sequences


@dataclass
class ModelRow:
    """What job and step executions share in the model."""

    id: int
    status: BatchStatus
    version: int
    exit_code: str
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    updated_at: datetime
    failure: FailureSummary | None
    rollbacks: int  # terminal rollbacks applied since creation

    def common(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "version": self.version,
            "exit_code": self.exit_code,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "updated_at": self.updated_at,
            "failure": self.failure,
        }


@dataclass
class ModelDecision:
    execution_version: int
    prior_status: BatchStatus
    resulting_status: BatchStatus
    reason_code: str
    operator_reference: str
    evidence_digest: bytes
    decided_at: datetime
    resolved_step_ids: tuple[int, ...] = ()


@dataclass
class ModelStep(ModelRow):
    job_instance_id: int
    job_execution_id: int
    step_name: str
    base_counts: ExecutionCounts  # taken over from an earlier attempt at creation

    def snapshot(self) -> dict[str, Any]:
        counts = dataclasses.replace(
            self.base_counts, rolled_back=self.base_counts.rolled_back + self.rollbacks
        )
        return {
            **self.common(),
            "counts": counts,
            "job_instance_id": self.job_instance_id,
            "job_execution_id": self.job_execution_id,
            "step_name": self.step_name,
            "node_id": self.step_name,
        }


@dataclass
class ModelExecution(ModelRow):
    job_instance_id: int
    job_name: str
    attempt: int
    restart_of_id: int | None
    steps: dict[str, ModelStep] = field(default_factory=dict)
    decisions: list[ModelDecision] = field(default_factory=list)

    def snapshot(self) -> dict[str, Any]:
        return {
            **self.common(),
            # Job-level counts change only through terminal rollbacks (contract §2.1).
            "counts": ExecutionCounts(rolled_back=self.rollbacks),
            "job_instance_id": self.job_instance_id,
            "job_name": self.job_name,
            "attempt": self.attempt,
            "restart_of_id": self.restart_of_id,
        }


@dataclass
class ModelInstance:
    id: int
    created_at: datetime
    executions: list[int] = field(default_factory=list)  # attempt order


def job_snapshot(execution: JobExecution) -> dict[str, Any]:
    return {
        "id": execution.id,
        "status": execution.status,
        "version": execution.version,
        "exit_code": execution.exit_code,
        "created_at": execution.created_at,
        "started_at": execution.started_at,
        "ended_at": execution.ended_at,
        "updated_at": execution.updated_at,
        "failure": execution.failure,
        "counts": execution.counts,
        "job_instance_id": execution.job_instance_id,
        "job_name": execution.job_name,
        "attempt": execution.attempt,
        "restart_of_id": execution.restart_of_id,
    }


def step_snapshot(step: StepExecution) -> dict[str, Any]:
    return {
        "id": step.id,
        "status": step.status,
        "version": step.version,
        "exit_code": step.exit_code,
        "created_at": step.created_at,
        "started_at": step.started_at,
        "ended_at": step.ended_at,
        "updated_at": step.updated_at,
        "failure": step.failure,
        "counts": step.counts,
        "job_instance_id": step.job_instance_id,
        "job_execution_id": step.job_execution_id,
        "step_name": step.step_name,
        "node_id": step.node_id,
    }


def model_version_error(expected: int, actual: int) -> OxideBatchError:
    """A version the row moved past is a conflict; one it never reached, a lost
    write (``version_ahead``)."""
    if expected > actual:
        return VersionAhead(expected=expected, actual=actual)
    return StaleVersion(expected=expected, actual=actual)


def model_transition_error(
    row: ModelRow, expected_version: int, transition: LifecycleTransition
) -> OxideBatchError | None:
    """contract §2.1 check order: version, restart-in-place, table, missing failure."""
    target = transition.target
    if expected_version != row.version:
        return model_version_error(expected_version, row.version)
    if target is S.STARTING and row.status in MODEL_RESTARTABLE:
        return RestartRequiresNewAttempt(from_status=row.status)
    if target not in MODEL_TABLE[row.status]:
        return IllegalTransition(from_status=row.status, to_status=target)
    if target is S.FAILED and transition.failure is None and row.failure is None:
        return FailedTransitionMissingFailure()
    return None


def model_apply_transition(row: ModelRow, transition: LifecycleTransition, now: datetime) -> None:
    target = transition.target
    row.status = target
    row.version += 1
    if target is S.STARTED:
        row.started_at = now
    # A finished status keeps the first end time; anything else has none.
    row.ended_at = (row.ended_at or now) if target in MODEL_FINISHED else None
    if transition.failure is not None:
        row.failure = transition.failure
    if transition.terminal_rollback:
        row.rollbacks += 1
    row.updated_at = now


def model_enrich_error(row: ModelRow, expected_version: int) -> OxideBatchError | None:
    if expected_version != row.version:
        return model_version_error(expected_version, row.version)
    return None


def model_apply_enrich(row: ModelRow, exit_code: str, now: datetime) -> None:
    row.exit_code = exit_code
    row.version += 1
    row.updated_at = now


# -------------------------------------------------------------------- strategies

FAILURES = st.builds(
    FailureSummary,
    st.sampled_from([FailureCategory.USER_COMPONENT, FailureCategory.UNKNOWN_COMMIT]),
    st.integers(1, 3),
)
OPTIONAL_FAILURES = st.one_of(st.none(), FAILURES)
# Usually the current version; sometimes one that is stale (behind or ahead).
VERSION_SKEWS = st.sampled_from([0] * 9 + [-1, 1, 2])


def expected_version(current: int, skew: int) -> int:
    candidate = current + skew
    return candidate if candidate >= 0 else current + 1


def transitions(current: BatchStatus) -> st.SearchStrategy[LifecycleTransition]:
    """Mostly a target the table allows from ``current`` (to reach deep states), else any
    status (STARTING included)."""
    targets = st.sampled_from(sorted(MODEL_TABLE[current]) * 3 + list(BatchStatus))
    return st.builds(
        LifecycleTransition,
        targets,
        failure=OPTIONAL_FAILURES,
        terminal_rollback=st.booleans(),
    )


# ----------------------------------------------------------------- state machine


class RepositoryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FixedClock(EPOCH)
        self.repo = DjangoJobRepository(self.clock)
        # Unique job names keep rows of earlier examples (same test transaction) apart.
        suffix = uuid.uuid4().hex
        self.keys = (
            JobInstanceKey.of(f"stateful_{suffix}", [JobParameter("slot", ParameterType.I64, 0)]),
            JobInstanceKey.of(f"stateful_{suffix}", [JobParameter("slot", ParameterType.I64, 1)]),
            JobInstanceKey.of(f"stateful_other_{suffix}"),
        )
        self.instances: dict[int, ModelInstance] = {}  # key slot -> instance
        self.executions: dict[int, ModelExecution] = {}
        self.steps: dict[int, ModelStep] = {}
        # Rows a recovery resolved: the runtime is fenced from them (contract §2.5.6).
        self.fenced: set[tuple[str, int]] = set()
        # Executions a ``version_ahead`` marked with a lost write (contract §2.5.14):
        # nobody resolves them here, so their instance never runs again.
        self.lost_writes: set[int] = set()
        self.reselections = 0

    # -- helpers -------------------------------------------------------------------

    def run_unit(self, work: Callable[[DjangoUnitOfWork], T]) -> tuple[T | None, Any]:
        """One unit of work: committed on success, rolled back on an error."""
        try:
            with self.repo.begin() as uow:
                result = work(uow)
                uow.commit()
        except OxideBatchError as error:
            if isinstance(error, VersionAhead) and error.job_execution_id is not None:
                self.lost_writes.add(error.job_execution_id)
            return None, error
        return result, None

    @staticmethod
    def check_outcome(
        operation: str, expected: OxideBatchError | None, result: Any, error: Any
    ) -> None:
        if expected is None:
            assert error is None, f"{operation}: model expects success, repository raised {error!r}"
            return
        assert error is not None, (
            f"{operation}: model expects {expected!r}, repository succeeded with {result!r}"
        )
        assert type(error) is type(expected), f"{operation}: expected {expected!r}, got {error!r}"
        # The model states the required fields; optional ones it leaves unset
        # (guidance such as a hint or an activity time) are the repository's to add.
        found = error.details()
        wanted = expected.details()
        assert {name: found.get(name) for name in wanted} == wanted, (
            f"{operation}: {error!r} != {expected!r}"
        )

    @staticmethod
    def pick(data: st.DataObject, rows: dict[int, R], label: str) -> R:
        """Any row, but half the time an unresolved one (where most operations succeed)."""
        every = sorted(rows)
        unresolved = [id_ for id_ in every if rows[id_].status in MODEL_UNRESOLVED]
        choices = st.sampled_from(every)
        if unresolved:
            choices = st.one_of(choices, st.sampled_from(unresolved))
        return rows[data.draw(choices, label=label)]

    def restart_source(self, parent: ModelExecution, step_name: str) -> ModelStep | None:
        """contract §2.3.2: the newest row of the same step across all earlier attempts
        of its instance (no definitions or upgrade edges are used here), whose counts
        a new step takes over — unless its status refuses it (contract §2.3.2,
        ``MODEL_STEP_NOT_RESTARTABLE``); none: the step starts from zero."""
        instance = next(i for i in self.instances.values() if i.id == parent.job_instance_id)
        earlier = [
            self.executions[other].steps[step_name]
            for other in instance.executions
            if other != parent.id and step_name in self.executions[other].steps
        ]
        return max(earlier, key=lambda step: step.id, default=None)

    # -- rules -------------------------------------------------------------------

    @initialize(slots=st.sets(st.integers(0, 2)))
    def seed_instances(self, slots: set[int]) -> None:
        """Start with some instances so runs reach launches sooner (maybe none)."""
        for slot in sorted(slots):
            self.select_or_create_job_instance(slot)

    @rule(milliseconds=st.integers(0, 5000))
    def advance_clock(self, milliseconds: int) -> None:
        self.clock.advance(timedelta(milliseconds=milliseconds))

    # Re-selecting an existing key is checked a few times per run, not a third of it.
    @precondition(lambda self: len(self.instances) < len(self.keys) or self.reselections < 3)
    @rule(slot=st.integers(0, 2))
    def select_or_create_job_instance(self, slot: int) -> None:
        key = self.keys[slot]
        now = self.clock.now()
        selection, error = self.run_unit(lambda uow: uow.select_or_create_job_instance(key))
        self.check_outcome("select_or_create_job_instance", None, selection, error)
        assert selection is not None
        known = self.instances.get(slot)
        if known is None:
            assert selection.created, "a new key must create its instance"
            assert selection.instance.id not in {i.id for i in self.instances.values()}
            known = self.instances[slot] = ModelInstance(selection.instance.id, now)
        else:
            self.reselections += 1
            assert not selection.created, "an existing key must select its instance"
            assert selection.instance.id == known.id
        assert selection.instance.created_at == known.created_at
        assert selection.instance.key.job_name == key.job_name
        assert selection.instance.key.digest == key.digest

    @precondition(lambda self: self.instances)
    @rule(data=st.data())
    def create_job_execution(self, data: st.DataObject) -> None:
        slot = data.draw(st.sampled_from(sorted(self.instances)), label="instance slot")
        instance = self.instances[slot]
        now = self.clock.now()
        latest = self.executions[instance.executions[-1]] if instance.executions else None
        expected: OxideBatchError | None = None
        attempt, restart_of_id = 1, None
        if latest is None:
            pass
        elif latest.status is S.COMPLETED:
            expected = CompletedInstance(id=instance.id)
        elif latest.status is S.ABANDONED:
            expected = AbandonedInstance(id=instance.id)
        elif latest.status in MODEL_RESTARTABLE:
            attempt, restart_of_id = latest.attempt + 1, latest.id
        else:
            expected = ExecutionAlreadyActive(
                instance_id=instance.id, execution_id=latest.id, status=latest.status
            )
        marked = sorted(self.lost_writes.intersection(instance.executions))
        if expected is None and marked:
            expected = LostWriteUnresolved(instance_id=instance.id, execution_id=marked[0])
        execution, error = self.run_unit(lambda uow: uow.create_job_execution(instance.id))
        self.check_outcome("create_job_execution", expected, execution, error)
        if expected is not None:
            return
        assert execution is not None
        assert execution.id not in self.executions
        row = ModelExecution(
            id=execution.id,
            status=S.STARTING,
            version=0,
            exit_code=NEW_EXIT_CODE,
            created_at=now,
            started_at=None,
            ended_at=None,
            updated_at=now,
            failure=None,
            rollbacks=0,
            job_instance_id=instance.id,
            job_name=self.keys[slot].job_name,
            attempt=attempt,
            restart_of_id=restart_of_id,
        )
        self.executions[row.id] = row
        instance.executions.append(row.id)
        assert job_snapshot(execution) == row.snapshot()

    @precondition(lambda self: self.executions)
    @rule(data=st.data())
    def transition_job_execution(self, data: st.DataObject) -> None:
        row = self.pick(data, self.executions, "job")
        transition = data.draw(transitions(row.status), label="transition")
        version = expected_version(row.version, data.draw(VERSION_SKEWS, label="version skew"))
        now = self.clock.now()
        expected = model_transition_error(row, version, transition)
        execution, error = self.run_unit(
            lambda uow: uow.transition_job_execution(row.id, version, transition)
        )
        self.check_outcome("transition_job_execution", expected, execution, error)
        if expected is None:
            assert execution is not None
            model_apply_transition(row, transition, now)
            assert job_snapshot(execution) == row.snapshot()

    @precondition(lambda self: self.executions)
    @rule(data=st.data())
    def enrich_job_exit_status(self, data: st.DataObject) -> None:
        row = self.pick(data, self.executions, "job")
        exit_code = data.draw(st.sampled_from(EXIT_CODES), label="exit code")
        version = expected_version(row.version, data.draw(VERSION_SKEWS, label="version skew"))
        now = self.clock.now()
        expected = model_enrich_error(row, version)
        if expected is None and ("job", row.id) in self.fenced:
            expected = InvalidState(id=row.id, status=row.status)
        execution, error = self.run_unit(
            lambda uow: uow.enrich_job_exit_status(row.id, version, exit_code)
        )
        self.check_outcome("enrich_job_exit_status", expected, execution, error)
        if expected is None:
            assert execution is not None
            model_apply_enrich(row, exit_code, now)
            assert job_snapshot(execution) == row.snapshot()

    @precondition(lambda self: self.executions)
    @rule(data=st.data())
    def create_step_execution(self, data: st.DataObject) -> None:
        parent = self.pick(data, self.executions, "job")
        name = data.draw(st.sampled_from(STEP_NAMES), label="step name")
        now = self.clock.now()
        expected: OxideBatchError | None = None
        earlier = self.restart_source(parent, name)
        if parent.status not in MODEL_STEP_PARENT:
            expected = InvalidState(id=parent.id, status=parent.status)
        elif earlier is not None and earlier.status in MODEL_STEP_NOT_RESTARTABLE:
            expected = NotRestartable(
                status=earlier.status, step_name=name, step_execution_id=earlier.id
            )
        elif name in parent.steps:
            expected = StepExecutionExists(job_execution_id=parent.id, step_name=name)
        base_counts = ExecutionCounts() if earlier is None else earlier.snapshot()["counts"]
        step, error = self.run_unit(lambda uow: uow.create_step_execution(parent.id, name))
        self.check_outcome("create_step_execution", expected, step, error)
        if expected is not None:
            return
        assert step is not None
        assert step.id not in self.steps
        row = ModelStep(
            id=step.id,
            status=S.STARTING,
            version=0,
            exit_code=NEW_EXIT_CODE,
            created_at=now,
            started_at=None,
            ended_at=None,
            updated_at=now,
            failure=None,
            rollbacks=0,
            job_instance_id=parent.job_instance_id,
            job_execution_id=parent.id,
            step_name=name,
            base_counts=base_counts,
        )
        parent.steps[name] = row
        self.steps[row.id] = row
        assert step_snapshot(step) == row.snapshot()

    @precondition(lambda self: self.steps)
    @rule(data=st.data())
    def transition_step_execution(self, data: st.DataObject) -> None:
        row = self.pick(data, self.steps, "step")
        transition = data.draw(transitions(row.status), label="transition")
        version = expected_version(row.version, data.draw(VERSION_SKEWS, label="version skew"))
        now = self.clock.now()
        expected = model_transition_error(row, version, transition)
        if expected is None and ("step", row.id) in self.fenced:
            expected = IllegalTransition(from_status=row.status, to_status=transition.target)
        step, error = self.run_unit(
            lambda uow: uow.transition_step_execution(row.id, version, transition)
        )
        self.check_outcome("transition_step_execution", expected, step, error)
        if expected is None:
            assert step is not None
            model_apply_transition(row, transition, now)
            assert step_snapshot(step) == row.snapshot()

    @precondition(lambda self: self.steps)
    @rule(data=st.data())
    def enrich_step_exit_status(self, data: st.DataObject) -> None:
        row = self.pick(data, self.steps, "step")
        exit_code = data.draw(st.sampled_from(EXIT_CODES), label="exit code")
        version = expected_version(row.version, data.draw(VERSION_SKEWS, label="version skew"))
        now = self.clock.now()
        expected = model_enrich_error(row, version)
        if expected is None and ("step", row.id) in self.fenced:
            expected = InvalidState(id=row.id, status=row.status)
        step, error = self.run_unit(
            lambda uow: uow.enrich_step_exit_status(row.id, version, exit_code)
        )
        self.check_outcome("enrich_step_exit_status", expected, step, error)
        if expected is None:
            assert step is not None
            model_apply_enrich(row, exit_code, now)
            assert step_snapshot(step) == row.snapshot()

    @precondition(lambda self: self.executions)
    @rule(data=st.data())
    def recover_job_execution(self, data: st.DataObject) -> None:
        row = self.pick(data, self.executions, "job")
        disposition = data.draw(st.sampled_from(list(RecoveryDisposition)), label="disposition")
        version = expected_version(row.version, data.draw(VERSION_SKEWS, label="version skew"))
        reason = data.draw(st.sampled_from(REASON_CODES), label="reason code")
        digest = data.draw(st.binary(min_size=32, max_size=32), label="evidence digest")
        failure: FailureSummary | None = None
        if disposition is RecoveryDisposition.MARK_FAILED:
            failure = data.draw(FAILURES, label="failure")
            request = RecoveryRequest.mark_failed(
                expected_version=version,
                reason_code=reason,
                operator_reference=OPERATOR,
                evidence_digest=digest,
                failure=failure,
            )
        else:
            request = RecoveryRequest.abandon(
                expected_version=version,
                reason_code=reason,
                operator_reference=OPERATOR,
                evidence_digest=digest,
            )
        now = self.clock.now()
        expected: OxideBatchError | None = None
        if version != row.version:
            expected = model_version_error(version, row.version)
        elif row.status not in MODEL_UNRESOLVED:
            expected = RecoveryNotAllowed(id=row.id, status=row.status)
        result, error = self.run_unit(lambda uow: uow.recover_job_execution(row.id, request))
        self.check_outcome("recover_job_execution", expected, result, error)
        if expected is not None:
            return
        assert result is not None
        prior_status, prior_version = row.status, row.version
        resulting = S.FAILED if disposition is RecoveryDisposition.MARK_FAILED else S.ABANDONED
        # Exit code and counts stay; the end time is the decision time; version + 1.
        row.status = resulting
        row.version += 1
        row.ended_at = now
        row.updated_at = now
        if failure is not None:
            row.failure = failure
        # contract §2.5.6: every unfinished step is resolved to FAILED with the recovery's
        # failure, ended at the decision time, version + 1.
        resolved = sorted(
            (step for step in row.steps.values() if step.status in MODEL_UNRESOLVED),
            key=lambda step: step.id,
        )
        self.fenced.add(("job", row.id))
        self.fenced.update(("step", step.id) for step in resolved)
        for step in resolved:
            step.status = S.FAILED
            step.version += 1
            step.ended_at = now
            step.updated_at = now
            step.failure = request.steps_failure
        decision = ModelDecision(
            execution_version=prior_version,
            prior_status=prior_status,
            resulting_status=resulting,
            reason_code=reason,
            operator_reference=OPERATOR,
            evidence_digest=digest,
            decided_at=now,
            resolved_step_ids=tuple(step.id for step in resolved),
        )
        row.decisions.append(decision)
        assert job_snapshot(result.execution) == row.snapshot()
        assert result.decision.job_execution_id == row.id
        assert decision_snapshot(result.decision) == dataclasses.asdict(decision)

    @precondition(lambda self: self.executions)
    @rule(
        operation=st.sampled_from(
            [
                "create_job_execution",
                "transition_job_execution",
                "enrich_job_exit_status",
                "recover_job_execution",
                "create_step_execution",
                "transition_step_execution",
                "enrich_step_exit_status",
            ]
        )
    )
    def operate_on_missing_row(self, operation: str) -> None:
        """A row that does not exist is reported as not found, whatever the operation."""
        started = LifecycleTransition(S.STARTED)
        request = RecoveryRequest.abandon(
            expected_version=0,
            reason_code="WORKER_LOST",
            operator_reference=OPERATOR,
            evidence_digest=bytes(32),
        )
        calls: dict[str, tuple[Callable[[DjangoUnitOfWork], Any], OxideBatchError]] = {
            "create_job_execution": (
                lambda uow: uow.create_job_execution(MISSING_ID),
                JobInstanceNotFound(id=MISSING_ID),
            ),
            "transition_job_execution": (
                lambda uow: uow.transition_job_execution(MISSING_ID, 0, started),
                JobExecutionNotFound(id=MISSING_ID),
            ),
            "enrich_job_exit_status": (
                lambda uow: uow.enrich_job_exit_status(MISSING_ID, 0, "NOOP"),
                JobExecutionNotFound(id=MISSING_ID),
            ),
            "recover_job_execution": (
                lambda uow: uow.recover_job_execution(MISSING_ID, request),
                JobExecutionNotFound(id=MISSING_ID),
            ),
            "create_step_execution": (
                lambda uow: uow.create_step_execution(MISSING_ID, STEP_NAMES[0]),
                JobExecutionNotFound(id=MISSING_ID),
            ),
            "transition_step_execution": (
                lambda uow: uow.transition_step_execution(MISSING_ID, 0, started),
                StepExecutionNotFound(id=MISSING_ID),
            ),
            "enrich_step_exit_status": (
                lambda uow: uow.enrich_step_exit_status(MISSING_ID, 0, "NOOP"),
                StepExecutionNotFound(id=MISSING_ID),
            ),
        }
        work, expected = calls[operation]
        result, error = self.run_unit(work)
        self.check_outcome(operation, expected, result, error)

    # -- invariant ---------------------------------------------------------------

    @invariant()
    def repository_matches_model(self) -> None:
        with self.repo.begin() as uow:
            for slot, key in enumerate(self.keys):
                instance = self.instances.get(slot)
                found = uow.find_job_instance(key)
                if instance is None:
                    assert found is None, f"slot {slot} must not exist (rolled back or unused)"
                    continue
                assert found is not None
                assert (found.id, found.created_at) == (instance.id, instance.created_at)
                executions = uow.job_executions(instance.id)
                assert [e.id for e in executions] == instance.executions
                self._check_attempt_chain(executions)
                for execution in executions:
                    row = self.executions[execution.id]
                    assert job_snapshot(execution) == row.snapshot()
                    steps = uow.step_executions(execution.id)
                    assert [s.id for s in steps] == [s.id for s in row.steps.values()]
                    for step in steps:
                        assert step_snapshot(step) == row.steps[step.step_name].snapshot()
                    decision = uow.recovery_decision(execution.id)
                    if row.decisions:
                        assert decision is not None
                        assert decision_snapshot(decision) == dataclasses.asdict(row.decisions[-1])
                    else:
                        assert decision is None
                    decisions = models.RecoveryDecision.objects.filter(
                        job_execution_id=execution.id
                    ).count()
                    assert decisions == len(row.decisions) <= 1

    @staticmethod
    def _check_attempt_chain(executions: list[JobExecution]) -> None:
        """Attempts 1..n, each restarting the previous one; only the latest unresolved."""
        assert [e.attempt for e in executions] == list(range(1, len(executions) + 1))
        assert [e.id for e in executions] == sorted(e.id for e in executions)
        for previous, current in itertools.pairwise(executions):
            assert current.restart_of_id == previous.id
            assert current.created_at >= (previous.ended_at or previous.created_at)
        if executions:
            assert executions[0].restart_of_id is None
        # contract §2.2.5: without a digest every attempt keeps the first attempt's definition.
        assert len({e.definition_id for e in executions}) <= 1
        assert all(e.upgrade_id is None for e in executions)
        unresolved = [e for e in executions if e.status in MODEL_UNRESOLVED]
        assert len(unresolved) <= 1, "at most one unresolved execution per instance"
        if unresolved:
            assert unresolved[0] is executions[-1], "only the latest attempt may be unresolved"


def decision_snapshot(decision: Any) -> dict[str, Any]:
    return {
        "execution_version": decision.execution_version,
        "prior_status": decision.prior_status,
        "resulting_status": decision.resulting_status,
        "reason_code": decision.reason_code,
        "operator_reference": decision.operator_reference,
        "evidence_digest": decision.evidence_digest,
        "decided_at": decision.decided_at,
        "resolved_step_ids": decision.resolved_step_ids,
    }


@pytest.mark.django_db
def test_repository_follows_reference_model() -> None:
    run_state_machine_as_test(
        RepositoryMachine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS_PER_EXAMPLE,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
