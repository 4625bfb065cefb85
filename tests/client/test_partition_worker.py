"""The remote partition worker's loop (``client.partition_worker``) against a
recording fake of the runtime API: what it claims, writes and returns for each
answer of the claim (wire of issue 43). The real server and real processes:
``tests/client/test_remote_partitions.py``."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from oxide_batch.client import Partition, RuntimeClient, StepRun
from oxide_batch.client.models import Control, Lease, Step, WriteControl
from oxide_batch.client.workers import (
    NothingClaimed,
    PartitionClaim,
    claim_from_json,
    partition_worker,
)
from oxide_batch.domain.errors import ExecutionOwned, PartitionParentNotActive
from oxide_batch.domain.execution import ExecutionCounts
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.status import BatchStatus

NOW = datetime(2026, 7, 29, 12, tzinfo=UTC)
EXECUTION = 7
PARENT = 70


def a_step(step_id: int, status: BatchStatus, **changes: Any) -> Step:
    return Step(
        id=step_id,
        job_instance_id=1,
        status=status,
        exit_code="EXECUTING",
        created_at=NOW,
        started_at=NOW,
        ended_at=None,
        updated_at=NOW,
        counts=ExecutionCounts(),
        failure=None,
        version=2,
        job_execution_id=EXECUTION,
        step_name=f"load:{step_id}",
        node_id=f"load:{step_id}",
        **changes,
    )


def a_partition(ordinal: int, worker: int) -> Partition:
    return Partition(
        id=100 + ordinal,
        step_execution_id=PARENT,
        key=f"city-{ordinal}",
        ordinal=ordinal,
        status=BatchStatus.STARTED,
        exit_code="EXECUTING",
        counts=ExecutionCounts(),
        version=3,
        worker_step_execution_id=worker,
    )


def claimed(ordinal: int, *, offset: int | None = None, ttl: int = 60) -> PartitionClaim:
    worker = 1000 + ordinal
    checkpoint = None
    if offset is not None:
        checkpoint = StateEnvelope("oxide_batch.checkpoint", 1, {"offset": offset})
    return PartitionClaim(
        a_partition(ordinal, worker),
        0 if offset is None else 1,
        a_step(worker, BatchStatus.STARTED),
        checkpoint,
        None,
        Lease(ttl, NOW + timedelta(seconds=ttl)),
        None,
    )


def nothing(reason: str) -> NothingClaimed:
    return NothingClaimed(reason, a_step(PARENT, BatchStatus.STARTED), None)


class FakeRuntime(RuntimeClient):
    """The runtime API's answers from a script; every request recorded. A
    chunk commit answers the control state ``control`` says (a stop, a fence)."""

    def __init__(self, answers: list[Any]) -> None:
        super().__init__("http://fake.invalid", "token", retry_budget=0)
        self.answers = answers
        self.calls: list[tuple[str, Any, bytes | None]] = []
        self.rows: dict[int, Step] = {}
        self.stop_after_commits: int | None = None
        self.refuse_commits = False
        self.commits = 0
        self.lock = threading.Lock()

    def record(self, name: str, subject: Any, token: bytes | None) -> None:
        with self.lock:
            self.calls.append((name, subject, token))

    def named(self, name: str) -> list[tuple[str, Any, bytes | None]]:
        return [call for call in self.calls if call[0] == name]

    def claim_partition(self, parent_step: Any, owner_token: bytes, **_: Any) -> Any:
        self.record("claim", parent_step, owner_token)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, PartitionClaim):
            self.rows[answer.worker_step.id] = answer.worker_step
        return answer

    def commit_chunk(  # type: ignore[override]
        self,
        step: Any,
        expected_version: int,
        counts: Any = None,
        *args: Any,
        finish: Any = None,
        owner_token: bytes | None = None,
        **_: Any,
    ) -> Step:
        self.record("commit", step.id, owner_token)
        if self.refuse_commits:
            raise ExecutionOwned(id=EXECUTION)
        self.commits += 1
        stop = self.stop_after_commits is not None and self.commits >= self.stop_after_commits
        row = dataclasses.replace(
            self.rows[step.id],
            version=expected_version + 1,
            counts=self.rows[step.id].counts.plus(counts or ExecutionCounts()),
            status=BatchStatus(finish) if finish else self.rows[step.id].status,
            control=WriteControl(stop_requested=stop, owner_matches=True, fenced=False),
        )
        self.rows[step.id] = row
        return row

    def transition_step(  # type: ignore[override]
        self,
        step: Any,
        expected_version: int,
        status: Any,
        *,
        owner_token: bytes | None = None,
        **_: Any,
    ) -> Step:
        self.record("transition", (step.id, BatchStatus(status)), owner_token)
        row = dataclasses.replace(
            self.rows[step.id], version=expected_version + 1, status=BatchStatus(status)
        )
        self.rows[step.id] = row
        return row

    def complete_partition(  # type: ignore[override]
        self,
        partition: Any,
        expected_version: int,
        worker: Any,
        *,
        owner_token: bytes | None = None,
    ) -> Partition:
        self.record("complete", (partition.ordinal, worker.id), owner_token)
        status = self.rows[worker.id].status
        done: Partition = dataclasses.replace(
            partition, status=status, version=expected_version + 1
        )
        return done

    def observe_control(self, execution: Any, owner_token: bytes) -> Control:
        self.record("observe", execution, owner_token)
        return cast(Control, None)  # the worker's heartbeat reads no answer

    def step(self, step_id: int) -> Step:
        return self.rows.get(step_id) or a_step(step_id, BatchStatus.STARTED)


def chunks(size: int, total: int, pause: float = 0.0) -> Callable[[StepRun, Partition], None]:
    def work(step: StepRun, partition: Partition) -> None:
        offset = int(step.checkpoint["offset"]) if step.checkpoint else 0
        while offset < total:
            time.sleep(pause)
            offset += size
            step.commit(read=size, written=size, checkpoint={"offset": offset})

    return work


def test_the_loop_claims_runs_ends_and_completes_each_partition_until_finished() -> None:
    fake = FakeRuntime(
        [
            claimed(0),
            claimed(1, offset=20),
            nothing("all_assigned"),
            claimed(2),
            nothing("finished"),
        ]
    )
    seen: list[tuple[int, Any]] = []

    def work(step: StepRun, partition: Partition) -> None:
        seen.append((partition.ordinal, step.checkpoint))
        chunks(10, 30)(step, partition)

    waits: list[float] = []
    report = partition_worker(fake, PARENT, work, interval=0.25, sleep=waits.append)

    assert (report.reason, report.completed, report.failed, report.waits) == (
        "finished",
        [0, 1, 2],
        [],
        1,
    )
    assert waits == [0.25]  # all_assigned: it waited its interval and asked again
    # The second partition resumed at the checkpoint its earlier worker committed.
    assert seen == [(0, None), (1, {"offset": 20}), (2, None)]
    assert [call[1] for call in fake.named("claim")] == [PARENT] * 5
    # Each claim carries a new token; every write of a partition carries its claim's.
    tokens = [call[2] for call in fake.named("claim")]
    assert len(set(tokens)) == 5
    for ordinal, token in ((0, tokens[0]), (1, tokens[1]), (2, tokens[3])):
        worker = 1000 + ordinal
        assert {call[2] for call in fake.named("commit") if call[1] == worker} == {token}
        assert (("transition", (worker, BatchStatus.COMPLETED), token)) in fake.calls
        assert ("complete", (ordinal, worker), token) in fake.calls
    assert len(fake.named("commit")) == 3 + 1 + 3
    assert fake.rows[1001].counts.read == 10  # 20 → 30: one chunk


def never_waits(seconds: float) -> None:
    pytest.fail("the loop waited")


def test_a_stop_ends_the_worker_step_stopped_completes_its_partition_and_the_loop() -> None:
    fake = FakeRuntime([claimed(0), nothing("stopping")])
    fake.stop_after_commits = 2

    report = partition_worker(fake, PARENT, chunks(10, 100), sleep=never_waits)

    assert (report.reason, report.stopped, report.completed) == ("stopping", [0], [])
    assert len(fake.named("commit")) == 2  # it stopped at the boundary that saw it
    assert fake.rows[1000].status is BatchStatus.STOPPED
    assert [call[1] for call in fake.named("complete")] == [(0, 1000)]


def test_a_failing_partition_fails_its_worker_step_and_its_partition_and_the_loop_goes_on() -> None:
    fake = FakeRuntime([claimed(0), claimed(1), nothing("finished")])

    def work(step: StepRun, partition: Partition) -> None:
        step.commit(read=1, checkpoint={"offset": 1})
        if partition.ordinal == 0:
            raise ValueError("bad row")

    report = partition_worker(fake, PARENT, work)

    assert (report.reason, report.failed, report.completed) == ("finished", [0], [1])
    assert fake.rows[1000].status is BatchStatus.FAILED
    # Completed FAILED: the server gives it to the next claimant (retries + 1).
    assert [call[1] for call in fake.named("complete")] == [(0, 1000), (1, 1001)]


def test_a_fenced_worker_writes_nothing_more_and_returns() -> None:
    fake = FakeRuntime([claimed(0), claimed(1)])
    fake.refuse_commits = True

    report = partition_worker(fake, PARENT, chunks(10, 30))

    assert (report.reason, report.partitions) == ("fenced", 0)
    assert [name for name, _, _ in fake.calls] == ["claim", "commit"]


@pytest.mark.parametrize(
    ("refusal", "reason"),
    [
        (PartitionParentNotActive(step_execution_id=PARENT, status=BatchStatus.FAILED), "finished"),
        (ExecutionOwned(id=EXECUTION), "fenced"),
    ],
)
def test_a_refused_claim_ends_the_loop(refusal: Exception, reason: str) -> None:
    fake = FakeRuntime([refusal])
    assert partition_worker(fake, PARENT, chunks(1, 1)).reason == reason
    assert len(fake.calls) == 1


def test_the_heartbeat_keeps_the_worker_lease_alive_with_the_workers_token() -> None:
    # A lease of 1 s: the heartbeat looks every 0.25 s and, once nothing was
    # written for half the TTL, commits an empty chunk while one long chunk runs.
    fake = FakeRuntime([claimed(0, ttl=1), nothing("finished")])

    partition_worker(fake, PARENT, chunks(10, 10, pause=1.4))

    token = fake.named("claim")[0][2]
    commits = fake.named("commit")
    assert 3 <= len(commits) <= 4  # 1-2 keep-alives, then the chunk; none after
    assert {(call[1], call[2]) for call in commits} == {(1000, token)}
    row = fake.rows[1000]
    # The empty chunks moved nothing but the version: the counts are the chunk's.
    assert (row.counts.read, row.counts.committed) == (10, 1)
    assert row.version == 2 + len(commits) + 1  # + the step's end
    committed = len(fake.calls)
    time.sleep(0.6)
    assert len(fake.calls) == committed  # it stopped with its partition


def test_no_keep_alive_while_chunks_come_faster_than_half_the_ttl() -> None:
    fake = FakeRuntime([claimed(0, ttl=1), nothing("finished")])
    partition_worker(fake, PARENT, chunks(1, 8, pause=0.2))
    assert len(fake.named("commit")) == 8


def test_a_parent_not_started_yet_is_asked_again_after_the_interval() -> None:
    starting = PartitionParentNotActive(step_execution_id=PARENT, status=BatchStatus.STARTING)
    fake = FakeRuntime([starting, claimed(0), nothing("finished")])
    waits: list[float] = []

    report = partition_worker(fake, PARENT, chunks(5, 5), interval=0.5, sleep=waits.append)

    assert (report.reason, report.completed, waits) == ("finished", [0], [0.5])


def test_max_partitions_returns_after_that_many() -> None:
    fake = FakeRuntime([claimed(0), claimed(1), claimed(2)])
    report = partition_worker(fake, PARENT, chunks(5, 5), max_partitions=2)
    assert (report.reason, report.completed) == ("enough", [0, 1])
    assert len(fake.answers) == 1


def test_the_claim_answer_parses_both_shapes() -> None:
    step = {
        "id": 1001,
        "job_instance_id": 1,
        "job_execution_id": EXECUTION,
        "step_name": "load:1",
        "node_id": "load:1",
        "status": "STARTED",
        "exit_code": "EXECUTING",
        "created_at": "2026-07-29T12:00:00Z",
        "started_at": "2026-07-29T12:00:00Z",
        "ended_at": None,
        "updated_at": "2026-07-29T12:00:00Z",
        "counts": {"read": 20},
        "failure": None,
        "version": 1,
    }
    control = {"stop_requested": False, "owner_matches": True, "fenced": False}
    partition = {
        "id": 101,
        "step_execution_id": PARENT,
        "key": "Oslo",
        "ordinal": 1,
        "status": "STARTED",
        "exit_code": "EXECUTING",
        "counts": {"read": 20},
        "version": 4,
        "worker_step_execution_id": 1001,
        "retries": 1,
    }
    answer = claim_from_json(
        {
            "claimed": True,
            "partition": partition,
            "worker_step": step,
            "checkpoint": {
                "schema": "oxide_batch.checkpoint",
                "schema_version": 1,
                "payload": {"offset": 20},
            },
            "context": None,
            "lease": {"ttl_seconds": 5, "expires_at": "2026-07-29T12:00:05Z"},
            "control": control,
        }
    )
    assert isinstance(answer, PartitionClaim)
    assert (answer.partition.key, answer.retries, answer.worker_step.id) == ("Oslo", 1, 1001)
    assert answer.checkpoint is not None
    assert answer.checkpoint.payload == {"offset": 20}
    assert answer.lease is not None
    assert answer.lease.ttl_seconds == 5
    nothing_left = claim_from_json(
        {
            "claimed": False,
            "reason": "all_assigned",
            "step": {**step, "id": PARENT},
            "control": control,
        }
    )
    assert isinstance(nothing_left, NothingClaimed)
    assert (nothing_left.reason, nothing_left.step.id, nothing_left.claimed) == (
        "all_assigned",
        PARENT,
        False,
    )
