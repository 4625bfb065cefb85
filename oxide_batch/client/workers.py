"""Remote partitions, the worker's side: a loop any host runs (stdlib only).

::

    def load(step, partition):
        offset = step.checkpoint.get("offset", 0) if step.checkpoint else 0
        ...
        step.commit(read=n, written=n, checkpoint={"offset": offset + n})

    report = client.partition_worker(parent_step_id, load, interval=2.0)

:func:`partition_worker` claims a partition of a running partitioned step
(``POST steps/{parent}/partitions/claim``) with a new owner token of its own,
runs ``work(step, partition)`` inside a :class:`~oxide_batch.client.steps.StepRun`
of the worker step the claim created (STARTED, with the checkpoint and context
taken over from the partition's earlier worker, if any), ends that step, completes
the partition, and claims again. While ``work`` runs, a heartbeat thread keeps
the worker step's lease alive: a worker step's lease is renewed by its writes
only, so after half a TTL without a chunk it commits an empty one
(:class:`ClaimedStepRun`). The claim's answer says
when to stop:

- ``all_assigned``: every partition left has a live worker; wait ``interval``
  seconds and ask again (a dead worker's partition comes back after its lease);
  so does a parent not STARTED yet (``partition_parent_not_active`` from
  STARTING: its manager is about to plan it);
- ``finished`` (every partition is done, or the parent is no longer active) and
  ``stopping`` (a stop was requested): return a :class:`WorkerReport`.

A stop request reaches ``work`` at its next chunk boundary (``StopRequested``):
the worker step ends STOPPED and its partition is completed STOPPED. A failing
``work`` ends its worker step FAILED and completes the partition FAILED: the
next claimant takes it over while it has retries left
(``OXIDE_BATCH_PARTITION_RETRY_LIMIT``; then the parent fails with it). The
loop goes on with the next claim. A worker whose token is fenced (its
worker step or the whole execution was recovered) writes nothing more and
returns (``reason="fenced"``).
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oxide_batch.client.errors import ExecutionFenced, StopRequested
from oxide_batch.client.models import Execution, Lease, Partition, Step, WriteControl
from oxide_batch.client.steps import ControlWatch, StepRun
from oxide_batch.domain.errors import (
    CommitOutcomeUnknown,
    ExecutionOwned,
    OxideBatchError,
    PartitionParentNotActive,
)
from oxide_batch.domain.execution import ExecutionCounts
from oxide_batch.domain.state import EnvelopeKind, StateEnvelope, StateLimits
from oxide_batch.domain.status import BatchStatus

if TYPE_CHECKING:
    from oxide_batch.client.runtime import RuntimeClient

log = logging.getLogger("oxide_batch.client.workers")

#: Seconds a worker waits before asking again when every partition has a live worker.
DEFAULT_CLAIM_INTERVAL = 5.0
#: The worker heartbeat observes at most this many seconds apart (TTL / 4 when shorter).
DEFAULT_WORKER_POLL = 10.0
LEASE_FRACTION = 4

FINISHED = "finished"
ALL_ASSIGNED = "all_assigned"
STOPPING = "stopping"
FENCED = "fenced"

_READ_LIMITS = StateLimits(1024 * 1024, 64)

PartitionWork = Callable[[StepRun, Partition], None]


def _envelope(document: Any, kind: EnvelopeKind) -> StateEnvelope | None:
    if document is None:
        return None
    return StateEnvelope.from_json(document, kind=kind, limits=_READ_LIMITS)


@dataclass(frozen=True)
class PartitionClaim:
    """A claimed partition: its worker step (STARTED, owned by the claim's
    token), what that step took over (``None`` when fresh), and its lease."""

    partition: Partition
    retries: int
    worker_step: Step
    checkpoint: StateEnvelope | None
    context: StateEnvelope | None
    lease: Lease | None
    control: WriteControl | None

    @property
    def claimed(self) -> bool:
        return True


@dataclass(frozen=True)
class NothingClaimed:
    """No partition to claim: ``reason`` is ``finished``, ``all_assigned`` or
    ``stopping``; ``step`` is the parent as it stands."""

    reason: str
    step: Step
    control: WriteControl | None

    @property
    def claimed(self) -> bool:
        return False


ClaimAnswer = PartitionClaim | NothingClaimed


def claim_from_json(document: Mapping[str, Any]) -> ClaimAnswer:
    """The claim's 200 answer, either shape."""
    control = WriteControl.from_json(document.get("control"))
    if not document["claimed"]:
        return NothingClaimed(str(document["reason"]), Step.from_json(document["step"]), control)
    partition = document["partition"]
    return PartitionClaim(
        Partition.from_json(partition),
        int(partition.get("retries", 0)),
        Step.from_json(document["worker_step"]),
        _envelope(document.get("checkpoint"), EnvelopeKind.CHECKPOINT),
        _envelope(document.get("context"), EnvelopeKind.CONTEXT),
        Lease.from_json(document.get("lease")),
        control,
    )


@dataclass(frozen=True)
class PlanSummary:
    """``GET steps/{parent}/partitions``'s ``summary``: how many partitions
    have each status, how many a claim may take now (never assigned, or FAILED
    with retries left), how many are running (STARTED), and whether the plan is
    ``settled`` (nothing claimable or running: aggregate now)."""

    by_status: Mapping[str, int]
    claimable: int
    running: int
    settled: bool

    @classmethod
    def from_json(cls, document: Mapping[str, Any] | None) -> PlanSummary | None:
        if document is None:
            return None
        return cls(
            {str(key): int(value) for key, value in document["by_status"].items()},
            int(document["claimable"]),
            int(document["running"]),
            bool(document["settled"]),
        )


@dataclass
class WorkerReport:
    """What one :func:`partition_worker` loop did: the partitions it ran, by
    the status its worker step ended with, the claims answered
    ``all_assigned``, and why it returned (``finished``, ``stopping``, ``fenced``)."""

    reason: str = ""
    completed: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    waits: int = 0

    @property
    def partitions(self) -> int:
        return len(self.completed) + len(self.stopped) + len(self.failed)


class ClaimedStepRun(StepRun):
    """A claimed worker step's :class:`StepRun`, whose lease a heartbeat thread
    may renew: the worker step's lease is renewed by its own writes only (the
    server has no observation for a worker's token), so when no chunk was
    committed for half the TTL the heartbeat commits an empty chunk (no counts,
    no checkpoint: the stored ones stay). The step's own writes and the
    heartbeat's take turns (a lock), so each compare-and-swap holds the version
    the other left."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turn = threading.RLock()
        self.last_write = time.monotonic()
        self.keep_alives = 0

    def commit(self, **chunk: Any) -> Step:
        with self._turn:
            try:
                return super().commit(**chunk)
            finally:
                self.last_write = time.monotonic()

    def _end(self, status: BatchStatus, failure: Any = None) -> None:
        with self._turn:
            super()._end(status, failure)

    def keep_alive(self, idle: float) -> bool:
        """Commit an empty chunk when nothing was written for ``idle`` seconds
        and the step is still running; whether it did."""
        with self._turn:
            step = self.step
            if not step.status.is_active or time.monotonic() - self.last_write < idle:
                return False
            self._step = self.watch.write(
                step.id,
                lambda: self.client.commit_chunk(
                    step,
                    step.version,
                    ExecutionCounts(),  # every delta 0, ``committed`` too
                    owner_token=self.watch.owner_token,
                    reconcile=True,
                ),
            )
            self.last_write = time.monotonic()
            self.keep_alives += 1
            return True


class _WorkerHeartbeat(threading.Thread):
    """Every ``interval`` seconds until stopped, keeps the worker step's lease
    alive while a long chunk runs (:meth:`ClaimedStepRun.keep_alive` after
    ``idle`` seconds without a write; the execution heartbeat's shape,
    :class:`~oxide_batch.client.jobs.JobRun`). Once fenced it stops; a stop
    request is seen at the step's next chunk boundary, not here."""

    def __init__(self, step: ClaimedStepRun, interval: float, idle: float) -> None:
        super().__init__(name=f"oxide-batch-worker-{step.step.id}", daemon=True)
        self.step = step
        self.interval = interval
        self.idle = idle
        self.finished = threading.Event()

    def run(self) -> None:
        while not self.finished.wait(self.interval):
            try:
                self.step.keep_alive(self.idle)
            except ExecutionFenced:
                log.warning("the worker's token is fenced: its heartbeat stops")
                return
            except (OxideBatchError, OSError):
                log.warning("worker heartbeat failed; retrying", exc_info=True)

    def stop(self) -> None:
        self.finished.set()
        self.join(timeout=self.interval + 5)


def _heartbeat_interval(poll: float, lease: Lease | None) -> float:
    return poll if lease is None else min(poll, lease.ttl_seconds / LEASE_FRACTION)


def parent_step_id(
    client: RuntimeClient,
    parent: int | Step | Execution,
    step_name: str | None,
    *,
    interval: float,
    wait: float | None = None,
) -> int:
    """The parent step's id: given, or the step ``step_name`` of an execution,
    waited for (every ``interval`` seconds, at most ``wait`` seconds) until its
    manager has created it."""
    if isinstance(parent, Step):
        return parent.id
    if isinstance(parent, int) and step_name is None:
        return parent
    if step_name is None:
        raise ValueError("an execution needs the step_name of its partitioned step")
    deadline = None if wait is None else time.monotonic() + wait
    while True:
        found = client._step_named(parent, step_name)
        if found is not None:
            return found.id
        if deadline is not None and time.monotonic() >= deadline:
            raise LookupError(f"no step {step_name!r} in the execution")
        time.sleep(interval)


def partition_worker(
    client: RuntimeClient,
    parent: int | Step | Execution,
    work: PartitionWork,
    *,
    step_name: str | None = None,
    interval: float = DEFAULT_CLAIM_INTERVAL,
    poll_interval: float = DEFAULT_WORKER_POLL,
    max_partitions: int | None = None,
    sleep: Callable[[float], Any] = time.sleep,
) -> WorkerReport:
    """Claim and run partitions of a partitioned step until it is finished or
    stopping (the module docstring states the loop). ``parent``: the parent
    step (or its id), or an execution with ``step_name``. ``max_partitions``
    returns after that many partitions (``reason="enough"``)."""
    if interval <= 0 or poll_interval <= 0:
        raise ValueError("interval and poll_interval must be positive")
    step_id = parent_step_id(client, parent, step_name, interval=interval)
    report = WorkerReport()
    while max_partitions is None or report.partitions < max_partitions:
        token = secrets.token_bytes(16)
        try:
            answer = client.claim_partition(step_id, token)
        except CommitOutcomeUnknown:
            # The claim may have applied with this token: its worker step then
            # never writes, its lease expires and the partition comes back.
            log.warning("claim outcome unknown; claiming again with a new token")
            continue
        except PartitionParentNotActive as refused:
            if refused.status is BatchStatus.STARTING:
                # Its manager is about to start and plan it: ask again.
                report.waits += 1
                sleep(interval)
                continue
            log.info("the partitioned step is no longer active: %s", refused)
            report.reason = FINISHED
            return report
        except ExecutionOwned as refused:
            log.info("the partitioned step is no longer active: %s", refused)
            report.reason = FENCED
            return report
        if isinstance(answer, NothingClaimed):
            if answer.reason == ALL_ASSIGNED:
                report.waits += 1
                sleep(interval)
                continue
            report.reason = answer.reason
            return report
        outcome = run_claimed(client, answer, token, work, poll_interval=poll_interval)
        if outcome is None:
            report.reason = FENCED
            return report
        {
            BatchStatus.COMPLETED: report.completed,
            BatchStatus.STOPPED: report.stopped,
        }.get(outcome, report.failed).append(answer.partition.ordinal)
    report.reason = "enough"
    return report


def run_claimed(
    client: RuntimeClient,
    claim: PartitionClaim,
    token: bytes,
    work: PartitionWork,
    *,
    poll_interval: float = DEFAULT_WORKER_POLL,
) -> BatchStatus | None:
    """Run one claimed partition: ``work`` inside its worker step, the step
    ended, the partition completed from it — COMPLETED, STOPPED or FAILED (a
    FAILED partition is claimable again while it has retries left). The worker
    step's final status, or ``None`` when the token was fenced (nothing more
    was written)."""
    watch = ControlWatch(client, claim.worker_step.job_execution_id, token)
    step = ClaimedStepRun.claimed(
        watch,
        claim.worker_step,
        None if claim.checkpoint is None else claim.checkpoint.payload,
        None if claim.context is None else claim.context.payload,
    )
    ordinal = claim.partition.ordinal
    log.info(
        "partition %d (%s) claimed: worker step %d%s",
        ordinal,
        claim.partition.key,
        claim.worker_step.id,
        "" if claim.checkpoint is None else ", resuming at its checkpoint",
    )
    interval = _heartbeat_interval(poll_interval, claim.lease)
    heartbeat = _WorkerHeartbeat(step, interval, idle=2 * interval)
    heartbeat.start()
    try:
        try:
            with step:
                work(step, claim.partition)
        except ExecutionFenced:
            log.warning("partition %d: the worker's token is fenced; it stops", ordinal)
            return None
        except StopRequested:
            log.info("partition %d: stop requested; its worker step is STOPPED", ordinal)
        except Exception:
            log.warning("partition %d failed: its worker step is FAILED", ordinal)
    finally:
        heartbeat.stop()
    ended = step.step
    if ended.status.is_active:
        return BatchStatus.FAILED  # it could not be ended: its lease will expire
    try:
        watch.write(
            ended.id,
            lambda: client.complete_partition(
                claim.partition, claim.partition.version, ended, owner_token=token
            ),
        )
    except ExecutionFenced:
        log.warning("partition %d: fenced before it was completed", ordinal)
        return None
    return ended.status
