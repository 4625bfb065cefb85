"""The partitioned step of the runtime helper (``run.partitioned_step``) against a
live server: every way a partitioned step ends — all partitions COMPLETED, a
worker's exception, a stop, a recovery, a worker that never ended its step —
and the two restarts: the previous attempt's plan carried (only what did not
complete runs again, from its own checkpoint), or a fresh plan when there was
none to carry.

Workers run in threads; they meet at a barrier when a test needs the operator
to act while every worker is between two chunks. On SQLite the live server
shares one connection between its request threads, so there the runtime
client sends one request at a time (the workers still run concurrently)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from datetime import timedelta
from typing import Any, TypeVar

import pytest

from oxide_batch import models
from oxide_batch.client import (
    ExecutionFenced,
    OperatorClient,
    Partition,
    StepFailed,
    StepRun,
    StopRequested,
)
from oxide_batch.client.partitioned import PartitionWork
from oxide_batch.domain.errors import ExecutionOwned
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.repository import FixedClock
from tests.client.conftest import ScriptedClient
from tests.conftest import on_postgres

T = TypeVar("T")
S = BatchStatus
JOB = "partitioned_import"
PARAMETERS = {"business_date": "2026-07-29"}
KEYS = ["graz", "lyon", "oslo"]
WAIT = 10.0


class Boom(Exception):
    pass


@pytest.fixture
def runtime(runtime: ScriptedClient, monkeypatch: pytest.MonkeyPatch) -> ScriptedClient:
    """The conftest's runtime client; on SQLite, one request at a time."""
    if not on_postgres():
        lock = threading.RLock()
        send = runtime._request

        def serial(*args: Any, **kwargs: Any) -> tuple[int, Any]:
            with lock:
                return send(*args, **kwargs)

        monkeypatch.setattr(runtime, "_request", serial)
    return runtime


class Calls:
    """What the workers were called with (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[Partition, StepRun]] = []

    def add(self, partition: Partition, step: StepRun) -> None:
        with self.lock:
            self.seen.append((partition, step))

    @property
    def keys(self) -> list[str]:
        return sorted(partition.key for partition, _ in self.seen)

    @property
    def parent_id(self) -> int:
        return self.seen[0][0].step_execution_id

    def step(self, key: str) -> StepRun:
        return next(step for partition, step in self.seen if partition.key == key)


def steps_of(execution_id: int) -> dict[str, BatchStatus]:
    rows = models.StepExecution.objects.filter(job_execution_id=execution_id)
    return {name: S(status) for name, status in rows.values_list("step_name", "status")}


def by_key(partitions: list[Partition]) -> dict[str, Partition]:
    return {partition.key: partition for partition in partitions}


def never(step: StepRun, partition: Partition) -> None:
    pytest.fail("no worker runs")


def meeting(parties: int, action: Callable[[], None]) -> threading.Barrier:
    """Every worker between two chunks, then ``action`` once (the operator)."""
    return threading.Barrier(parties, action=action, timeout=WAIT)


# -------------------------------------------------------------------- completion


def test_all_partitions_complete_and_the_parent_aggregates_their_counts(
    runtime: ScriptedClient,
) -> None:
    calls = Calls()
    contexts: dict[str, Any] = {}

    def worker(step: StepRun, partition: Partition) -> None:
        calls.add(partition, step)
        contexts[partition.key] = None if partition.context is None else partition.context.payload
        for offset in (10, 20):
            step.commit(read=10, written=10 - partition.ordinal, checkpoint={"offset": offset})

    keys: list[str | tuple[str, dict[str, Any]]] = ["graz", ("lyon", {"country": "FR"}), "oslo"]
    with runtime.job_run(JOB, PARAMETERS) as run:
        parent = run.partitioned_step("load", keys, worker)
    assert (parent.status, parent.exit_code) == (S.COMPLETED, "COMPLETED")
    assert calls.keys == KEYS
    assert contexts == {"graz": None, "lyon": {"country": "FR"}, "oslo": None}
    # Summed over the partitions: 3 × 20 read, (9 + 8 + 7) × 2 written, 3 × 2 chunks.
    assert (parent.counts.read, parent.counts.written, parent.counts.committed) == (60, 48, 6)
    partitions = runtime.partitions(parent)
    assert [p.key for p in partitions] == KEYS
    assert [p.ordinal for p in partitions] == [1, 2, 3]
    assert {p.status for p in partitions} == {S.COMPLETED}
    for partition in partitions:
        worker_step = runtime.step(partition.worker_step_execution_id or 0)
        assert worker_step.step_name == f"load:{partition.ordinal}"
        assert worker_step.status is S.COMPLETED
        assert partition.counts == worker_step.counts  # completed from its worker row
    execution = runtime.execution(run.execution.id)
    assert (execution.status, execution.exit_code) == (S.COMPLETED, "COMPLETED")
    assert steps_of(execution.id) == {
        "load": S.COMPLETED,
        "load:1": S.COMPLETED,
        "load:2": S.COMPLETED,
        "load:3": S.COMPLETED,
    }

    # Every write of the run carries the run's owner token, the partitions'
    # included (plan, assignments, completions, aggregation).
    owner = run.owner_token.hex()
    posts = [(path, body) for method, path, body in runtime.sent if method == "POST"]
    assert {path.rsplit("/", 1)[-1] for path, _ in posts} >= {
        "partitions",
        "assign",
        "complete",
        "aggregate",
    }
    assert [path for path, body in posts if body.get("owner_token") != owner] == []


def test_a_partition_write_carrying_another_token_is_refused_and_writes_nothing(
    runtime: ScriptedClient,
) -> None:
    stranger = bytes(16)
    with runtime.job_run(JOB, PARAMETERS) as run:
        created = runtime.create_step(run.execution, "load", owner_token=run.owner_token)
        step = runtime.transition_step(
            created, created.version, S.STARTED, owner_token=run.owner_token
        )
        with pytest.raises(ExecutionOwned):
            runtime.plan_partitions(step, KEYS, owner_token=stranger)
        assert runtime.partitions(step) == []
        (partition,) = runtime.plan_partitions(step, ["graz"], owner_token=run.owner_token)
        worker = runtime.create_step(run.execution, "load:1", owner_token=run.owner_token)
        with pytest.raises(ExecutionOwned):
            runtime.assign_partition(partition, partition.version, worker, owner_token=stranger)
        assert runtime.partitions(step)[0].worker_step_execution_id is None
        assigned = runtime.assign_partition(
            partition, partition.version, worker, owner_token=run.owner_token
        )
        with pytest.raises(ExecutionOwned):
            runtime.complete_partition(assigned, assigned.version, worker, owner_token=stranger)
        assert runtime.partitions(step)[0].version == assigned.version
        with pytest.raises(ExecutionOwned):
            runtime.aggregate(step, step.version, owner_token=stranger)
        assert runtime.step(step.id).version == step.version
        run.exit_code = "REFUSED_AS_EXPECTED"


# ----------------------------------------------------------------------- failure


def test_a_failing_worker_fails_its_step_the_parent_and_the_job_under_its_failure_id(
    runtime: ScriptedClient, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "customer 4711 card 4111-1111"
    calls = Calls()

    def worker(step: StepRun, partition: Partition) -> None:
        calls.add(partition, step)
        step.commit(read=5, written=5, checkpoint={"offset": 5})
        if partition.key == "lyon":
            raise Boom(secret)

    run = runtime.job_run(JOB, PARAMETERS)

    def job() -> None:
        with run:
            run.partitioned_step("load", KEYS, worker)
            pytest.fail("a FAILED partitioned step raises")

    with caplog.at_level(logging.ERROR, "oxide_batch.client.jobs"), pytest.raises(StepFailed) as e:
        job()
    failed = runtime.step(calls.step("lyon").step.id)
    assert (failed.status, failed.exit_code) == (S.FAILED, "FAILED")
    assert failed.failure is not None
    assert failed.failure.category is FailureCategory.USER_COMPONENT
    parent = runtime.step(e.value.step_id)
    assert (parent.step_name, parent.status, e.value.status) == ("load", S.FAILED, "FAILED")
    assert parent.failure == e.value.failure == failed.failure
    statuses = {p.key: p.status for p in runtime.partitions(parent)}
    assert statuses == {"graz": S.COMPLETED, "lyon": S.FAILED, "oslo": S.COMPLETED}
    execution = runtime.execution(run.execution.id)
    assert (execution.status, execution.exit_code) == (S.FAILED, "FAILED")
    assert execution.failure == failed.failure  # one failure id tells the whole story
    # The exception's text travels only as the failure's detail (issue 40).
    details = [
        body["failure"].pop("detail")
        for _, _, body in runtime.sent
        if isinstance(body, dict) and body.get("failure") and "detail" in body["failure"]
    ]
    assert details
    assert {detail["message"] for detail in details} == {secret}
    assert secret not in json.dumps([body for _, _, body in runtime.sent])
    logged = [record for record in caplog.records if record.exc_info]
    assert len(logged) == 1
    assert str(failed.failure.failure_id) in logged[0].getMessage()
    assert secret in str(logged[0].exc_info[1])  # type: ignore[index]


# -------------------------------------------------------------------------- stop


def test_a_stop_during_the_partitions_stops_every_worker_the_parent_and_the_job(
    runtime: ScriptedClient, operator: OperatorClient
) -> None:
    calls = Calls()
    stopped: list[str] = []
    run = runtime.job_run(JOB, PARAMETERS)

    def stop() -> None:
        execution = runtime.execution(run.execution.id)
        operator.stop(execution, execution.version, operation_id="stop-partitions")

    barrier = meeting(len(KEYS), stop)

    def worker(step: StepRun, partition: Partition) -> None:
        calls.add(partition, step)
        step.commit(read=10, written=10, checkpoint={"offset": 10})
        barrier.wait()
        try:
            step.commit(read=10, written=10, checkpoint={"offset": 20})
        except StopRequested:
            stopped.append(partition.key)
            raise
        pytest.fail("the commit after the stop raises StopRequested")

    with run:
        run.partitioned_step("load", KEYS, worker)
        pytest.fail("a STOPPED partitioned step raises StopRequested")  # swallowed by run
    assert sorted(stopped) == KEYS
    execution = runtime.execution(run.execution.id)
    assert (execution.status, execution.exit_code) == (S.STOPPED, "STOPPED")
    assert steps_of(execution.id) == {
        "load": S.STOPPED,
        "load:1": S.STOPPED,
        "load:2": S.STOPPED,
        "load:3": S.STOPPED,
    }
    for key in KEYS:
        # The chunk committed before the stop was seen is kept for the restart.
        state = runtime.checkpoint(calls.step(key).step)
        assert state.checkpoint is not None
        assert state.checkpoint.payload == {"offset": 20}
    assert {p.status for p in runtime.partitions(calls.parent_id)} == {S.STOPPED}


def test_a_stop_before_some_workers_started_ends_their_steps_stopped_not_failed(
    runtime: ScriptedClient, operator: OperatorClient
) -> None:
    keys = ["a", "b", "c", "d"]
    calls = Calls()
    run = runtime.job_run(JOB, PARAMETERS)

    def stop() -> None:
        execution = runtime.execution(run.execution.id)
        operator.stop(execution, execution.version, operation_id="stop-early")

    barrier = meeting(2, stop)  # the first two workers; the others are still queued

    def worker(step: StepRun, partition: Partition) -> None:
        calls.add(partition, step)
        step.commit(read=1, checkpoint={"offset": 1})
        barrier.wait()
        step.commit(read=1, checkpoint={"offset": 2})

    with run:
        run.partitioned_step("load", keys, worker, max_workers=2)
    assert calls.keys == ["a", "b"]  # the queued ones saw the stop as they started
    execution = runtime.execution(run.execution.id)
    assert (execution.status, execution.failure) == (S.STOPPED, None)
    assert set(steps_of(execution.id).values()) == {S.STOPPED}
    partitions = runtime.partitions(calls.parent_id)
    assert {p.status for p in partitions} == {S.STOPPED}


# ---------------------------------------------------------------------- recovery


def test_a_recovery_while_workers_run_fences_them_and_the_run_writes_nothing_more(
    runtime: ScriptedClient, operator: OperatorClient, server_clock: FixedClock
) -> None:
    calls = Calls()
    fenced: list[str] = []
    run = runtime.job_run(JOB, PARAMETERS)
    after: list[tuple[int, int]] = []

    def recover() -> None:
        server_clock.advance(timedelta(minutes=20))
        proposal = operator.proposal(run.execution.id)
        assert proposal.eligible, proposal.reason_code
        operator.recover(
            proposal, disposition="MARK_FAILED", reason_code="WORKER_LOST", operation_id="rec-p"
        )
        after.append((runtime.execution(run.execution.id).version, len(runtime.sent)))

    barrier = meeting(len(KEYS), recover)

    def worker(step: StepRun, partition: Partition) -> None:
        calls.add(partition, step)
        step.commit(read=10, written=10, checkpoint={"offset": 10})
        barrier.wait()
        try:
            step.commit(read=10, written=10, checkpoint={"offset": 20})
        except ExecutionFenced:
            fenced.append(partition.key)
            raise

    def job() -> None:
        with run:
            run.partitioned_step("load", KEYS, worker)

    with pytest.raises(ExecutionFenced):
        job()
    assert sorted(fenced) == KEYS
    version, sent = after[0]
    execution = runtime.execution(run.execution.id)
    assert (execution.status, execution.version) == (S.FAILED, version)
    assert execution.failure is not None
    assert execution.failure.category is FailureCategory.STALE_RECOVERED
    assert set(steps_of(execution.id).values()) == {S.FAILED}  # as recovery left them
    # After the recovery: each worker's refused commit, nothing else.
    posts = sorted(path for method, path, _ in runtime.sent[sent:] if method == "POST")
    assert posts == sorted(f"steps/{calls.step(key).step.id}/checkpoint" for key in KEYS)
    assert {p.status for p in runtime.partitions(calls.parent_id)} != {S.COMPLETED}


# ------------------------------------------------------------ a worker left active


class DyingExecutor(ThreadPoolExecutor):
    """Threads, but the worker of partition ``lost`` dies as a process would: its
    step entered and a chunk committed, then its future fails with
    ``BrokenProcessPool`` and no step context ever ends the step."""

    def __init__(self, lost: str) -> None:
        super().__init__(max_workers=4)
        self.lost = lost

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        work = args[0]
        if isinstance(work, PartitionWork) and work.partition.key == self.lost:
            return super().submit(_die_mid_step, work)  # type: ignore[arg-type]
        return super().submit(fn, *args, **kwargs)


def _die_mid_step(work: PartitionWork) -> None:
    step = StepRun(work.watch, work.worker_step.step_name, created=work.worker_step)
    step.__enter__()
    step.commit(read=3, written=3, checkpoint={"offset": 3})
    raise BrokenProcessPool("A process in the process pool was terminated abruptly")


def test_a_worker_step_left_active_is_ended_failed_by_the_parent(
    runtime: ScriptedClient,
) -> None:
    def worker(step: StepRun, partition: Partition) -> None:
        step.commit(read=5, written=5, checkpoint={"offset": 5})

    run = runtime.job_run(JOB, PARAMETERS)

    def job() -> None:
        with run, DyingExecutor("lyon") as executor:
            run.partitioned_step("load", KEYS, worker, executor=executor)

    with pytest.raises(StepFailed) as failed:
        job()
    partitions = by_key(runtime.partitions(failed.value.step_id))
    assert {key: p.status for key, p in partitions.items()} == {
        "graz": S.COMPLETED,
        "lyon": S.FAILED,
        "oslo": S.COMPLETED,
    }
    lost = runtime.checkpoint(partitions["lyon"].worker_step_execution_id or 0)
    assert lost.step.status is S.FAILED
    assert lost.step.counts.read == 3  # what it committed before it died is kept
    assert lost.checkpoint is not None
    assert lost.checkpoint.payload == {"offset": 3}
    assert lost.step.failure is not None
    assert lost.step.failure.category is FailureCategory.USER_COMPONENT
    parent = runtime.step(failed.value.step_id)
    assert parent.status is S.FAILED
    assert parent.failure == lost.step.failure
    execution = runtime.execution(run.execution.id)
    assert execution.status is S.FAILED
    assert execution.failure == lost.step.failure


# ---------------------------------------------------------------------- restarts


def test_a_restart_reruns_only_what_did_not_complete_from_its_own_checkpoint(
    runtime: ScriptedClient,
) -> None:
    def first(step: StepRun, partition: Partition) -> None:
        step.commit(read=5, written=5, checkpoint={"offset": 5})
        if partition.key == "lyon":
            raise Boom("row 6 is malformed")
        step.commit(read=5, written=5, checkpoint={"offset": 10})

    def attempt_one() -> None:
        with runtime.job_run(JOB, PARAMETERS) as run:
            run.partitioned_step("load", KEYS, first)

    with pytest.raises(StepFailed) as failed:
        attempt_one()
    earlier = by_key(runtime.partitions(failed.value.step_id))

    calls = Calls()
    resumed_at: dict[str, Any] = {}

    def second(step: StepRun, partition: Partition) -> None:
        calls.add(partition, step)
        resumed_at[partition.key] = step.checkpoint
        offset = int(step.checkpoint["offset"]) if step.checkpoint else 0
        step.commit(read=10 - offset, written=10 - offset, checkpoint={"offset": 10})

    runtime.sent.clear()
    with runtime.job_run(JOB, PARAMETERS) as run:
        assert run.restarted
        parent = run.partitioned_step("load", KEYS, second)
    assert calls.keys == ["lyon"]  # one worker: the partition that failed
    owner = run.owner_token.hex()
    posts = [(path, body) for method, path, body in runtime.sent if method == "POST"]
    assert any(path.endswith("/partitions/restart") for path, _ in posts)  # the plan carried
    assert [path for path, body in posts if body.get("owner_token") != owner] == []
    assert resumed_at == {"lyon": {"offset": 5}}  # its earlier worker's checkpoint
    assert parent.status is S.COMPLETED
    assert (parent.counts.read, parent.counts.written) == (30, 30)  # every row once
    assert steps_of(run.execution.id) == {"load": S.COMPLETED, "load:2": S.COMPLETED}
    carried = by_key(runtime.partitions(parent))
    assert [p.ordinal for p in carried.values()] == [1, 2, 3]
    for key in ("graz", "oslo"):  # carried: the first attempt's worker and counts
        assert carried[key].status is S.COMPLETED
        assert carried[key].worker_step_execution_id == earlier[key].worker_step_execution_id
        assert carried[key].counts == earlier[key].counts
    assert carried["lyon"].worker_step_execution_id == calls.step("lyon").step.id
    assert runtime.execution(run.execution.id).status is S.COMPLETED


def test_a_restart_after_an_attempt_that_failed_before_the_partitioned_step_plans_afresh(
    runtime: ScriptedClient,
) -> None:
    def attempt_one() -> None:
        with runtime.job_run(JOB, PARAMETERS) as run, run.step("extract"):
            raise Boom("the source is gone")

    with pytest.raises(Boom):
        attempt_one()
    calls = Calls()

    def worker(step: StepRun, partition: Partition) -> None:
        calls.add(partition, step)
        assert step.checkpoint is None
        step.commit(read=1, written=1, checkpoint={"offset": 1})

    with runtime.job_run(JOB, PARAMETERS) as run:
        assert run.restarted
        parent = run.partitioned_step("load", KEYS, worker)
    assert calls.keys == KEYS
    assert [p.key for p in runtime.partitions(parent)] == KEYS
    assert (parent.status, parent.counts.read) == (S.COMPLETED, 3)
    assert runtime.execution(run.execution.id).status is S.COMPLETED


def test_a_restart_after_an_attempt_that_failed_while_planning_plans_afresh(
    runtime: ScriptedClient,
) -> None:
    def attempt_one() -> None:
        with runtime.job_run(JOB, PARAMETERS) as run:
            runtime.refuse("POST", "/partitions", Boom("the planner is gone"))
            run.partitioned_step("load", KEYS, never)

    with pytest.raises(Boom):
        attempt_one()
    calls = Calls()

    def worker(step: StepRun, partition: Partition) -> None:
        calls.add(partition, step)
        step.commit(read=1, written=1, checkpoint={"offset": 1})

    with runtime.job_run(JOB, PARAMETERS) as run:
        assert runtime.latest_flow_step(run.instance.id, "load") is not None  # attempt 1's
        parent = run.partitioned_step("load", KEYS, worker)
    assert calls.keys == KEYS
    assert (parent.status, parent.counts.read) == (S.COMPLETED, 3)
    assert runtime.execution(run.execution.id).status is S.COMPLETED
