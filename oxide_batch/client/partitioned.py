"""A partitioned step of a :class:`~oxide_batch.client.jobs.JobRun` (stdlib only).

The parent step is created and STARTED; its plan is the keys given, or — on a
restart — the previous attempt's plan carried over (COMPLETED partitions with
their worker and counts, every other partition unassigned again). Each
partition not COMPLETED gets a worker step ``<name>:<ordinal>`` (which, on a
restart, takes over the earlier worker row's checkpoint, or starts fresh when that
worker COMPLETED but its partition never did) and is assigned to it
before any worker runs, so a stop or a crash leaves every partition accounted
for. Workers run in the caller's executor (threads or processes) inside a
:class:`~oxide_batch.client.steps.StepRun`; a worker that never ended its step
(a dead process) has it ended FAILED here — STOPPED when it saw the stop as it
started. Each partition is completed from its worker row as soon as its
worker is done (a crash later keeps it COMPLETED for the restart); then the
parent is aggregated: the most severe status wins. A restart skips a parent
that COMPLETED in an earlier attempt (it is returned as it stands).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from oxide_batch.client.errors import ExecutionFenced, StepFailed, StopRequested
from oxide_batch.client.models import Partition, Step
from oxide_batch.client.pool import PoolBreak, WorkerBeacons, beacon
from oxide_batch.client.steps import ControlWatch, StepRun, report_failure
from oxide_batch.client.workers import PlanSummary
from oxide_batch.domain.errors import NotRestartable, RestartStateNotFound
from oxide_batch.domain.partitions import RUNTIME_TERMINAL
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.status import BatchStatus

if TYPE_CHECKING:
    from oxide_batch.client.jobs import JobRun, PartitionWorker

PARTITION_CONTEXT_SCHEMA = "oxide_batch.partition"
SKIPPED = frozenset({BatchStatus.COMPLETED, BatchStatus.ABANDONED})
log = logging.getLogger("oxide_batch.client.jobs")


@dataclass(frozen=True)
class PartitionWork:
    """What a worker needs, picklable for a process pool."""

    watch: ControlWatch
    worker_step: Step
    partition: Partition
    # Where a process pool's worker says what became of the partition (client.pool).
    beacons: WorkerBeacons | None = None


def run_partition(work: PartitionWork, worker: PartitionWorker) -> None:
    """Run ``worker`` on one partition inside its worker step (any process)."""
    with (
        beacon(work.beacons, work.partition.ordinal),
        StepRun(work.watch, work.worker_step.step_name, created=work.worker_step) as step,
    ):
        worker(step, work.partition)


def _entries(
    keys: Sequence[str | tuple[str, Mapping[str, Any]]],
) -> list[str | tuple[str, Any]]:
    entries: list[str | tuple[str, Any]] = []
    for key in keys:
        if isinstance(key, tuple):
            entries.append((key[0], StateEnvelope(PARTITION_CONTEXT_SCHEMA, 1, dict(key[1]))))
        else:
            entries.append(key)
    return entries


def _plan(
    run: JobRun,
    parent: Step,
    previous: Step | None,
    keys: Sequence[str | tuple[str, Mapping[str, Any]]],
) -> list[Partition]:
    """The previous attempt's plan carried into ``parent``, else a new one."""
    client, watch = run.client, run.watch
    token = watch.owner_token
    if previous is not None and previous.job_execution_id != run.execution.id:
        try:
            return watch.write(
                parent.id,
                lambda: client.restart_partitions(parent, previous, owner_token=token),
            )
        except RestartStateNotFound:
            pass  # the previous attempt died before it planned
    return watch.write(
        parent.id, lambda: client.plan_partitions(parent, _entries(keys), owner_token=token)
    )


def run_partitioned_step(
    run: JobRun,
    name: str,
    keys: Sequence[str | tuple[str, Mapping[str, Any]]],
    worker: PartitionWorker,
    *,
    executor: Executor | None = None,
    max_workers: int = 4,
) -> Step:
    """:meth:`JobRun.partitioned_step` (its docstring states the contract)."""
    started = _start_parent(run, name, keys)
    if isinstance(started, Step):
        return started
    parent, partitions = started
    work = [_assign(run, name, partition) for partition in partitions if _to_run(partition)]
    fenced = _run_workers(run, work, worker, executor, max_workers)
    if fenced is not None:
        raise fenced
    return _aggregated(run, run.client.step(parent.id))


def _start_parent(
    run: JobRun, name: str, keys: Sequence[str | tuple[str, Mapping[str, Any]]]
) -> Step | tuple[Step, list[Partition]]:
    """The parent step created, STARTED and planned, with its plan; or, on a
    restart that skips it (COMPLETED or ABANDONED earlier), the earlier parent."""
    client, watch = run.client, run.watch
    watch.observe()
    previous = client.latest_flow_step(run.instance.id, name)
    try:
        created = watch.write(
            None, lambda: client.create_step(run.execution, name, owner_token=watch.owner_token)
        )
    except NotRestartable as refused:
        # A restart skips a parent that COMPLETED (or was ABANDONED) earlier
        # (contract §2.3.2): its partitions are done; it is answered as it stands.
        if previous is not None and refused.status in SKIPPED:
            log.info(
                "partitioned step %r is %s from an earlier attempt: skipped", name, refused.status
            )
            return previous
        raise
    parent = watch.write(
        created.id,
        lambda: client.transition_step(
            created, created.version, BatchStatus.STARTED, owner_token=watch.owner_token
        ),
    )
    return parent, _plan(run, parent, previous, keys)


def _aggregated(run: JobRun, current: Step) -> Step:
    """Aggregate the parent (every partition runtime-terminal): returned when
    COMPLETED; ``StopRequested`` when STOPPED; else ``StepFailed``."""
    client, watch = run.client, run.watch
    parent = watch.write(
        current.id,
        lambda: client.aggregate(current, current.version, owner_token=watch.owner_token),
    )
    return _outcome(run, parent)


def _outcome(run: JobRun, parent: Step) -> Step:
    if parent.status is BatchStatus.COMPLETED:
        return parent
    if parent.status is BatchStatus.STOPPED:
        raise StopRequested(run.execution.id)
    if parent.failure is not None:
        run.record_failure(parent.failure)
    raise StepFailed(parent.id, parent.status.value, parent.failure)


def _complete(run: JobRun, partition: Partition) -> None:
    """Complete ``partition`` from its worker row (the status is copied there)."""
    worker_id = partition.worker_step_execution_id
    assert worker_id is not None
    run.watch.write(
        worker_id,
        lambda: run.client.complete_partition(
            partition, partition.version, worker_id, owner_token=run.watch.owner_token
        ),
    )


def _to_run(partition: Partition) -> bool:
    return partition.status is not BatchStatus.COMPLETED


def _assign(run: JobRun, name: str, partition: Partition) -> PartitionWork:
    client, watch = run.client, run.watch
    step = watch.write(
        None,
        lambda: client.create_step(
            run.execution, f"{name}:{partition.ordinal}", owner_token=watch.owner_token
        ),
    )
    assigned = watch.write(
        step.id,
        lambda: client.assign_partition(
            partition, partition.version, step, owner_token=watch.owner_token
        ),
    )
    return PartitionWork(watch, step, assigned)


def _run_workers(
    run: JobRun,
    work: Sequence[PartitionWork],
    worker: PartitionWorker,
    executor: Executor | None,
    max_workers: int,
) -> ExecutionFenced | None:
    """Run every partition and complete each as soon as its worker is done, so
    a crash later in the step keeps it COMPLETED for the restart. Each worker's
    step context has reported and ended its step; a fenced worker stops the
    completions (nothing is the runtime's to write any more). When a process
    pool broke, the partitions it left are settled once the pool has shut down,
    each by what became of it (:func:`_settle_broken`)."""
    own = executor is None
    pool = ThreadPoolExecutor(max_workers=max_workers) if executor is None else executor
    beacons = None
    if isinstance(pool, ProcessPoolExecutor):
        beacons = WorkerBeacons(tempfile.mkdtemp(prefix="oxide-batch-pool-"))
        work = [replace(item, beacons=beacons) for item in work]
    fenced: ExecutionFenced | None = None
    broken: list[PartitionWork] = []
    try:
        futures = {pool.submit(run_partition, item, worker): item for item in work}
        for future in as_completed(futures):
            error = future.exception()
            if isinstance(error, ExecutionFenced):
                fenced = fenced or error
            elif isinstance(error, BrokenProcessPool):
                broken.append(futures[future])
                continue
            if fenced is None:
                _settle_worker(run, futures[future], error)
                _complete(run, futures[future].partition)
        if broken and fenced is None:
            # The broken pool terminates its other workers; once it has shut
            # down, every beacon says what became of its partition.
            pool.shutdown(wait=True)
            diagnosis = PoolBreak.read(beacons, [item.partition.ordinal for item in broken])
            for item in broken:
                _settle_broken(run, item, diagnosis)
                _complete(run, item.partition)
    finally:
        if own:
            pool.shutdown(wait=True)
        if beacons is not None:
            shutil.rmtree(beacons.directory, ignore_errors=True)
    return fenced


def _settle_worker(run: JobRun, item: PartitionWork, error: BaseException | None) -> None:
    """End a worker step its worker left active: STOPPED when the stop was seen
    as it started (before its step context was entered), else FAILED (a start
    that failed); its partition can then be completed."""
    step = run.client.step(item.worker_step.id)
    if step.status.is_active and isinstance(error, StopRequested):
        _stop(run, step)
    elif step.status.is_active:
        _fail(run, step, item, f"worker of partition {item.partition.ordinal} left its step active")


def _settle_broken(run: JobRun, item: PartitionWork, diagnosis: PoolBreak) -> None:
    """End the worker step of a partition a broken pool left: FAILED when its
    worker process is the one that died (or which one died is not known), else
    STOPPED — a healthy worker the pool stopped, or one that never started, is
    not blamed (the parent takes the dead worker's failure)."""
    step = run.client.step(item.worker_step.id)
    if not step.status.is_active:
        return
    ordinal = item.partition.ordinal
    what = diagnosis.what_became_of(ordinal)
    if diagnosis.died(ordinal) is not None or not diagnosis.dead:
        _fail(run, step, item, what)
    else:
        log.warning("partition %d stopped: %s", ordinal, what)
        _stop(run, step)


def _stop(run: JobRun, step: Step) -> None:
    client, token = run.client, run.watch.owner_token
    if step.status is BatchStatus.STARTING:
        starting = step
        step = run.watch.write(
            step.id,
            lambda: client.transition_step(
                starting, starting.version, BatchStatus.STOPPING, owner_token=token
            ),
        )
    stopping = step
    run.watch.write(
        step.id,
        lambda: client.transition_step(
            stopping, stopping.version, BatchStatus.STOPPED, owner_token=token
        ),
    )


def _fail(run: JobRun, step: Step, item: PartitionWork, what: str) -> None:
    client, token = run.client, run.watch.owner_token
    failure = report_failure(RuntimeError(what), f"partition {item.partition.ordinal}")
    run.watch.write(
        step.id,
        lambda: client.transition_step(
            step, step.version, BatchStatus.FAILED, failure=failure, owner_token=token
        ),
    )


# -- remote partitions: the manager ------------------------------------------------------


#: ``OXIDE_BATCH_PARTITION_RETRY_LIMIT``'s default: what a manager assumes of a
#: server whose partition list carries no summary.
DEFAULT_PARTITION_RETRY_LIMIT = 3


@dataclass(frozen=True)
class PlanState:
    """One read of the plan, as the manager judges it."""

    settled: bool  # nothing claimable or running: aggregate now
    exhausted: bool  # a partition FAILED with no retry left (the parent may have failed)
    running: bool  # a partition is STARTED (a worker holds it)


def plan_state(
    partitions: Sequence[Partition], summary: PlanSummary | None, limit: int
) -> PlanState:
    """The server's summary decides (it knows its retry limit); without one,
    the partitions are judged against ``limit``."""
    running = any(p.status is BatchStatus.STARTED for p in partitions)
    failed = sum(1 for p in partitions if p.status is BatchStatus.FAILED)
    if summary is not None:
        unassigned = sum(
            1
            for p in partitions
            if p.status is BatchStatus.STARTING and p.worker_step_execution_id is None
        )
        retryable = summary.claimable - unassigned
        return PlanState(summary.settled, failed > retryable, running)
    exhausted = any(p.status is BatchStatus.FAILED and p.retries >= limit for p in partitions)
    settled = all(
        p.worker_step_execution_id is not None
        and p.status in RUNTIME_TERMINAL
        and (p.status is not BatchStatus.FAILED or p.retries >= limit)
        for p in partitions
    )
    return PlanState(settled, exhausted, running)


def run_remote_partitioned_step(
    run: JobRun,
    name: str,
    keys: Sequence[str | tuple[str, Mapping[str, Any]]],
    *,
    interval: float,
    retry_limit: int | None = None,
    sleep: Callable[[float], Any] = time.sleep,
) -> Step:
    """:meth:`JobRun.remote_partitioned_step`. The parent is created, STARTED
    and planned as for the local pool; its partitions are then claimed and run
    by remote workers (:mod:`oxide_batch.client.workers`). The manager waits
    with one request per ``interval`` — ``GET steps/{parent}/partitions``,
    whose summary says when the plan is settled — and then aggregates. A stop
    or a fence is what the execution heartbeat last saw (no request of its
    own). A partition FAILED with no retry left makes it read the parent: the
    watchdog fails the parent with it. ``retry_limit`` is assumed only of a
    server whose answer carries no summary (default 3)."""
    if interval <= 0:
        raise ValueError("interval must be positive")
    started = _start_parent(run, name, keys)
    if isinstance(started, Step):
        return started
    parent, partitions = started
    limit = DEFAULT_PARTITION_RETRY_LIMIT if retry_limit is None else retry_limit
    log.info(
        "partitioned step %r (step %d): %d partitions planned for remote workers",
        name,
        parent.id,
        len(partitions),
    )
    client = run.client
    while True:
        state = plan_state(*client.partition_plan(parent), limit)
        if state.exhausted:
            current = client.step(parent.id)
            if not current.status.is_active:
                return _outcome(run, current)
        if state.settled:
            return _aggregated(run, client.step(parent.id))
        try:
            run.heartbeat_saw()
        except StopRequested:
            return _stop_remote(run, parent, interval, limit, sleep)
        sleep(interval)


def _stop_remote(
    run: JobRun, parent: Step, interval: float, limit: int, sleep: Callable[[float], Any]
) -> Step:
    """A stop was requested: every running worker stops at its next chunk
    boundary and completes its partition STOPPED; claims answer ``stopping``.
    Wait (one read of the partitions per interval, at most a lease TTL and two
    intervals) until no partition is STARTED, then aggregate when every
    partition is done, else end the parent STOPPED; ``StopRequested``."""
    client = run.client
    lease = run.execution.lease
    deadline = time.monotonic() + (lease.ttl_seconds if lease else 60.0) + 2 * interval
    while True:
        state = plan_state(*client.partition_plan(parent), limit)
        if state.settled:
            return _aggregated(run, client.step(parent.id))
        # A STARTED partition's worker is still at work, or dead and not yet
        # recovered (the watchdog then makes it FAILED).
        if not state.running or time.monotonic() >= deadline:
            break
        sleep(interval)
    current = client.step(parent.id)
    if current.status.is_active:
        token = run.watch.owner_token
        run.watch.write(
            current.id,
            lambda: client.transition_step(
                current, current.version, BatchStatus.STOPPED, owner_token=token
            ),
        )
    raise StopRequested(run.execution.id)
