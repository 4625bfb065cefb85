"""A runtime thread of the soak: whole job lifecycles over HTTP.

Launch (select-or-create + new attempt) or restart, claim ownership (most of
the time), start, steps with chunk commits and a control observation at every
chunk boundary, then COMPLETED, FAILED, a stop (→ STOPPING → STOPPED), or a
crash: the lifecycle is dropped mid-way (STARTED, recoverable once stale) or
reported as an UNKNOWN commit (recoverable at once). Every success is written
to the ledger with the version it produced; a refusal ends the lifecycle as a
lost race, counted by its code.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from oxide_batch.client import ApiError, Execution, Step
from oxide_batch.domain.errors import OxideBatchError
from oxide_batch.domain.execution import ExecutionCounts, FailureSummary
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.status import BatchStatus, FailureCategory
from tests.soak.clients import MeteredRuntime, error_code
from tests.soak.ledger import (
    EXECUTION,
    LAUNCH_OWN_KEY,
    LAUNCH_SHARED_KEY,
    RESTART,
    RUNNING,
    STEP,
    Ledger,
    StepBirth,
)

S = BatchStatus
T = TypeVar("T")
JOBS = ("soak_import", "soak_export", "soak_report")
STEP_NAMES = ("read", "transform", "write")
SHARED_KEYS = 4  # per job: keys every runtime thread launches now and then
ENDINGS = ("complete", "fail", "crash", "unknown")
ENDING_WEIGHTS = (70, 14, 7, 9)


class DeadlineReached(Exception):
    """The run is over: stop between two calls."""


class Lost(Exception):
    """A race lost (or a refusal): this lifecycle cannot go on."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class RestartPool:
    """FAILED/STOPPED instances any runtime thread may restart later."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._instances: list[int] = []

    def put(self, instance_id: int) -> None:
        with self._lock:
            self._instances.append(instance_id)

    def take(self, rng: random.Random) -> int | None:
        with self._lock:
            if not self._instances:
                return None
            return self._instances.pop(rng.randrange(len(self._instances)))


class RuntimeActor:
    def __init__(
        self,
        index: int,
        client: MeteredRuntime,
        ledger: Ledger,
        *,
        deadline: float,
        pool: RestartPool,
        seed: int,
    ) -> None:
        self.index = index
        self.client = client
        self.ledger = ledger
        self.deadline = deadline
        self.pool = pool
        self.rng = random.Random(seed)
        self.sequence = 0
        self.next_restart: int | None = None
        self.phase: str = LAUNCH_OWN_KEY
        self.current: int | None = None

    def run(self) -> None:
        while time.monotonic() < self.deadline:
            self.phase, self.current = LAUNCH_OWN_KEY, None
            try:
                outcome = self.lifecycle()
            except DeadlineReached:
                outcome = "interrupted by the deadline"
            except Lost as lost:
                outcome = f"lost: {lost.code}"
                self.ledger.losses.append((self.phase, self.current, lost.code))
            self.ledger.lifecycles[outcome] += 1

    # -- one lifecycle ----------------------------------------------------------------

    def lifecycle(self) -> str:
        execution = self.begin()
        token = secrets.token_bytes(16)
        if self.rng.random() < 0.75:
            # A claim records evidence and checks the version; it bumps nothing.
            execution = self._do(self.client.claim, execution, execution.version, token)
        execution = self.transition(execution, S.STARTED)
        ending = self.rng.choices(ENDINGS, ENDING_WEIGHTS)[0]
        step_count = self.rng.randint(1, len(STEP_NAMES))
        crash_at = self.rng.randrange(step_count)
        for position, name in enumerate(STEP_NAMES[:step_count]):
            try:
                created = self.create_step(execution, name)
            except Lost as lost:
                if lost.code != "not_restartable" or execution.attempt == 1:
                    raise
                # It COMPLETED in an earlier attempt: a restart skips it (contract §2.3.2).
                self.ledger.notes["completed steps a restart skipped"] += 1
                continue
            step = self.transition_step(created, S.STARTED)
            for _ in range(self.rng.randint(2, 5)):
                execution, stopping = self.observe(execution, token)
                if stopping:
                    return self.stop(execution, step)
                step = self.commit(step)
            if ending in ("crash", "unknown") and position == crash_at:
                return self.crash(ending, execution, step)
            if ending == "fail" and position == step_count - 1:
                self.fail_step(step)
                return self.finish(execution, S.FAILED)
            step = self.transition_step(step, S.COMPLETED)
        execution, stopping = self.observe(execution, token)
        if stopping:
            return self.stop(execution, None)
        return self.finish(execution, S.COMPLETED)

    def begin(self) -> Execution:
        """A new attempt: a restart of a FAILED/STOPPED instance, or a launch."""
        instance_id = self.next_restart
        self.next_restart = None
        if instance_id is None and self.rng.random() < 0.25:
            instance_id = self.pool.take(self.rng)
        if instance_id is not None:
            self.phase = RESTART
        else:
            job = self.rng.choice(JOBS)
            self.sequence += 1
            if self.rng.random() < 0.2:
                self.phase = LAUNCH_SHARED_KEY
                parameters: dict[str, Any] = {"shared": self.rng.randrange(SHARED_KEYS)}
            else:
                parameters = {"runner": self.index, "run": self.sequence}
            instance, _ = self._do(self.client.select_or_create_instance, job, parameters)
            instance_id = instance.id
        execution = self._do(self.client.create_execution, instance_id)
        self.phase, self.current = RUNNING, execution.id
        self.ledger.executions[execution.id] = execution.job_instance_id
        if execution.attempt > 1:
            self.ledger.notes["restart attempts launched"] += 1
        if (execution.status, execution.version) != (S.STARTING, 0):
            self.ledger.anomaly(f"new attempt {execution.id} is {execution.status}")
        return execution

    def observe(self, execution: Execution, token: bytes) -> tuple[Execution, bool]:
        """The chunk-boundary control call; ``True`` when a stop is to be honoured
        (the execution returned is then STOPPING)."""
        control = self._do(self.client.observe_control, execution, token)
        seen = control.execution
        if seen.status is S.STOPPING and execution.status is not S.STOPPING:
            # The owner's observation moved it (version + 1): only this thread can.
            self.ledger.mutated(EXECUTION, seen.id, seen.version)
        if control.stop_requested:
            self.ledger.stop_seen.add(seen.id)
        if seen.status not in (S.STARTED, S.STOPPING):
            raise Lost(f"preempted ({seen.status.value})")  # an operator resolved it
        if not control.stop_requested:
            return seen, False
        if seen.status is S.STARTED:
            # No ownership recorded for this runtime: it honours the stop itself.
            seen = self.transition(seen, S.STOPPING)
        return seen, True

    def stop(self, execution: Execution, step: Step | None) -> str:
        if step is not None:
            self.transition_step(step, S.STOPPED)
        if self.rng.random() < 0.3 and self._completes_while_stopping(execution):
            return "completed while STOPPING (must never happen)"
        self.restartable(self.transition(execution, S.STOPPED))
        return "stopped"

    def _completes_while_stopping(self, execution: Execution) -> bool:
        """A runtime that ignores the stop: STOPPING → COMPLETED must be refused."""
        try:
            completed = self._call(
                self.client.transition, execution, execution.version, S.COMPLETED
            )
        except Lost as lost:
            if lost.code != "illegal_transition":
                raise
            return False
        self.ledger.mutated(EXECUTION, completed.id, completed.version)
        self.ledger.anomaly(f"execution {completed.id} went STOPPING → COMPLETED")
        return True

    def crash(self, ending: str, execution: Execution, step: Step) -> str:
        if ending == "crash":
            return "crashed (left STARTED)"
        if self.rng.random() < 0.5:
            self.transition_step(step, S.UNKNOWN)
        self.transition(execution, S.UNKNOWN, failure=self._failure(FailureCategory.UNKNOWN_COMMIT))
        return "crashed (UNKNOWN commit)"

    def fail_step(self, step: Step) -> None:
        self.transition_step(
            step,
            S.FAILED,
            failure=self._failure(FailureCategory.USER_COMPONENT),
            terminal_rollback=self.rng.random() < 0.5,
        )

    def finish(self, execution: Execution, status: BatchStatus) -> str:
        if self.rng.random() < 0.4:
            execution = self._mutate(
                EXECUTION,
                self.client.exit_status,
                execution,
                execution.version,
                "COMPLETED" if status is S.COMPLETED else "FAILED_SOAK",
            )
        if status is S.COMPLETED:
            self.transition(execution, S.COMPLETED)
            return "completed"
        failed = self.transition(
            execution,
            S.FAILED,
            failure=self._failure(FailureCategory.USER_COMPONENT),
            terminal_rollback=self.rng.random() < 0.5,
        )
        self.restartable(failed)
        return "failed"

    def restartable(self, execution: Execution) -> None:
        roll = self.rng.random()
        if roll < 0.35:
            self.next_restart = execution.job_instance_id
        elif roll < 0.7:
            self.pool.put(execution.job_instance_id)

    # -- recorded mutations -----------------------------------------------------------

    def transition(self, execution: Execution, status: BatchStatus, **options: Any) -> Execution:
        result = self._mutate(
            EXECUTION, self.client.transition, execution, execution.version, status, **options
        )
        if options.get("terminal_rollback"):
            self.ledger.terminal_rollbacks[(EXECUTION, result.id)] += 1
        return result

    def transition_step(self, step: Step, status: BatchStatus, **options: Any) -> Step:
        result = self._mutate(
            STEP, self.client.transition_step, step, step.version, status, **options
        )
        if options.get("terminal_rollback"):
            self.ledger.terminal_rollbacks[(STEP, result.id)] += 1
        return result

    def create_step(self, execution: Execution, name: str) -> Step:
        step = self._do(self.client.create_step, execution, name)
        self.ledger.steps[step.id] = StepBirth(
            step.job_instance_id, execution.id, name, step.counts.as_dict()
        )
        return step

    def commit(self, step: Step) -> Step:
        read = self.rng.randint(1, 500)
        filtered = self.rng.randint(0, read // 10)
        deltas = ExecutionCounts(
            read=read,
            processed=read,
            written=read - filtered,
            filtered=filtered,
            committed=1,
            rolled_back=1 if self.rng.random() < 0.05 else 0,
        )
        checkpoint = StateEnvelope(
            "soak.reader.offset", 1, {"offset": step.counts.read + read, "chunk": step.version}
        )
        committed = self._mutate(
            STEP, self.client.commit_chunk, step, step.version, deltas, checkpoint=checkpoint
        )
        self.ledger.chunk(committed.id, deltas.as_dict())
        return committed

    def _mutate(self, kind: str, call: Callable[..., T], *args: Any, **options: Any) -> T:
        result = self._do(call, *args, **options)
        self.ledger.mutated(kind, result.id, result.version)  # type: ignore[attr-defined]
        return result

    def _do(self, call: Callable[..., T], *args: Any, **options: Any) -> T:
        if time.monotonic() >= self.deadline:
            raise DeadlineReached()
        return self._call(call, *args, **options)

    @staticmethod
    def _call(call: Callable[..., T], *args: Any, **options: Any) -> T:
        try:
            return call(*args, **options)
        except (OxideBatchError, ApiError) as error:
            raise Lost(error_code(error)) from error

    def _failure(self, category: FailureCategory) -> FailureSummary:
        return FailureSummary(category, self.rng.randint(1, 2**62))
