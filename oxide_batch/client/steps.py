"""One step of a job run as a context manager, and the control watch a step's
chunk boundaries consult (stdlib only; built on :class:`RuntimeClient`).

:class:`StepRun` creates the step (a restart attempt's step takes over the
newest earlier row of the same step: counts, checkpoint, context), moves it to
STARTED, and commits chunks with the reconciling rule of
:mod:`oxide_batch.client.reconcile`. After every chunk it observes ``control``
(contract §2.5.3). Leaving it ends the step: COMPLETED, STOPPED after
:class:`StopRequested`, UNKNOWN (``UNKNOWN_COMMIT``) after a commit whose outcome
stayed unknown, FAILED with a failure summary after any other exception — the
exception's text stays in this process's log under the failure id. After
:class:`ExecutionFenced` it writes nothing.
"""

from __future__ import annotations

import logging
import secrets
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

from oxide_batch.client.errors import (
    ExecutionFenced,
    LostWrite,
    SkipLimitExceeded,
    StepSkipped,
    StopRequested,
)
from oxide_batch.client.models import Execution, Skip, Step, StepState
from oxide_batch.client.reconcile import Superseded
from oxide_batch.domain.errors import (
    CommitOutcomeUnknown,
    ConcurrentModification,
    ExecutionOwned,
    IllegalTransition,
    InvalidState,
    NotRestartable,
    OxideBatchError,
    PartitionWorkerStale,
    StaleVersion,
    Unavailable,
    VersionAhead,
)
from oxide_batch.domain.execution import ExecutionCounts, FailureSummary
from oxide_batch.domain.failure_detail import FailureDetail, bounded_for_sending
from oxide_batch.domain.names import MAX_IDENTIFIER
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.status import BatchStatus, FailureCategory

if TYPE_CHECKING:
    from oxide_batch.client.runtime import RuntimeClient

log = logging.getLogger("oxide_batch.client.jobs")

T = TypeVar("T")

#: The schema of the checkpoints and contexts the helper writes (version 1).
CHECKPOINT_SCHEMA = "oxide_batch.checkpoint"
CONTEXT_SCHEMA = "oxide_batch.context"

# A refusal of these kinds may mean an operator took the row away (contract §2.5.6:
# after a recovery the old worker's writes are 409); a re-read tells.
FENCING_ERRORS = (
    StaleVersion,
    InvalidState,
    IllegalTransition,
    PartitionWorkerStale,
    Superseded,
)


def new_failure_id() -> int:
    """A random failure id (1 … 2^63−1): what the log and the repository share."""
    return secrets.randbelow(MAX_IDENTIFIER) + 1


def failure_category(error: BaseException) -> FailureCategory:
    """The category an exception is reported under (a skip limit exceeded: its
    last failure's)."""
    if isinstance(error, SkipLimitExceeded):
        return failure_category(error.cause)
    if isinstance(error, CommitOutcomeUnknown):
        return FailureCategory.UNKNOWN_COMMIT
    if isinstance(error, Unavailable):
        return FailureCategory.TRANSIENT_INFRASTRUCTURE
    if isinstance(error, StaleVersion | Superseded | ConcurrentModification):
        return FailureCategory.OPTIMISTIC_CONFLICT
    if isinstance(error, TimeoutError):
        return FailureCategory.TIMEOUT
    return FailureCategory.USER_COMPONENT


def exception_type(error: BaseException) -> str:
    """The qualified name of ``error``'s class (``ValueError``, ``myjob.io.BadRow``)."""
    cls = type(error)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def failure_detail(error: BaseException) -> FailureDetail:
    """What the server is told of ``error``: its type, message and formatted
    traceback, cut to the server's bounds (the server scrubs and keeps what its
    ``OXIDE_BATCH_FAILURE_DETAIL`` allows)."""
    formatted = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return bounded_for_sending(FailureDetail(exception_type(error), str(error), formatted))


def report_failure(error: BaseException, what: str) -> FailureSummary:
    """A failure summary for ``error``, with its detail (:func:`failure_detail`,
    sent with the failure); the text and traceback also go to this process's
    log (``oxide_batch.client.jobs``) under the failure id."""
    summary = FailureSummary(failure_category(error), new_failure_id(), failure_detail(error))
    log.error(
        "%s failed: failure_id=%d category=%s",
        what,
        summary.failure_id,
        summary.category.value,
        exc_info=(type(error), error, error.__traceback__),
    )
    return summary


@dataclass(frozen=True)
class ControlWatch:
    """The runtime's view of one execution's ``control`` (picklable: a worker
    process may carry it)."""

    client: RuntimeClient
    execution_id: int
    owner_token: bytes

    def observe(self) -> Execution:
        """Observe ``control`` once: the execution when it is still the runtime's
        to run; ``ExecutionFenced`` when it is not (another token recorded, or
        finished/UNKNOWN — recovered, abandoned: the server refuses a fenced
        owner's observation); ``StopRequested`` when it is STOPPING (this
        observation may be what moved it there)."""
        control = self.write(
            None, lambda: self.client.observe_control(self.execution_id, self.owner_token)
        )
        execution = control.execution
        if not control.owner_matches or not execution.status.is_active:
            raise ExecutionFenced(execution.id, execution.status.value)
        if execution.status is BatchStatus.STOPPING:
            raise StopRequested(execution.id)
        return execution

    def seen(self, row: Execution | Step) -> None:
        """The control state a write's answer carried (contract §4.2: the chunk
        boundary's observation): ``ExecutionFenced`` when the token is not the
        owner's or the row is fenced, ``StopRequested`` when a stop is pending;
        nothing when the answer carried none (the write sent no token)."""
        control = row.control
        if control is None:
            return
        if not control.owner_matches or control.fenced:
            raise ExecutionFenced(self.execution_id, "fenced")
        if control.stop_requested:
            raise StopRequested(self.execution_id)

    def fenced(self, step_id: int | None, error: Exception) -> ExecutionFenced | None:
        """After a refusal: ``ExecutionFenced`` when a re-read shows the step
        finished or UNKNOWN, or the execution no longer active; else ``None``
        (the refusal is the runtime's own business)."""
        if step_id is not None:
            step = self.client.step(step_id)
            if not step.status.is_active:
                return ExecutionFenced(self.execution_id, step.status.value, step_id=step_id)
        execution = self.client.execution(self.execution_id)
        if not execution.status.is_active:
            return ExecutionFenced(execution.id, execution.status.value, step_id=step_id)
        return None

    def write(self, step_id: int | None, call: Callable[[], T]) -> T:
        """``call()``; a refusal that means fencing becomes ``ExecutionFenced``
        (and another runtime user's claim — ``ExecutionOwned`` — always does)."""
        try:
            return call()
        except VersionAhead as error:
            raise LostWrite(
                self.execution_id, error.expected, error.actual, step_id=step_id
            ) from error
        except ExecutionOwned as error:
            raise ExecutionFenced(self.execution_id, "owned by another", step_id=step_id) from error
        except FENCING_ERRORS as error:
            fenced = self.fenced(step_id, error)
            if fenced is not None:
                raise fenced from error
            raise


def _envelope(schema: str, payload: Mapping[str, Any] | None) -> StateEnvelope | None:
    return None if payload is None else StateEnvelope(schema, 1, dict(payload))


class StepRun:
    """``with run.step("load") as step:`` — see the module docstring.

    ``step.checkpoint`` / ``step.context`` are the payloads taken over on a
    restart (``None`` when fresh); ``step.step`` is the row last received;
    ``step.exit_code`` (default: the final status) may be set before leaving.
    In a restart attempt, entering raises ``StepSkipped`` when the step
    COMPLETED (or was ABANDONED) in an earlier attempt — ``JobRun.run_step``
    skips it instead — and the repository's ``NotRestartable`` when an earlier
    attempt left it UNKNOWN (it is resolved first)."""

    def __init__(
        self,
        watch: ControlWatch,
        name: str,
        *,
        node_id: str | None = None,
        start_limit: int | None = None,
        allow_start_if_complete: bool = False,
        created: Step | None = None,
        on_failure: Callable[[FailureSummary], None] | None = None,
    ) -> None:
        self.watch = watch
        self.client = watch.client
        self.name = name
        self.node_id = node_id
        self.start_limit = start_limit
        self.allow_start_if_complete = allow_start_if_complete
        self.exit_code: str | None = None
        self.checkpoint: Mapping[str, Any] | None = None
        self.context: Mapping[str, Any] | None = None
        self._created = created
        self._on_failure = on_failure
        self._step: Step | None = None
        # Set by ``JobRun.run_step`` when a restart skipped the step.
        self.skipped = False
        # The step's last chunk ended it (``commit(..., last=True)``).
        self._finished = False

    @property
    def step(self) -> Step:
        if self._step is None:
            raise RuntimeError("the step has not been entered")
        return self._step

    def __enter__(self) -> StepRun:
        if self._step is None:
            self.begin()
        return self

    def begin(self) -> None:
        """Create the step STARTED (taking over an earlier attempt's state on a
        restart) in one request whose answer carries that state and the
        execution's control — what entering does, once; ``StepSkipped`` when a
        restart skips the step. A step made beforehand (a partition's worker
        step) is started by a transition."""
        if self._created is not None:
            created = self._created
            self._step = created
            self._step = self.watch.write(
                created.id,
                lambda: self.client.transition_step(
                    created,
                    created.version,
                    BatchStatus.STARTED,
                    owner_token=self.watch.owner_token,
                    reconcile=True,
                ),
            )
            state = self.client.checkpoint(self._step)
        else:
            state = self._start()
            self._step = state.step
        self.checkpoint = None if state.checkpoint is None else state.checkpoint.payload
        self.context = None if state.context is None else state.context.payload
        self.watch.seen(self._step)

    def _start(self) -> StepState:
        """Create the step STARTED; ``StepSkipped`` when a restart skips it."""
        try:
            return self.watch.write(
                None,
                lambda: self.client.start_step(
                    self.watch.execution_id,
                    self.name,
                    owner_token=self.watch.owner_token,
                    node_id=self.node_id,
                    start_limit=self.start_limit,
                    allow_start_if_complete=self.allow_start_if_complete,
                    reconcile=True,
                ),
            )
        except NotRestartable as refused:
            if refused.status in (BatchStatus.COMPLETED, BatchStatus.ABANDONED):
                raise StepSkipped(
                    self.name, refused.status.value, refused.step_execution_id
                ) from None
            raise

    def commit(
        self,
        *,
        read: int = 0,
        processed: int = 0,
        written: int = 0,
        filtered: int = 0,
        rolled_back: int = 0,
        checkpoint: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
        last: bool = False,
        skips: Sequence[Skip] | None = None,
    ) -> Step:
        """Commit one chunk: its counts (deltas; ``committed`` + 1), checkpoint
        and context payloads, reconciled when the commit outcome is unknown; the
        answer's control state is the chunk boundary's observation. ``last``
        ends the step COMPLETED with this chunk (its ``exit_code``), in the same
        write. ``skips``: the items the chunk left out, recorded in the skip
        ledger by the same write. Raises ``StopRequested``, ``ExecutionFenced``, or
        ``CommitOutcomeUnknown`` when the outcome stayed unknown."""
        step = self.step
        if self._finished:
            raise RuntimeError(f"step {self.name!r} already finished with its last chunk")
        counts = ExecutionCounts(
            read=read,
            processed=processed,
            written=written,
            filtered=filtered,
            committed=1,
            rolled_back=rolled_back,
        )
        self._step = self.watch.write(
            step.id,
            lambda: self.client.commit_chunk(
                step,
                step.version,
                counts,
                _envelope(CHECKPOINT_SCHEMA, checkpoint),
                _envelope(CONTEXT_SCHEMA, context),
                finish=BatchStatus.COMPLETED if last else None,
                exit_code=(self.exit_code or BatchStatus.COMPLETED.value) if last else None,
                owner_token=self.watch.owner_token,
                reconcile=True,
                skips=skips,
            ),
        )
        if checkpoint is not None:
            self.checkpoint = dict(checkpoint)
        if context is not None:
            self.context = dict(context)
        self._finished = last
        if not last:  # a stop seen with the last chunk is the job's to honour
            self.watch.seen(self._step)
        return self._step

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> Literal[False]:
        if self._step is None or isinstance(exc, ExecutionFenced):
            return False
        if self._finished and not self._step.status.is_active:
            return False  # its last chunk ended it
        if exc is None:
            self._end(BatchStatus.COMPLETED)
        elif isinstance(exc, StopRequested):
            self._end(BatchStatus.STOPPED)
        elif isinstance(exc, CommitOutcomeUnknown):
            failure = report_failure(exc, f"step {self.name!r} (commit outcome unknown)")
            self._notify(failure)
            try:
                # The chunk may have applied: report from the row as it is now.
                self._step = self.client.step(self.step.id)
                self._end(BatchStatus.UNKNOWN, failure)
            except OxideBatchError:
                log.warning("step %r could not be reported UNKNOWN", self.name, exc_info=True)
        else:
            failure = report_failure(exc, f"step {self.name!r}")
            self._notify(failure)
            self._end(BatchStatus.FAILED, failure)
        return False

    def _notify(self, failure: FailureSummary) -> None:
        if self._on_failure is not None:
            self._on_failure(failure)

    def _end(self, status: BatchStatus, failure: FailureSummary | None = None) -> None:
        """One transition, with the exit code in the same write (none for UNKNOWN)."""
        step = self.step
        code = None if status is BatchStatus.UNKNOWN else (self.exit_code or status.value)
        self._step = self.watch.write(
            step.id,
            lambda: self.client.transition_step(
                step,
                step.version,
                status,
                failure=failure,
                exit_code=None if code == step.exit_code else code,
                owner_token=self.watch.owner_token,
                reconcile=True,
            ),
        )

    @classmethod
    def claimed(
        cls,
        watch: ControlWatch,
        step: Step,
        checkpoint: Mapping[str, Any] | None,
        context: Mapping[str, Any] | None,
    ) -> Self:
        """A step already STARTED for ``watch``'s token (a claimed partition's
        worker step), with what it took over: entering starts nothing; chunks
        and the end are as for any step."""
        run = cls(watch, step.step_name, created=step)
        run._step = step
        run.checkpoint = None if checkpoint is None else dict(checkpoint)
        run.context = None if context is None else dict(context)
        return run
