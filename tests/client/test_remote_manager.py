"""Remote partitions against a live server, in process: the manager
(``run.remote_partitioned_step``) in the test's thread, workers
(``client.partition_worker``) in threads of their own — no pool, no shared
plan: each worker only claims. How the manager waits (one request per
interval), what a worker's failure does (retried, then the parent and the job
FAILED with it), a stop. Real processes and a SIGKILL:
``tests/client/test_remote_partitions.py``.

On SQLite the live server shares one connection between its request threads,
so there every request goes one at a time (the conftest's client, serialized)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from oxide_batch import models
from oxide_batch.client import OperatorClient, Partition, StepFailed, StepRun
from oxide_batch.client.workers import WorkerReport
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository import FixedClock
from oxide_batch.services import bootstrap
from oxide_batch.services.audit import Actor
from tests.client.conftest import ScriptedClient
from tests.conftest import on_postgres

S = BatchStatus
JOB = "remote_import"
PARAMETERS = {"business_date": "2026-07-29"}
KEYS = [f"city-{n}" for n in range(6)]
INTERVAL = 0.05
WAIT = 20.0


@pytest.fixture
def runtime(
    runtime: ScriptedClient, operator: OperatorClient, monkeypatch: pytest.MonkeyPatch
) -> ScriptedClient:
    """The conftest's runtime client; on SQLite, one request at a time (the
    operator's too)."""
    if not on_postgres():
        lock = threading.RLock()
        for client in (runtime, operator):
            send = client._request

            def serial(*args: Any, send: Any = send, **kwargs: Any) -> tuple[int, Any]:
                with lock:
                    answer: tuple[int, Any] = send(*args, **kwargs)
                    return answer

            monkeypatch.setattr(client, "_request", serial)
    return runtime


class Workers:
    """``count`` workers in threads, each looping ``partition_worker`` on the
    step named ``load`` of the execution, once it exists."""

    def __init__(self, client: ScriptedClient, work: Callable[[StepRun, Partition], None]) -> None:
        self.client = client
        self.work = work
        self.reports: list[WorkerReport] = []
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []

    def start(self, execution_id: int, count: int) -> None:
        for n in range(count):
            thread = threading.Thread(target=self._loop, args=(execution_id,), name=f"w{n}")
            thread.start()
            self.threads.append(thread)

    def _loop(self, execution_id: int) -> None:
        try:
            self.reports.append(
                self.client.partition_worker(
                    execution_id, self.work, step_name="load", interval=INTERVAL
                )
            )
        except BaseException as error:  # reported by join()
            self.errors.append(error)

    def join(self) -> list[WorkerReport]:
        for thread in self.threads:
            thread.join(timeout=WAIT)
            assert not thread.is_alive(), "a worker did not return"
        assert not self.errors, self.errors
        return self.reports


def rows_of(parent_id: int) -> dict[str, tuple[str, int, int]]:
    partitions = models.StepPartition.objects.filter(step_execution_id=parent_id)
    return {
        key: (status, read, retries)
        for key, status, read, retries in partitions.values_list(
            "partition_key", "status", "read_count", "retries"
        )
    }


def three_chunks(step: StepRun, partition: Partition) -> None:
    offset = int(step.checkpoint["offset"]) if step.checkpoint else 0
    while offset < 30:
        offset += 10
        step.commit(read=10, written=10, checkpoint={"offset": offset})


def manager_requests(client: ScriptedClient, parent_id: int) -> list[str]:
    """The manager's requests about the parent once it planned: it is the only
    one that reads the partition list, the parent, or aggregates."""
    return [
        f"{method} {path.rsplit('/', 1)[-1]}"
        for method, path, _ in client.sent
        if path.endswith((f"steps/{parent_id}/partitions", f"steps/{parent_id}/aggregate"))
        or (method == "GET" and path.endswith(f"steps/{parent_id}"))
    ]


def test_workers_claim_every_partition_and_the_manager_aggregates_them(
    runtime: ScriptedClient,
) -> None:
    workers = Workers(runtime, three_chunks)
    run = runtime.job_run(JOB, PARAMETERS)
    with run:
        workers.start(run.execution.id, 3)
        parent = run.remote_partitioned_step("load", KEYS, interval=INTERVAL, retry_limit=3)
    reports = workers.join()

    assert (parent.status, parent.counts.read, parent.counts.written) == (S.COMPLETED, 180, 180)
    assert runtime.execution(run.execution.id).status is S.COMPLETED
    assert rows_of(parent.id) == {key: ("COMPLETED", 30, 0) for key in KEYS}
    # Every partition ran once, by whichever worker claimed it; all returned "finished".
    done = sorted(ordinal for report in reports for ordinal in report.completed)
    assert done == list(range(1, len(KEYS) + 1))
    assert {report.reason for report in reports} == {"finished"}
    # Each worker step has its own owner token, never the execution's.
    workers_steps = models.StepExecution.objects.filter(claimed_partition_id__isnull=False)
    tokens = {bytes(token or b"") for token in workers_steps.values_list("owner_token", flat=True)}
    assert len(tokens) == len(KEYS)
    assert bytes(run.owner_token) not in tokens
    # The manager waited with one request per interval (the partition list),
    # then read the parent once and aggregated.
    sent = manager_requests(runtime, parent.id)
    assert sent[0] == "POST partitions"  # the plan
    assert set(sent[1:-2]) == {"GET partitions"}
    assert sent[-2:] == [f"GET {parent.id}", "POST aggregate"]


def test_a_failing_partition_is_retried_then_fails_the_parent_and_the_job(
    runtime: ScriptedClient, settings: Any
) -> None:
    settings.OXIDE_BATCH_PARTITION_RETRY_LIMIT = 1
    tries: list[Any] = []

    def fails_on_city_2(step: StepRun, partition: Partition) -> None:
        if partition.key == "city-2":
            tries.append(step.checkpoint)
            step.commit(read=5, checkpoint={"offset": 5 * len(tries)})
            raise ValueError("row 7 is bad")
        three_chunks(step, partition)

    workers = Workers(runtime, fails_on_city_2)
    run = runtime.job_run(JOB, PARAMETERS)

    def job() -> None:
        with run:
            workers.start(run.execution.id, 2)
            run.remote_partitioned_step("load", KEYS, interval=INTERVAL, retry_limit=1)

    with pytest.raises(StepFailed) as failed:
        job()
    reports = workers.join()

    # The retry took over the failed worker's checkpoint; one retry, then no more.
    assert tries == [None, {"offset": 5}]
    parent_id = failed.value.step_id
    assert rows_of(parent_id)["city-2"] == ("FAILED", 10, 1)  # counts carried over
    assert sum(len(report.failed) for report in reports) == 2
    execution = runtime.execution(run.execution.id)
    parent = runtime.step(parent_id)
    assert (execution.status, parent.status) == (S.FAILED, S.FAILED)
    # The job ends with the failing worker's failure: one failure id tells the story.
    assert parent.failure is not None
    assert execution.failure == parent.failure
    last = models.StepExecution.objects.filter(
        claimed_partition_id__isnull=False, step_name__startswith="load:3"
    ).latest("id")
    assert last.failure_id == parent.failure.failure_id


def test_a_stop_stops_every_worker_the_parent_and_the_job(
    runtime: ScriptedClient, operator: OperatorClient
) -> None:
    started = threading.Barrier(3, timeout=WAIT)
    released = threading.Event()

    def slow(step: StepRun, partition: Partition) -> None:
        step.commit(read=10, written=10, checkpoint={"offset": 10})
        if partition.ordinal <= 2:
            started.wait()
            released.wait(WAIT)
        step.commit(read=10, written=10, checkpoint={"offset": 20})

    workers = Workers(runtime, slow)
    run = runtime.job_run(JOB, PARAMETERS, poll_interval=0.1)

    def stop_when_both_are_mid_partition() -> None:
        started.wait()
        execution = runtime.execution(run.execution.id)
        operator.stop(execution, execution.version, operation_id="stop-remote")
        released.set()

    stopper = threading.Thread(target=stop_when_both_are_mid_partition)
    with run:
        workers.start(run.execution.id, 2)
        stopper.start()
        run.remote_partitioned_step("load", KEYS, interval=INTERVAL, retry_limit=3)
        pytest.fail("a STOPPED remote step raises StopRequested")  # swallowed by the run
    stopper.join(timeout=WAIT)
    reports = workers.join()

    assert {report.reason for report in reports} == {"stopping"}
    assert sorted(o for report in reports for o in report.stopped) == [1, 2]
    execution = runtime.execution(run.execution.id)
    assert execution.status is S.STOPPED
    parent = models.StepExecution.objects.get(job_execution_id=execution.id, step_name="load")
    assert parent.status == "STOPPED"
    rows = rows_of(parent.pk)
    assert (rows["city-0"], rows["city-1"]) == (("STOPPED", 20, 0), ("STOPPED", 20, 0))
    # The others never started: nobody claims during a stop.
    assert {rows[key][0] for key in KEYS[2:]} == {"STARTING"}


@pytest.mark.postgres
def test_a_parent_the_watchdog_fails_over_the_retry_limit_fails_the_job_with_its_failure(
    runtime: ScriptedClient, server_clock: FixedClock, settings: Any
) -> None:
    ttl = timedelta(seconds=5)
    settings.OXIDE_BATCH_LEASE_TTL = "5s"
    settings.OXIDE_BATCH_PARTITION_RETRY_LIMIT = 0  # the first lost worker fails the parent
    run = runtime.job_run(JOB, PARAMETERS, poll_interval=0.1)
    lost: list[int] = []

    def a_worker_dies_and_the_watchdog_passes() -> None:
        parent = wait_for_plan(run.execution.id)
        claim = runtime.claim_partition(parent, b"\x01" * 16)  # then never writes
        assert claim.claimed
        lost.append(claim.worker_step.id)  # type: ignore[union-attr]
        server_clock.advance(ttl - timedelta(seconds=1))
        time.sleep(0.5)  # the manager's heartbeat observes: its lease is renewed
        server_clock.advance(timedelta(seconds=2))  # the worker's lease has expired
        service = bootstrap.operator_service(
            bootstrap.repository(server_clock), stale_after=timedelta(minutes=15), lease_ttl=ttl
        )
        try:
            bootstrap.watchdog(service, actor=Actor("watchdog@test-host")).run_pass()
        finally:
            connection.close()  # this thread's own session

    dies = threading.Thread(target=a_worker_dies_and_the_watchdog_passes)

    def job() -> None:
        with run:
            dies.start()
            run.remote_partitioned_step("load", KEYS, interval=INTERVAL)

    with pytest.raises(StepFailed) as failed:
        job()
    dies.join(timeout=WAIT)

    parent = runtime.step(failed.value.step_id)
    execution = runtime.execution(run.execution.id)
    assert (parent.status, parent.exit_code) == (S.FAILED, "PARTITION_RETRY_LIMIT")
    assert execution.status is S.FAILED
    assert parent.failure is not None
    assert execution.failure == parent.failure  # the job ends with the parent's failure
    decision = models.WorkerRecovery.objects.get(worker_step_execution_id=lost[0])
    assert (decision.reason_code, decision.parent_failed) == ("LEASE_EXPIRED", True)
    assert not models.RecoveryDecision.objects.exists()  # the manager was never recovered


def wait_for_plan(execution_id: int) -> int:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        parent = models.StepExecution.objects.filter(
            job_execution_id=execution_id, step_name="load", status="STARTED"
        ).first()
        if (
            parent is not None
            and models.StepPartition.objects.filter(step_execution_id=parent.pk).exists()
        ):
            return parent.pk
        time.sleep(0.02)
    pytest.fail("the manager did not plan")
