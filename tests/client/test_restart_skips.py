"""A restart resumes where a Spring Batch user expects (contract §2.3.2: a restart
skips what completed), through the runtime helper against a live server: a step that
COMPLETED in an earlier attempt is skipped — its code does not run — unless it
allows a start if complete (then it runs from nothing); a step an earlier
attempt left UNKNOWN stops the run with a clear error; the heartbeat keeps
pace with the lease the claim announces, and a fenced owner learns it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.client import ExecutionFenced, JobRun, StepRun, StepSkipped
from oxide_batch.client.jobs import heartbeat_interval
from oxide_batch.client.models import Lease
from oxide_batch.domain.errors import NotRestartable
from oxide_batch.domain.execution import FailureSummary
from oxide_batch.domain.status import BatchStatus, FailureCategory
from tests.client.conftest import ScriptedClient

S = BatchStatus
JOB = "two_step_export"
PARAMETERS = {"business_date": "2026-11-30"}


class Boom(Exception):
    pass


def recording(
    calls: list[tuple[str, Any]], name: str, *, fail: bool = False
) -> Callable[..., None]:
    """A step's work: records what it found, commits two chunks, fails on demand."""

    def work(step: StepRun) -> None:
        calls.append((name, step.checkpoint))
        start = step.checkpoint["offset"] if step.checkpoint else 0
        step.commit(read=10, written=10, checkpoint={"offset": start + 10})
        if fail:
            raise Boom(f"{name} failed")
        step.commit(read=10, written=10, checkpoint={"offset": start + 20})

    return work


def run_job(runtime: ScriptedClient, *steps: tuple[str, Callable[..., None], bool]) -> JobRun:
    """One run of the job, its steps given as ``(name, work, allow_start_if_complete)``."""
    with runtime.job_run(JOB, PARAMETERS) as run:
        for name, work, allow in steps:
            run.run_step(name, work, allow_start_if_complete=allow)
    return run


def first_attempt_fails_in_the_second_step(runtime: ScriptedClient) -> list[tuple[str, Any]]:
    calls: list[tuple[str, Any]] = []
    extract = ("extract", recording(calls, "extract"), False)
    with pytest.raises(Boom):
        run_job(runtime, extract, ("publish", recording(calls, "publish", fail=True), False))
    latest = next(runtime.executions(job_name=JOB))
    assert latest.status is S.FAILED
    return calls


def steps_of(execution_id: int) -> dict[str, tuple[str, int]]:
    return {
        row["step_name"]: (row["status"], row["read_count"])
        for row in models.StepExecution.objects.filter(job_execution_id=execution_id).values(
            "step_name", "status", "read_count"
        )
    }


def test_a_restart_skips_the_completed_step_and_resumes_the_failed_one(
    runtime: ScriptedClient,
) -> None:
    assert first_attempt_fails_in_the_second_step(runtime) == [
        ("extract", None),
        ("publish", None),
    ]
    calls: list[tuple[str, Any]] = []
    with runtime.job_run(JOB, PARAMETERS) as run:
        extract = run.run_step("extract", recording(calls, "extract"))
        publish = run.run_step("publish", recording(calls, "publish"))
    assert run.restarted
    # The completed step's code did not run; the failed one resumed at its checkpoint.
    assert calls == [("publish", {"offset": 10})]
    assert (extract.skipped, publish.skipped) == (True, False)
    assert runtime.execution(run.execution.id).status is S.COMPLETED
    # No row for the skipped step in the restart attempt; the resumed one carried
    # its earlier counts (10) and added its own (20).
    assert steps_of(run.execution.id) == {"publish": ("COMPLETED", 30)}


def test_allow_start_if_complete_runs_the_completed_step_again_from_nothing(
    runtime: ScriptedClient,
) -> None:
    first_attempt_fails_in_the_second_step(runtime)
    calls: list[tuple[str, Any]] = []
    with runtime.job_run(JOB, PARAMETERS) as run:
        again = run.run_step("extract", recording(calls, "extract"), allow_start_if_complete=True)
        run.run_step("publish", recording(calls, "publish"))
    assert calls == [("extract", None), ("publish", {"offset": 10})]
    assert not again.skipped
    assert steps_of(run.execution.id) == {
        "extract": ("COMPLETED", 20),  # fresh: nothing of attempt 1's 20 taken over
        "publish": ("COMPLETED", 30),
    }


def test_a_with_block_cannot_be_skipped_so_entering_it_says_how(
    runtime: ScriptedClient,
) -> None:
    first_attempt_fails_in_the_second_step(runtime)
    ran: list[str] = []

    def the_with_form() -> None:
        with runtime.job_run(JOB, PARAMETERS) as run, run.step("extract"):
            ran.append("extract")

    with pytest.raises(StepSkipped) as raised:
        the_with_form()
    assert ran == []
    assert (raised.value.step_name, raised.value.status) == ("extract", "COMPLETED")
    assert "run.run_step" in str(raised.value)
    assert "allow_start_if_complete" in str(raised.value)


def test_a_step_an_earlier_attempt_left_unknown_stops_the_run_for_an_operator(
    runtime: ScriptedClient,
) -> None:
    _, execution = runtime.launch(JOB, PARAMETERS)
    execution = runtime.start(execution)
    step = runtime.create_step(execution, "extract")
    step = runtime.transition_step(step, step.version, S.STARTED)
    unknown = FailureSummary(FailureCategory.UNKNOWN_COMMIT, 77)
    runtime.transition_step(step, step.version, S.UNKNOWN, failure=unknown)
    failed = FailureSummary(FailureCategory.USER_COMPONENT, 78)
    runtime.transition(execution, execution.version, S.FAILED, failure=failed)
    calls: list[tuple[str, Any]] = []
    with pytest.raises(NotRestartable) as raised:
        run_job(runtime, ("extract", recording(calls, "extract"), False))
    assert calls == []
    assert (raised.value.status, raised.value.step_name) == (S.UNKNOWN, "extract")
    assert "must be resolved first" in str(raised.value)
    assert next(runtime.executions(job_name=JOB)).status is S.FAILED


# ------------------------------------------------------------------ lease and heartbeat


@pytest.mark.parametrize(
    ("poll", "ttl", "expected"), [(10.0, 60, 10.0), (10.0, 20, 5.0), (10.0, 5, 1.25), (0.5, 5, 0.5)]
)
def test_the_heartbeat_observes_at_a_quarter_of_the_announced_ttl_at_most(
    poll: float, ttl: int, expected: float
) -> None:
    lease = Lease(ttl, expires_at=None)  # type: ignore[arg-type]
    assert heartbeat_interval(poll, lease) == expected
    assert heartbeat_interval(poll, None) == poll


def test_the_claim_announces_the_lease_and_the_heartbeat_keeps_its_pace(
    runtime: ScriptedClient, settings: Any
) -> None:
    settings.OXIDE_BATCH_LEASE_TTL = "5s"
    with runtime.job_run(JOB, PARAMETERS, poll_interval=10.0) as run:
        assert run.heartbeat_interval == 1.25
        lease = runtime.execution(run.execution.id).lease
        assert lease is not None
        assert lease.ttl_seconds == 5
        before = runtime.posts("/control")
        time.sleep(2.9)  # a long piece of work with no write of its own
        assert runtime.posts("/control") - before >= 2
    assert runtime.execution(run.execution.id).lease is None  # finished: no lease


def test_a_fenced_owner_learns_it_at_its_next_observation(
    runtime: ScriptedClient, operator: Any
) -> None:
    run = runtime.job_run(JOB, PARAMETERS).__enter__()
    proposal = operator.proposal(run.execution.id)
    assert not proposal.eligible  # its lease is held
    operator.recover(
        proposal,
        disposition="MARK_FAILED",
        reason_code="HOST_DECOMMISSIONED",
        operation_id="override-1",
        override_note="host batch-7 was decommissioned at 02:10, its process is gone",
    )
    with pytest.raises(ExecutionFenced):
        run.check_control()
    with pytest.raises(ExecutionFenced):  # leaving the run writes nothing either
        run.__exit__(None, None, None)
    recovered = runtime.execution(run.execution.id)
    assert recovered.status is S.FAILED
    decision = models.RecoveryDecision.objects.get(job_execution_id=run.execution.id)
    assert (decision.eligibility, decision.override_note) == (
        "operator_override",
        "host batch-7 was decommissioned at 02:10, its process is gone",
    )


def test_the_restart_plan_says_what_the_runtime_helper_then_does(runtime: ScriptedClient) -> None:
    """Issue 40: the plan of the failed attempt (skip ``extract``, resume
    ``publish`` from its checkpoint) is what ``run_step`` then does."""
    from oxide_batch.domain.restart_plan import PlanAction
    from oxide_batch.selectors.restart_plan import execution_restart_plan

    first_attempt_fails_in_the_second_step(runtime)
    failed = next(runtime.executions(job_name=JOB))
    plan = execution_restart_plan(failed.id).plan
    actions = {step.step_name: (step.action, step.checkpoint) for step in plan.steps}
    assert actions == {"extract": (PlanAction.SKIP, False), "publish": (PlanAction.RESUME, True)}
    calls: list[tuple[str, Any]] = []
    with runtime.job_run(JOB, PARAMETERS) as run:
        extract = run.run_step("extract", recording(calls, "extract"))
        publish = run.run_step("publish", recording(calls, "publish"))
    assert (extract.skipped, publish.skipped) == (True, False)
    assert calls == [("publish", {"offset": 10})]
    (resumed,) = (step for step in plan.steps if step.step_name == "publish")
    assert resumed.counts is not None
    assert steps_of(run.execution.id)["publish"][1] == resumed.counts.read + 20
