"""A Spring Batch-shaped runtime API over :class:`RuntimeClient` (stdlib only)::

    with client.job_run("nightly_import", {"business_date": "2026-07-29"}) as run:
        with run.step("load") as step:
            offset = step.checkpoint.get("offset", 0) if step.checkpoint else 0
            for chunk in read_chunks(source, start=offset, size=100):
                write(chunk)
                step.commit(read=len(chunk), written=len(chunk),
                            checkpoint={"offset": offset := offset + len(chunk)})

Entering :class:`JobRun` launches the instance's next attempt (a restart when
the latest attempt is STOPPED or FAILED), records this runtime's owner token and
moves it to STARTED. Claiming makes this runtime the owner, holding a lease the
server announces in the claim's answer (``OXIDE_BATCH_LEASE_TTL``): it expires
that long after the runtime's latest write or observation, and then the
execution may be recovered at once (``manage.py batch_watchdog`` does). While it
runs, a daemon heartbeat thread observes ``control`` every
``min(poll_interval, TTL / 4)`` seconds — a long chunk of a live worker never
lets the lease expire; every chunk commit and every step start observes it
too, and raises ``StopRequested`` once the execution is STOPPING or
``ExecutionFenced`` once it is no longer this runtime's.

``run.run_step(name, work)`` runs ``work(step)`` inside a step, and skips it on
a restart when the step COMPLETED in an earlier attempt (Spring Batch's rule;
``allow_start_if_complete=True`` runs it again from the start). Leaving ends the
execution: COMPLETED (STOPPED when a stop arrived after the last boundary);
STOPPED after ``StopRequested`` (which it swallows); UNKNOWN (``UNKNOWN_COMMIT``)
after a commit whose outcome stayed unknown; FAILED with the failing step's
failure summary (or a new one) after any other exception; nothing at all after
``ExecutionFenced``. The exit code is the final status unless ``run.exit_code``
was set.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from oxide_batch.client.chunks import ChunkStep, Processor, Reader, RetryPolicy, SkipPolicy, Writer
from oxide_batch.client.errors import ExecutionFenced, StepFailed, StepSkipped, StopRequested
from oxide_batch.client.models import Control, Execution, Instance, Lease, Partition, Step
from oxide_batch.client.steps import ControlWatch, StepRun, report_failure
from oxide_batch.domain.errors import (
    CommitOutcomeUnknown,
    ExecutionOwned,
    IllegalTransition,
    InvalidState,
    OxideBatchError,
    StaleVersion,
)
from oxide_batch.domain.execution import FailureSummary
from oxide_batch.domain.status import BatchStatus

if TYPE_CHECKING:
    from oxide_batch.client.runtime import RuntimeClient

log = logging.getLogger("oxide_batch.client.jobs")

#: Seconds between two observations of ``control`` at most (the heartbeat runs
#: more often when the lease TTL asks: every TTL / LEASE_FRACTION).
DEFAULT_POLL_INTERVAL = 10.0
#: The heartbeat observes this many times per lease TTL, so a few lost
#: observations in a row never let a live worker's lease expire.
LEASE_FRACTION = 4
#: Seconds between two reads of a remote partitioned step's partitions by its manager.
DEFAULT_REMOTE_INTERVAL = 2.0

PartitionWorker = Callable[[StepRun, Partition], None]
StepWork = Callable[[StepRun], None]


def heartbeat_interval(poll_interval: float, lease: Lease | None) -> float:
    """Seconds between the heartbeat's observations: ``poll_interval``, or a
    quarter of the lease TTL the server announced when that is shorter."""
    if lease is None:
        return poll_interval
    return min(poll_interval, lease.ttl_seconds / LEASE_FRACTION)


class _Heartbeat(threading.Thread):
    """Observes ``control`` every ``interval`` seconds until stopped, keeping the
    owner's lease alive whatever the runtime's own thread is doing. What it sees
    is raised at the runtime's next boundary (which observes again), not here;
    once the server refuses it as fenced (the execution was recovered, or is
    another user's) it stops."""

    def __init__(self, watch: ControlWatch, interval: float) -> None:
        super().__init__(name=f"oxide-batch-control-{watch.execution_id}", daemon=True)
        self.watch = watch
        self.interval = interval
        self.finished = threading.Event()
        # The latest observation's answer, and whether the server refused it as fenced.
        self.seen: Control | None = None
        self.refused = False

    def run(self) -> None:
        while not self.finished.wait(self.interval):
            try:
                self.seen = self.watch.client.observe_control(
                    self.watch.execution_id, self.watch.owner_token
                )
            except (InvalidState, ExecutionOwned):
                log.warning(
                    "execution %d is no longer this runtime's: the heartbeat stops",
                    self.watch.execution_id,
                )
                self.refused = True
                return
            except (OxideBatchError, OSError):
                log.warning("control observation failed; retrying", exc_info=True)

    def stop(self) -> None:
        self.finished.set()
        self.join(timeout=self.interval + 5)


class JobRun:
    """``with client.job_run(job_name, parameters) as run:`` — see the module
    docstring. ``run.execution`` is the execution as last seen, ``run.instance``
    its instance, ``run.restarted`` whether this attempt is a restart."""

    def __init__(
        self,
        client: RuntimeClient,
        job_name: str,
        parameters: Mapping[str, Any] | None = None,
        *,
        non_identifying: Mapping[str, Any] | None = None,
        definition_digest: str | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        owner_token: bytes | None = None,
    ) -> None:
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        self.client = client
        self.job_name = job_name
        self.parameters = dict(parameters or {})
        self.non_identifying = non_identifying
        self.definition_digest = definition_digest
        self.poll_interval = poll_interval
        self.heartbeat_interval = poll_interval
        self.owner_token = owner_token or secrets.token_bytes(16)
        self.exit_code: str | None = None
        self._failure: FailureSummary | None = None
        self._instance: Instance | None = None
        self._execution: Execution | None = None
        self._heartbeat: _Heartbeat | None = None

    # -- what the run is -------------------------------------------------------------

    @property
    def instance(self) -> Instance:
        if self._instance is None:
            raise RuntimeError("the job run has not been entered")
        return self._instance

    @property
    def execution(self) -> Execution:
        if self._execution is None:
            raise RuntimeError("the job run has not been entered")
        return self._execution

    @property
    def watch(self) -> ControlWatch:
        return ControlWatch(self.client, self.execution.id, self.owner_token)

    @property
    def restarted(self) -> bool:
        return self.execution.attempt > 1

    # -- the run ---------------------------------------------------------------------

    def __enter__(self) -> JobRun:
        # One request: the instance, its next attempt, claimed and STARTED, in
        # one transaction (a refusal leaves nothing behind).
        instance, execution = self.client.launch_run(
            self.job_name,
            self.parameters,
            owner_token=self.owner_token,
            non_identifying=self.non_identifying,
            definition_digest=self.definition_digest,
            reconcile=True,
        )
        self._instance, self._execution = instance, execution
        # The lease the launch's answer announces sets the heartbeat's pace.
        self.heartbeat_interval = heartbeat_interval(self.poll_interval, execution.lease)
        self._heartbeat = _Heartbeat(self.watch, self.heartbeat_interval)
        self._heartbeat.start()
        return self

    def check_control(self) -> Execution:
        """Observe ``control`` now (a boundary of the caller's own); raises
        ``StopRequested`` or ``ExecutionFenced`` as a chunk commit would."""
        self._execution = self.watch.observe()
        return self._execution

    def step(
        self,
        name: str,
        *,
        node_id: str | None = None,
        start_limit: int | None = None,
        allow_start_if_complete: bool = False,
    ) -> StepRun:
        """A step of this execution, entered with ``with``. On a restart,
        entering raises ``StepSkipped`` when the step COMPLETED in an earlier
        attempt: a ``with`` block cannot be skipped — :meth:`run_step` can."""
        return StepRun(
            self.watch,
            name,
            node_id=node_id,
            start_limit=start_limit,
            allow_start_if_complete=allow_start_if_complete,
            on_failure=self.record_failure,
        )

    def run_step(
        self,
        name: str,
        work: StepWork,
        *,
        node_id: str | None = None,
        start_limit: int | None = None,
        allow_start_if_complete: bool = False,
    ) -> StepRun:
        """Run ``work(step)`` inside step ``name`` (as ``with run.step(name) as
        step: work(step)``), unless a restart skips it: a step that COMPLETED
        (or was ABANDONED) in an earlier attempt is not run again, as Spring
        Batch skips it — unless ``allow_start_if_complete`` (it runs from the
        start, nothing taken over). Returns the step run (``skipped`` tells).
        An earlier attempt that left the step UNKNOWN raises the repository's
        ``NotRestartable``: it is resolved first (contract §2.3.2)."""
        step = self.step(
            name,
            node_id=node_id,
            start_limit=start_limit,
            allow_start_if_complete=allow_start_if_complete,
        )
        try:
            step.begin()
        except StepSkipped as skipped:
            log.info("%s: skipped", skipped)
            step.skipped = True
            return step
        with step:
            work(step)
        return step

    def run_chunk_step(
        self,
        name: str,
        *,
        reader: Reader,
        writer: Writer,
        processor: Processor | None = None,
        chunk_size: int = 100,
        retry: RetryPolicy | None = None,
        skip: SkipPolicy | None = None,
        key: Callable[[Any], str] | None = None,
        exit_code: str | None = None,
        node_id: str | None = None,
        start_limit: int | None = None,
        allow_start_if_complete: bool = False,
    ) -> StepRun:
        """A chunk-oriented step (:mod:`oxide_batch.client.chunks`): read
        ``chunk_size`` items at a time from ``reader(offset)``, process them
        (``processor``: item → item, or ``None`` to filter it), write them
        (``writer``: a list), commit each chunk with its checkpoint and skips —
        under the ``retry`` and ``skip`` policies. Skipped on a restart as
        :meth:`run_step` is; a restart resumes at the checkpoint's offset.
        Ends with exit code ``COMPLETED_WITH_SKIPS`` when the step execution
        skipped anything, unless ``exit_code``."""
        work = ChunkStep(
            reader=reader,
            writer=writer,
            processor=processor,
            chunk_size=chunk_size,
            retry=retry,
            skip=skip,
            key=key,
            exit_code=exit_code,
        )
        return self.run_step(
            name,
            work.run,
            node_id=node_id,
            start_limit=start_limit,
            allow_start_if_complete=allow_start_if_complete,
        )

    def partitioned_step(
        self,
        name: str,
        keys: Sequence[str | tuple[str, Mapping[str, Any]]],
        worker: PartitionWorker,
        *,
        executor: Executor | None = None,
        max_workers: int = 4,
    ) -> Step:
        """Plan ``keys`` (or carry the previous attempt's plan on a restart), run
        ``worker(step, partition)`` for every partition not yet COMPLETED — in
        ``executor`` (threads or processes; a worker for processes must be
        picklable) or ``max_workers`` threads — then complete the partitions
        from the worker rows and aggregate. Returns the parent step when it
        aggregated COMPLETED; raises ``StopRequested`` (STOPPED),
        ``StepFailed`` (FAILED or UNKNOWN) or ``ExecutionFenced``."""
        from oxide_batch.client.partitioned import run_partitioned_step

        return run_partitioned_step(
            self, name, keys, worker, executor=executor, max_workers=max_workers
        )

    def remote_partitioned_step(
        self,
        name: str,
        keys: Sequence[str | tuple[str, Mapping[str, Any]]],
        *,
        interval: float = DEFAULT_REMOTE_INTERVAL,
        retry_limit: int | None = None,
    ) -> Step:
        """Plan ``keys`` (or carry the previous attempt's plan on a restart) and
        let remote workers run the partitions (``client.partition_worker`` on
        any host claims them); wait with one read per ``interval`` seconds and
        aggregate once every partition is done. Returns the parent when it
        aggregated COMPLETED; raises ``StopRequested`` (STOPPED), ``StepFailed``
        (FAILED: a worker's failure, or a partition over its retry limit) or
        ``ExecutionFenced``. ``retry_limit`` is assumed only of a server whose
        partition list carries no summary
        (:func:`oxide_batch.client.partitioned.run_remote_partitioned_step`)."""
        from oxide_batch.client.partitioned import run_remote_partitioned_step

        return run_remote_partitioned_step(
            self, name, keys, interval=interval, retry_limit=retry_limit
        )

    def heartbeat_saw(self) -> Execution | None:
        """What the heartbeat's latest observation of ``control`` saw, without a
        request: ``ExecutionFenced`` or ``StopRequested`` as :meth:`check_control`
        would raise them; the execution otherwise (``None`` before the first)."""
        heartbeat = self._heartbeat
        if heartbeat is None:
            return None
        if heartbeat.refused:
            raise ExecutionFenced(self.execution.id, "fenced")
        seen = heartbeat.seen
        if seen is None:
            return None
        if not seen.owner_matches or not seen.execution.status.is_active:
            raise ExecutionFenced(seen.execution.id, seen.execution.status.value)
        if seen.execution.status is BatchStatus.STOPPING:
            raise StopRequested(seen.execution.id)
        return seen.execution

    def record_failure(self, failure: FailureSummary) -> None:
        """The failure the execution ends with if the run leaves on an exception
        (the failing step's, so one failure id tells the whole story)."""
        self._failure = failure

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if isinstance(exc, ExecutionFenced):
            return False
        if exc is None:
            # The execution as last written (its version moves only with its own
            # writes); the end re-reads it only when that was outdated.
            self._end(BatchStatus.COMPLETED)
            return False
        current = self.client.execution(self.execution.id)
        self._execution = current
        if not current.status.is_active:
            raise ExecutionFenced(current.id, current.status.value)
        if isinstance(exc, StopRequested):
            self._end(BatchStatus.STOPPED)
            return True
        if isinstance(exc, CommitOutcomeUnknown):
            failure = self._failure or report_failure(exc, f"job {self.job_name!r}")
            try:
                self._end(BatchStatus.UNKNOWN, failure)
            except OxideBatchError:
                log.warning("execution %d could not be reported UNKNOWN", current.id)
            return False
        if isinstance(exc, StepFailed) and exc.failure is not None:
            failure = exc.failure
        else:
            failure = self._failure or report_failure(exc, f"job {self.job_name!r}")
        self._end(BatchStatus.FAILED, failure)
        return False

    def _end(self, status: BatchStatus, failure: FailureSummary | None = None) -> None:
        """One transition with the exit code in the same write (none for UNKNOWN).
        Refused as outdated — the heartbeat's observation moved the execution
        to STOPPING, or an operator acted — it reads the execution and ends it
        from there: STOPPED instead of COMPLETED when a stop was requested,
        ``ExecutionFenced`` when it is no longer active."""
        try:
            self._transition(self.execution, status, failure)
        except (StaleVersion, IllegalTransition):
            current = self.client.execution(self.execution.id)
            self._execution = current
            if not current.status.is_active:
                raise ExecutionFenced(current.id, current.status.value) from None
            if status is BatchStatus.COMPLETED and current.status is BatchStatus.STOPPING:
                status = BatchStatus.STOPPED
            self._transition(current, status, failure)

    def _transition(
        self, execution: Execution, status: BatchStatus, failure: FailureSummary | None
    ) -> None:
        code = None if status is BatchStatus.UNKNOWN else (self.exit_code or status.value)
        self._execution = self.watch.write(
            None,
            lambda: self.client.transition(
                execution,
                execution.version,
                status,
                failure=failure,
                exit_code=None if code == execution.exit_code else code,
                owner_token=self.owner_token,
                reconcile=True,
            ),
        )


class JobRuns:
    """:meth:`job_run`, a method of :class:`~oxide_batch.client.RuntimeClient`."""

    def job_run(
        self,
        job_name: str,
        parameters: Mapping[str, Any] | None = None,
        *,
        non_identifying: Mapping[str, Any] | None = None,
        definition_digest: str | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        owner_token: bytes | None = None,
    ) -> JobRun:
        """A run of the instance of ``(job_name, parameters)``: launch or restart,
        claim and start on entering ``with``; see :class:`JobRun`."""
        return JobRun(
            cast("RuntimeClient", self),
            job_name,
            parameters,
            non_identifying=non_identifying,
            definition_digest=definition_digest,
            poll_interval=poll_interval,
            owner_token=owner_token,
        )
