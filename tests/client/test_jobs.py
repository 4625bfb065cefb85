"""The runtime helper (``client.job_run`` / ``run.step``) against a live server:
every branch of a step's and a job's end — success, stop, fence, unknown commit,
exception — and the control observations contract §2.5.3 asks for."""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta

import pytest

from oxide_batch.client import Execution, ExecutionFenced, OperatorClient, StepRun, StopRequested
from oxide_batch.domain.errors import CommitOutcomeUnknown, Unavailable
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.repository import FixedClock
from tests.client.conftest import ScriptedClient

S = BatchStatus
JOB = "nightly_import"
PARAMETERS = {"business_date": "2026-07-29"}


class Boom(Exception):
    pass


def test_a_run_completes_its_step_and_the_job_in_k_plus_3_requests(
    runtime: ScriptedClient,
) -> None:
    """contract §4.2: launch, a step created STARTED, K chunks (the last one
    ending the step) and the run's end — each write carries the owner token and
    its answer the control state (the chunk boundary's observation); the
    heartbeat's observations are not counted."""
    with runtime.job_run(JOB, PARAMETERS) as run:
        assert run.execution.status is S.STARTED
        assert not run.restarted
        with run.step("load") as step:
            assert step.checkpoint is None
            step.commit(read=100, written=100, checkpoint={"offset": 100})
            step.commit(read=100, written=100, checkpoint={"offset": 200}, last=True)
    execution = runtime.execution(run.execution.id)
    assert (execution.status, execution.exit_code) == (S.COMPLETED, "COMPLETED")
    assert execution.owner_recorded
    done = runtime.checkpoint(step.step)
    assert (done.step.status, done.step.exit_code) == (S.COMPLETED, "COMPLETED")
    assert (done.step.counts.read, done.step.counts.written, done.step.counts.committed) == (
        200,
        200,
        2,
    )
    assert done.checkpoint is not None
    assert done.checkpoint.payload == {"offset": 200}
    run_requests = [
        (method, path)
        for method, path, _ in runtime.sent
        if not path.endswith("/control")
        and (method, path)
        not in {
            ("GET", f"executions/{execution.id}"),
            ("GET", f"steps/{step.step.id}/checkpoint"),
        }
    ]
    assert [path.split("/")[-1] if "/" in path else path for _, path in run_requests[:2]] == [
        "launches",
        "steps",
    ]
    assert len(run_requests) == 2 + 3  # K = 2
    owner = run.owner_token.hex()
    assert all(
        body.get("owner_token") == owner for method, _, body in runtime.sent if method == "POST"
    )


def test_without_a_last_chunk_the_step_ends_by_its_own_transition(
    runtime: ScriptedClient,
) -> None:
    with runtime.job_run(JOB, PARAMETERS) as run, run.step("load") as step:
        step.commit(read=10, checkpoint={"offset": 10})
        step.exit_code = "LOADED"
    done = runtime.step(step.step.id)
    assert (done.status, done.exit_code, done.counts.committed) == (S.COMPLETED, "LOADED", 1)
    assert runtime.posts("/transition") == 2  # the step's and the run's, each with its code


def test_a_stop_seen_in_a_chunk_s_answer_ends_step_and_job_stopped(
    runtime: ScriptedClient, operator: OperatorClient
) -> None:
    seen: list[BaseException] = []
    with runtime.job_run(JOB, PARAMETERS) as run, run.step("load") as step:
        step.commit(read=10, checkpoint={"offset": 10})
        current = runtime.execution(run.execution.id)
        operator.stop(current, current.version, operation_id="stop-in-answer")
        try:
            step.commit(read=10, checkpoint={"offset": 20})  # committed, then the stop
        except StopRequested as stop:
            seen.append(stop)
            raise
    assert len(seen) == 1
    stopped = runtime.step(step.step.id)
    assert (stopped.status, stopped.counts.committed) == (S.STOPPED, 2)
    assert runtime.execution(run.execution.id).status is S.STOPPED


def test_a_restart_takes_over_the_checkpoint_of_the_failed_attempt(
    runtime: ScriptedClient,
) -> None:
    def first() -> None:
        with runtime.job_run(JOB, PARAMETERS) as run, run.step("load") as step:
            step.commit(read=100, written=100, checkpoint={"offset": 100})
            raise Boom("row 101 is malformed")

    with pytest.raises(Boom):
        first()
    with runtime.job_run(JOB, PARAMETERS) as second:
        assert second.restarted
        assert second.execution.attempt == 2
        with second.step("load") as step:
            assert step.checkpoint == {"offset": 100}
            step.commit(read=50, written=50, checkpoint={"offset": 150})
    assert runtime.execution(second.execution.id).status is S.COMPLETED
    assert step.step.counts.read == 150  # taken over, then advanced


def test_an_exception_fails_step_and_job_with_one_failure_id_and_its_text_only_as_the_detail(
    runtime: ScriptedClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The exception's text travels only as the failure's ``detail`` (issue 40:
    the server scrubs it and keeps what its deployment allows); the log line
    under the failure id stays."""
    secret = "customer 4711 card 4111-1111"
    run = runtime.job_run(JOB, PARAMETERS)
    steps: list[StepRun] = []

    def job() -> None:
        with run, run.step("load") as step:
            steps.append(step)
            step.commit(read=1, written=1, checkpoint={"offset": 1})
            raise Boom(secret)

    with caplog.at_level(logging.ERROR, "oxide_batch.client.jobs"), pytest.raises(Boom):
        job()
    step = steps[0]
    execution = runtime.execution(run.execution.id)
    failed_step = runtime.step(step.step.id)
    assert (execution.status, execution.exit_code) == (S.FAILED, "FAILED")
    assert (failed_step.status, failed_step.exit_code) == (S.FAILED, "FAILED")
    assert execution.failure is not None
    assert execution.failure.category is FailureCategory.USER_COMPONENT
    assert failed_step.failure == execution.failure  # one id tells the whole story
    with_detail = [
        body["failure"].pop("detail")
        for _, _, body in runtime.sent
        if isinstance(body, dict) and body.get("failure")
    ]
    assert len(with_detail) == 2  # the step's transition and the job's
    for detail in with_detail:
        assert detail["type"] == "tests.client.test_jobs.Boom"
        assert detail["message"] == secret
        assert detail["traceback"].startswith("Traceback (most recent call last)")
    assert secret not in json.dumps([body for _, _, body in runtime.sent])
    logged = [record for record in caplog.records if record.exc_info]
    assert len(logged) == 1
    assert str(execution.failure.failure_id) in logged[0].getMessage()
    assert secret in str(logged[0].exc_info[1])  # type: ignore[index]


def test_an_exception_outside_any_step_fails_the_job_with_a_new_failure_id(
    runtime: ScriptedClient,
) -> None:
    run = runtime.job_run(JOB, PARAMETERS)

    def job() -> None:
        with run:
            raise Boom("the source is gone")

    with pytest.raises(Boom):
        job()
    execution = runtime.execution(run.execution.id)
    assert execution.status is S.FAILED
    assert execution.failure is not None


def test_a_stop_request_raises_at_the_next_chunk_and_ends_step_and_job_stopped(
    runtime: ScriptedClient, operator: OperatorClient
) -> None:
    reached = []
    with runtime.job_run(JOB, PARAMETERS) as run, run.step("load") as step:
        step.commit(read=10, written=10, checkpoint={"offset": 10})
        operator.stop(run.execution, run.execution.version, operation_id="stop-1")
        with pytest.raises(StopRequested):
            step.commit(read=10, written=10, checkpoint={"offset": 20})
        reached.append(True)
        raise StopRequested(run.execution.id)  # as the loop would let it propagate
    assert reached
    execution = runtime.execution(run.execution.id)
    state = runtime.checkpoint(step.step)
    assert (execution.status, execution.exit_code) == (S.STOPPED, "STOPPED")
    assert (state.step.status, state.step.exit_code) == (S.STOPPED, "STOPPED")
    # The chunk committed before the stop was seen is kept: the restart resumes after it.
    assert state.checkpoint is not None
    assert state.checkpoint.payload == {"offset": 20}


def test_a_stop_that_arrives_after_the_last_chunk_ends_the_job_stopped(
    runtime: ScriptedClient, operator: OperatorClient
) -> None:
    with runtime.job_run(JOB, PARAMETERS) as run:
        with run.step("load") as step:
            step.commit(read=1, checkpoint={"offset": 1})
        operator.stop(run.execution, run.execution.version, operation_id="stop-2")
        with pytest.raises(StopRequested):
            run.check_control()
    assert runtime.execution(run.execution.id).status is S.STOPPED


def _recover(operator: OperatorClient, clock: FixedClock, execution_id: int) -> None:
    clock.advance(timedelta(minutes=20))
    proposal = operator.proposal(execution_id)
    assert proposal.eligible, proposal.reason_code
    operator.recover(
        proposal, disposition="MARK_FAILED", reason_code="WORKER_LOST", operation_id="rec-1"
    )


def test_a_recovered_execution_fences_the_worker_at_its_next_chunk(
    runtime: ScriptedClient, operator: OperatorClient, server_clock: FixedClock
) -> None:
    run = runtime.job_run(JOB, PARAMETERS)
    seen: list[tuple[StepRun, Execution, int]] = []

    def job() -> None:
        with run, run.step("load") as step:
            step.commit(read=10, written=10, checkpoint={"offset": 10})
            _recover(operator, server_clock, run.execution.id)
            seen.append((step, runtime.execution(run.execution.id), len(runtime.sent)))
            step.commit(read=10, written=10, checkpoint={"offset": 20})

    with pytest.raises(ExecutionFenced) as fenced:
        job()
    step, before, sent = seen[0]
    assert fenced.value.step_id == step.step.id
    # Nothing was written after the fence: the step and the job are as recovery left them.
    after = runtime.execution(run.execution.id)
    assert (after.status, after.version) == (S.FAILED, before.version)
    assert after.failure is not None
    assert after.failure.category is FailureCategory.STALE_RECOVERED
    assert runtime.step(step.step.id).status is S.FAILED
    posts = [path for method, path, _ in runtime.sent[sent:] if method == "POST"]
    assert posts == [f"steps/{step.step.id}/checkpoint"]


def test_control_tells_a_run_between_chunks_that_it_was_recovered(
    runtime: ScriptedClient, operator: OperatorClient, server_clock: FixedClock
) -> None:
    run = runtime.job_run(JOB, PARAMETERS)

    def job() -> None:
        with run:
            _recover(operator, server_clock, run.execution.id)
            with run.step("load"):
                pytest.fail("a fenced run starts no step")

    with pytest.raises(ExecutionFenced):
        job()
    assert runtime.execution(run.execution.id).status is S.FAILED


def test_an_unknown_commit_that_applied_is_reconciled_and_the_run_carries_on(
    runtime: ScriptedClient,
) -> None:
    with runtime.job_run(JOB, PARAMETERS) as run, run.step("load") as step:
        step.commit(read=10, checkpoint={"offset": 10})
        runtime.lose_answer("POST", "/checkpoint", CommitOutcomeUnknown())
        step.commit(read=10, checkpoint={"offset": 20})
        step.commit(read=10, checkpoint={"offset": 30})
    state = runtime.checkpoint(step.step)
    assert (state.step.status, state.step.counts.read, state.step.counts.committed) == (
        S.COMPLETED,
        30,
        3,
    )
    assert runtime.posts("/checkpoint") == 3  # applied: never sent twice


def test_an_unknown_commit_that_did_not_apply_is_sent_once_more(
    runtime: ScriptedClient,
) -> None:
    with runtime.job_run(JOB, PARAMETERS) as run, run.step("load") as step:
        runtime.refuse("POST", "/checkpoint", CommitOutcomeUnknown())
        step.commit(read=10, checkpoint={"offset": 10})
    state = runtime.checkpoint(step.step)
    assert (state.step.counts.read, state.step.counts.committed) == (10, 1)
    assert runtime.execution(run.execution.id).status is S.COMPLETED


def test_an_unknown_commit_that_stays_unknown_leaves_step_and_job_unknown(
    runtime: ScriptedClient,
) -> None:
    run = runtime.job_run(JOB, PARAMETERS)
    steps: list[StepRun] = []

    def job() -> None:
        with run, run.step("load") as step:
            steps.append(step)
            runtime.lose_answer("POST", "/checkpoint", CommitOutcomeUnknown())
            for _ in range(runtime.reread_attempts):
                runtime.refuse("GET", "/checkpoint", Unavailable())
            step.commit(read=10, checkpoint={"offset": 10})

    with pytest.raises(CommitOutcomeUnknown):
        job()
    step = steps[0]
    execution = runtime.execution(run.execution.id)
    unknown = runtime.step(step.step.id)
    assert (execution.status, unknown.status) == (S.UNKNOWN, S.UNKNOWN)
    assert execution.failure is not None
    assert execution.failure.category is FailureCategory.UNKNOWN_COMMIT
    assert unknown.failure == execution.failure
    assert execution.ended_at is None  # UNKNOWN is not finished: an operator resolves it


def test_exit_codes_default_to_the_status_and_can_be_overridden(
    runtime: ScriptedClient,
) -> None:
    with runtime.job_run(JOB, PARAMETERS) as run:
        with run.step("load") as step:
            step.exit_code = "NOOP"
        run.exit_code = "COMPLETED_WITH_SKIPS"
    assert runtime.step(step.step.id).exit_code == "NOOP"
    execution = runtime.execution(run.execution.id)
    assert (execution.status, execution.exit_code) == (S.COMPLETED, "COMPLETED_WITH_SKIPS")


def test_control_is_observed_at_least_once_per_poll_interval_between_chunks(
    runtime: ScriptedClient,
) -> None:
    with runtime.job_run(JOB, PARAMETERS, poll_interval=0.2) as run:
        before = runtime.posts("/control")
        time.sleep(1.1)  # a long chunk: no boundary for a while
        during = runtime.posts("/control") - before
    assert during >= 4
    assert runtime.execution(run.execution.id).last_observed_at is not None


def test_a_lost_write_stops_the_run_with_its_own_exception_and_nothing_written_after(
    runtime: ScriptedClient,
) -> None:
    """Issue 26 point 3: the repository lost a chunk it had acknowledged (the step
    row one version back, as after a failover to a standby that missed it); the
    next chunk is refused as ``version_ahead``. The client raises ``LostWrite``
    and writes nothing more: no FAILED step, no FAILED job — the execution is
    marked and an operator decides."""
    from django.db.models import F

    from oxide_batch import models
    from oxide_batch.client import LostWrite

    run = runtime.job_run(JOB, PARAMETERS)
    seen: list[tuple[StepRun, int]] = []

    def job() -> None:
        with run, run.step("load") as step:
            step.commit(read=10, written=10, checkpoint={"offset": 10})
            models.StepExecution.objects.filter(pk=step.step.id).update(version=F("version") - 1)
            seen.append((step, len(runtime.sent)))
            step.commit(read=10, written=10, checkpoint={"offset": 20})

    with pytest.raises(LostWrite) as lost:
        job()
    step, sent = seen[0]
    assert isinstance(lost.value, ExecutionFenced)  # the runtime's "stop writing" family
    assert (lost.value.step_id, lost.value.expected, lost.value.stored) == (
        step.step.id,
        step.step.version,
        step.step.version - 1,
    )
    posts = [path for method, path, _ in runtime.sent[sent:] if method == "POST"]
    assert posts == [f"steps/{step.step.id}/checkpoint"]
    execution = models.JobExecution.objects.get(pk=run.execution.id)
    assert execution.lost_write is not None
    assert (execution.status, execution.lost_write["stored_version"]) == (
        "STARTED",
        step.step.version - 1,
    )
    assert models.StepExecution.objects.get(pk=step.step.id).status == "STARTED"
