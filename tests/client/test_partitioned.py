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
from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.client import (
    OperatorClient,
    Partition,
    StepFailed,
    StepRun,
    StopRequested,
)
from oxide_batch.domain.status import BatchStatus, FailureCategory
from tests.client.conftest import ScriptedClient
from tests.conftest import on_postgres

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
