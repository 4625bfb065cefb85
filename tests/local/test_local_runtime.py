"""``oxide_batch.local.LocalRuntime`` in process: each chunk is one transaction
with the job's own writes (contract §4.9, issue 42 point 3).

- the chunks' rows commit with their counts and checkpoint; the launch and the
  step's start commit on their own;
- an exception in the work rolls its chunk's rows back, then the step ends FAILED;
- ``attempt_scope()`` is a savepoint: a failed attempt's rows go, the chunk stays;
- a fenced runtime's chunk commit is refused and its rows go with it (PostgreSQL:
  the operator acts from another connection while the chunk is open);
- a stop request is honoured at the next chunk boundary;
- ``user=None`` records no runtime user; a named user is recorded as the claimant;
- refusals carry the API's own ``code`` (the same views answer);
- a chunk commit costs the API view's statements plus its savepoint.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.api import deps
from oxide_batch.client import ApiError, ExecutionFenced, StepRun
from oxide_batch.domain.errors import (
    CommitOutcomeUnknown,
    InvalidCharacters,
    NameTooLong,
    StepExecutionNotFound,
)
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.local import LocalRuntime
from oxide_batch.services.audit import Actor
from tests.local.records import Record

pytestmark = pytest.mark.django_db(transaction=True)

# The heartbeat stays quiet in these tests: the chunk boundaries observe.
QUIET = 3600.0


def write(step: StepRun, start: int, count: int) -> int:
    """``count`` records from ``start`` (the ORM, in the open chunk); the next start."""
    Record.objects.bulk_create(Record(key=key) for key in range(start, start + count))
    return start + count


def loader(chunks: int, size: int, *, last: bool = True) -> Callable[[StepRun], None]:
    def load(step: StepRun) -> None:
        offset = (step.checkpoint or {}).get("offset", 0)
        for number in range(chunks):
            offset = write(step, offset, size)
            step.commit(
                read=size,
                written=size,
                checkpoint={"offset": offset},
                last=last and number == chunks - 1,
            )

    return load


def keys() -> list[int]:
    return sorted(Record.objects.values_list("key", flat=True))


def the_step(execution_id: int) -> models.StepExecution:
    return models.StepExecution.objects.get(job_execution_id=execution_id)


def test_chunks_commit_with_their_rows_counts_and_checkpoint(records: Any, importer: str) -> None:
    runtime = LocalRuntime(user=importer)
    with runtime.job_run("local_import", {"day": "1"}, poll_interval=QUIET) as run:
        step = run.run_step("load", loader(3, 4))
    assert not runtime.in_chunk()
    assert keys() == list(range(12))
    row = the_step(run.execution.id)
    assert (row.status, row.read_count, row.written_count, row.committed_count) == (
        "COMPLETED",
        12,
        12,
        3,
    )
    state = runtime.checkpoint(step.step).checkpoint
    assert state is not None
    assert state.payload == {"offset": 12}
    execution = models.JobExecution.objects.get(pk=run.execution.id)
    assert execution.status == "COMPLETED"
    assert execution.owner_user_id == get_user_model().objects.get(username=importer).pk


def test_the_launch_and_the_step_start_commit_on_their_own(records: Any, importer: str) -> None:
    runtime = LocalRuntime(user=importer)
    seen: dict[str, Any] = {}

    def load(step: StepRun) -> None:
        # Inside the chunk: another connection already sees the launch and the step.
        def look() -> None:
            seen["execution"] = models.JobExecution.objects.get(pk=step.watch.execution_id).status
            seen["step"] = models.StepExecution.objects.get(pk=step.step.id).status
            seen["records"] = Record.objects.count()
            connection.close()

        write(step, 0, 3)
        if connection.vendor == "postgresql":
            reader = threading.Thread(target=look)
            reader.start()
            reader.join()
            assert seen == {"execution": "STARTED", "step": "STARTED", "records": 0}
        assert runtime.in_chunk()
        step.commit(read=3, written=3, checkpoint={"offset": 3})

    with runtime.job_run("local_import", {"day": "2"}, poll_interval=QUIET) as run:
        run.run_step("load", load)
    assert keys() == [0, 1, 2]


def test_an_exception_in_the_work_rolls_its_chunk_back_and_fails_the_step(
    records: Any, importer: str
) -> None:
    runtime = LocalRuntime(user=importer)

    def load(step: StepRun) -> None:
        loader(2, 5, last=False)(step)
        write(step, 10, 3)  # never committed
        raise ValueError("record 12 is bad")

    with (
        pytest.raises(ValueError, match="record 12"),
        runtime.job_run("local_import", {"day": "3"}, poll_interval=QUIET) as run,
    ):
        run.run_step("load", load)
    assert keys() == list(range(10))
    row = the_step(run.execution.id)
    assert (row.status, row.written_count, row.committed_count) == ("FAILED", 10, 2)
    assert models.JobExecution.objects.get(pk=run.execution.id).status == "FAILED"

    # The restart resumes at the checkpoint: every record once.
    with runtime.job_run("local_import", {"day": "3"}, poll_interval=QUIET) as again:
        again.run_step("load", loader(1, 5))
    assert keys() == list(range(15))
    assert the_step(again.execution.id).written_count == 15


def test_a_failed_attempt_in_its_scope_rolls_back_alone(records: Any, importer: str) -> None:
    runtime = LocalRuntime(user=importer)

    def load(step: StepRun) -> None:
        write(step, 0, 2)

        def attempt() -> None:
            with runtime.attempt_scope():
                write(step, 100, 2)
                raise RuntimeError("deadlock in the writer")

        with pytest.raises(RuntimeError):
            attempt()
        write(step, 2, 2)
        step.commit(read=4, written=4, checkpoint={"offset": 4}, last=True)

    with runtime.job_run("local_import", {"day": "4"}, poll_interval=QUIET) as run:
        run.run_step("load", load)
    assert keys() == [0, 1, 2, 3]
    assert isinstance(LocalRuntime().attempt_scope(), contextlib.nullcontext)  # outside a chunk


def operator_in_another_connection(action: Callable[[], Any]) -> Any:
    """Run ``action`` in a thread of its own (its own connection), as an
    operator's request would, and return what it returned."""
    outcome: dict[str, Any] = {}

    def act() -> None:
        try:
            outcome["value"] = action()
        finally:
            connection.close()

    acting = threading.Thread(target=act)
    acting.start()
    acting.join()
    return outcome["value"]


@pytest.mark.postgres
def test_a_fenced_runtimes_chunk_rolls_back_with_its_rows(records: Any, importer: str) -> None:
    runtime = LocalRuntime(user=importer)
    service = deps.operator_service()

    def recover(execution_id: int) -> Any:
        proposal = service.propose(execution_id)
        return service.recover(
            execution_id,
            expected_version=proposal.version,
            disposition=RecoveryDisposition.MARK_FAILED,
            reason_code="WORKER_LOST",
            evidence_digest=proposal.evidence_digest,
            actor=Actor("olga.ops", None),
            operation_id="recover-1",
            override_note="the worker's host is gone",
        )

    def load(step: StepRun) -> None:
        loader(1, 5, last=False)(step)
        write(step, 5, 5)
        operator_in_another_connection(lambda: recover(step.watch.execution_id))
        step.commit(read=5, written=5, checkpoint={"offset": 10})

    with (
        pytest.raises(ExecutionFenced),
        runtime.job_run("local_import", {"day": "5"}, poll_interval=QUIET) as run,
    ):
        run.run_step("load", load)
    assert keys() == list(range(5))  # the fenced chunk's rows rolled back
    row = the_step(run.execution.id)
    assert (row.status, row.written_count) == ("FAILED", 5)
    assert not runtime.in_chunk()


@pytest.mark.postgres
def test_a_stop_request_is_honoured_at_the_next_chunk_boundary(records: Any, importer: str) -> None:
    runtime = LocalRuntime(user=importer)
    service = deps.operator_service()

    def load(step: StepRun) -> None:
        loader(1, 5, last=False)(step)
        execution = models.JobExecution.objects.get(pk=step.watch.execution_id)
        operator_in_another_connection(
            lambda: service.stop(
                execution.id,
                expected_version=execution.version,
                actor=Actor("olga.ops", None),
                operation_id="stop-1",
            )
        )
        write(step, 5, 5)
        step.commit(read=5, written=5, checkpoint={"offset": 10})  # raises StopRequested
        write(step, 10, 5)  # never reached
        step.commit(read=5, written=5, checkpoint={"offset": 15})

    with runtime.job_run("local_import", {"day": "6"}, poll_interval=QUIET) as run:
        run.run_step("load", load)
    assert keys() == list(range(10))  # the chunk that saw the stop committed
    assert the_step(run.execution.id).status == "STOPPED"
    assert models.JobExecution.objects.get(pk=run.execution.id).status == "STOPPED"


def test_without_a_user_no_runtime_user_is_recorded(records: Any) -> None:
    runtime = LocalRuntime()
    with runtime.job_run("local_import", {"day": "7"}, poll_interval=QUIET) as run:
        run.run_step("load", loader(2, 2))
    execution = models.JobExecution.objects.get(pk=run.execution.id)
    assert (execution.status, execution.owner_user_id) == ("COMPLETED", None)
    assert execution.owner_token is not None
    assert keys() == [0, 1, 2, 3]


def test_refusals_carry_the_apis_own_code(records: Any, importer: str) -> None:
    runtime = LocalRuntime(user=importer)
    with pytest.raises(NameTooLong) as long_name:
        runtime.launch_run("x" * 129, {}, owner_token=b"\x01" * 16)
    assert long_name.value.code == "name_too_long"
    with pytest.raises(InvalidCharacters) as short_token:
        runtime.launch_run("local_import", {}, owner_token=b"\x01" * 3)
    assert short_token.value.code == "invalid_characters"
    with pytest.raises(StepExecutionNotFound) as unknown:
        runtime.step(424242)
    assert unknown.value.code == "step_execution_not_found"

    with pytest.raises(ApiError) as ghost:
        LocalRuntime(user="ghost").descriptor()
    assert (ghost.value.status, ghost.value.code) == (401, "authentication_failed")

    get_user_model().objects.create_user("retired", is_active=False)
    with pytest.raises(ApiError) as inactive:
        LocalRuntime(user="retired").descriptor()
    assert (inactive.value.status, inactive.value.code) == (401, "authentication_failed")

    get_user_model().objects.create_user("reader")
    with pytest.raises(ApiError) as denied:
        LocalRuntime(user="reader").launch_run("local_import", {}, owner_token=b"\x01" * 16)
    assert (denied.value.status, denied.value.code) == (403, "permission_denied")


def test_a_chunk_commit_costs_the_apis_statements_and_a_savepoint(
    records: Any, importer: str
) -> None:
    runtime = LocalRuntime(user=importer)
    counted: list[list[str]] = []

    def load(step: StepRun) -> None:
        for offset in (0, 2, 4):
            write(step, offset, 2)
            with CaptureQueriesContext(connection) as queries:
                step.commit(read=2, written=2, checkpoint={"offset": offset + 2})
            counted.append([query["sql"].split()[0].upper() for query in queries])

    with runtime.job_run("local_import", {"day": "8"}, poll_interval=QUIET) as run:
        run.run_step("load", load)
    # Every chunk the same: savepoint, the API's commit statements, release.
    assert counted[0] == counted[1] == counted[2]
    # The API's chunk commit is the locking read and the write (contract §4.2).
    assert counted[0][:4] == ["SAVEPOINT", "SELECT", "UPDATE", "RELEASE"]
    # Then COMMIT and the next chunk's BEGIN: statements on SQLite only.
    assert counted[0][4:] in ([], ["COMMIT", "BEGIN"])


@pytest.mark.postgres
def test_a_partitioned_steps_workers_each_commit_their_own_chunks(
    records: Any, importer: str
) -> None:
    runtime = LocalRuntime(user=importer)
    bases = {"a": 0, "b": 100, "c": 200}

    def worker(step: StepRun, partition: Any) -> None:
        base = bases[partition.key]
        write(step, base, 3)
        step.commit(read=3, written=3, checkpoint={"offset": 3})
        write(step, base + 3, 2)
        step.commit(read=2, written=2, checkpoint={"offset": 5}, last=True)

    with runtime.job_run("local_import", {"day": "9"}, poll_interval=QUIET) as run:
        parent = run.partitioned_step("load", list(bases), worker, max_workers=3)
    assert keys() == [base + offset for base in (0, 100, 200) for offset in range(5)]
    assert (parent.status.value, parent.counts.written) == ("COMPLETED", 15)
    assert models.JobExecution.objects.get(pk=run.execution.id).status == "COMPLETED"


def test_a_job_run_inside_an_atomic_block_is_refused(records: Any) -> None:
    with (
        transaction.atomic(),
        pytest.raises(RuntimeError, match="autocommit"),
        LocalRuntime().job_run("local_import", {"day": "10"}, poll_interval=QUIET),
    ):
        pass  # pragma: no cover
    assert not models.JobExecution.objects.exists()


@pytest.mark.postgres
def test_the_heartbeat_renews_the_lease_while_a_chunk_is_open(records: Any, importer: str) -> None:
    runtime = LocalRuntime(user=importer)
    seen: list[Any] = []

    def observed(execution_id: int) -> Any:
        return operator_in_another_connection(
            lambda: models.JobExecution.objects.get(pk=execution_id).last_observed_at
        )

    def load(step: StepRun) -> None:
        write(step, 0, 2)
        for _ in range(2):
            time.sleep(0.4)  # the chunk stays open; the heartbeat observes every 0.1 s
            seen.append(observed(step.watch.execution_id))
        step.commit(read=2, written=2, checkpoint={"offset": 2}, last=True)

    with runtime.job_run("local_import", {"day": "11"}, poll_interval=0.1) as run:
        run.run_step("load", load)
    # Committed on the heartbeat's own connection while the chunk was open.
    assert seen[0] is not None
    assert seen[1] > seen[0]
    assert keys() == [0, 1]
    assert models.JobExecution.objects.get(pk=run.execution.id).status == "COMPLETED"


class CommitCut:
    """The next COMMIT of this thread's connection fails as a lost connection
    would: after it applied (``applied=True``: the answer was lost) or instead
    of it (rolled back)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        self.applied = False
        real = connection._commit  # type: ignore[attr-defined]

        def cut() -> None:
            if not self.armed:
                real()
                return
            self.armed = False
            if self.applied:
                real()
            else:
                connection.connection.rollback()  # the driver's: nothing applied
            raise OperationalError("server closed the connection unexpectedly")

        monkeypatch.setattr(connection, "_commit", cut)

    def arm(self, *, applied: bool) -> None:
        self.armed, self.applied = True, applied


def test_a_commit_whose_answer_was_lost_is_reconciled_as_applied(
    records: Any, importer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = LocalRuntime(user=importer)
    cut = CommitCut(monkeypatch)

    def load(step: StepRun) -> None:
        write(step, 0, 3)
        cut.arm(applied=True)
        step.commit(read=3, written=3, checkpoint={"offset": 3})  # reconciled: applied
        write(step, 3, 2)
        step.commit(read=2, written=2, checkpoint={"offset": 5}, last=True)

    with runtime.job_run("local_import", {"day": "12"}, poll_interval=QUIET) as run:
        run.run_step("load", load)
    assert keys() == [0, 1, 2, 3, 4]
    row = the_step(run.execution.id)
    assert (row.status, row.written_count, row.committed_count) == ("COMPLETED", 5, 2)


def test_a_commit_found_not_applied_is_not_sent_again_without_its_rows(
    records: Any, importer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = LocalRuntime(user=importer)
    cut = CommitCut(monkeypatch)

    def load(step: StepRun) -> None:
        loader(1, 2, last=False)(step)
        write(step, 2, 3)
        cut.arm(applied=False)
        step.commit(read=3, written=3, checkpoint={"offset": 5})

    with (
        pytest.raises(CommitOutcomeUnknown),
        runtime.job_run("local_import", {"day": "13"}, poll_interval=QUIET) as run,
    ):
        run.run_step("load", load)
    assert keys() == [0, 1]  # the lost chunk's rows went with it …
    row = the_step(run.execution.id)
    # … and its counts were not committed alone: the step is left to an operator.
    assert (row.status, row.written_count, row.committed_count) == ("UNKNOWN", 2, 1)
    assert models.JobExecution.objects.get(pk=run.execution.id).status == "UNKNOWN"
