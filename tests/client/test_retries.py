"""The client's retries (issue 26 point 2), against a live server: a request
answered ``Unavailable`` is sent again with growing pauses within a budget that
the lease's TTL caps; a write sent again that meets itself is reconciled, not
taken for someone else's; and every write of the high-level client whose
outcome is unknown — creating the attempt, the claim, a step, an exit code, an
observation — is settled by reading what is stored, so nothing is made twice.
The pauses are taken on a fake clock: no test sleeps."""

from __future__ import annotations

from typing import Any

import pytest

from oxide_batch.domain.errors import CommitOutcomeUnknown, StaleVersion, Unavailable
from oxide_batch.domain.status import BatchStatus
from oxide_batch.roles import RUNTIME
from tests.client.conftest import ScriptedClient
from tests.live import token_for

S = BatchStatus
JOB = "nightly_import"
PARAMETERS = {"business_date": "2026-07-29"}


class Pauses:
    """A clock that moves only when the client pauses."""

    def __init__(self) -> None:
        self.now = 0.0
        self.taken: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.taken.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


@pytest.fixture
def pauses() -> Pauses:
    return Pauses()


def patient(live_server: Any, pauses: Pauses, budget: float) -> ScriptedClient:
    return ScriptedClient(
        live_server.url,
        token_for(f"patient-{budget}", RUNTIME),
        timeout=10,
        retry_budget=budget,
        sleep=pauses.sleep,
        clock=pauses.clock,
    )


def test_a_request_answered_unavailable_is_sent_again_after_growing_pauses(
    live_server: Any, server_clock: Any, pauses: Pauses
) -> None:
    client = patient(live_server, pauses, budget=10)
    _, execution = client.launch(JOB, PARAMETERS)
    for _ in range(4):
        client.refuse("POST", "/transition", Unavailable())
    started = client.transition(execution, execution.version, S.STARTED)
    assert (started.status, started.version) == (S.STARTED, execution.version + 1)
    assert client.posts("/transition") == 1  # the four refusals sent nothing
    # 0.1 s doubling, each with up to half of it taken off as jitter.
    assert len(pauses.taken) == 4
    for number, pause in enumerate(pauses.taken):
        assert 0.05 * 2**number <= pause <= 0.1 * 2**number


def test_when_the_budget_is_spent_unavailable_propagates(
    live_server: Any, server_clock: Any, pauses: Pauses
) -> None:
    client = patient(live_server, pauses, budget=3)
    _, execution = client.launch(JOB, PARAMETERS)
    for _ in range(50):
        client.refuse("GET", f"executions/{execution.id}", Unavailable())
    with pytest.raises(Unavailable):
        client.execution(execution.id)
    assert sum(pauses.taken) <= 3
    assert max(pauses.taken) <= 2.0  # the pause stops growing at 2 s
    assert 3 <= len(pauses.taken) < 10


def test_a_budget_of_zero_sends_once(live_server: Any, server_clock: Any, pauses: Pauses) -> None:
    client = patient(live_server, pauses, budget=0)
    client.refuse("GET", "descriptor", Unavailable())
    with pytest.raises(Unavailable):
        client.descriptor()
    assert pauses.taken == []


@pytest.mark.parametrize("budget", [-1.0, float("nan"), float("inf")])
def test_a_budget_must_be_a_finite_number_of_seconds(budget: float) -> None:
    with pytest.raises(ValueError, match="retry_budget"):
        ScriptedClient("http://127.0.0.1:1", "t", retry_budget=budget)


def test_the_claimed_lease_caps_the_budget_at_half_its_ttl(
    live_server: Any, server_clock: Any, pauses: Pauses
) -> None:
    client = patient(live_server, pauses, budget=600)
    assert client.effective_retry_budget() == 600
    with client.job_run(JOB, PARAMETERS) as run:
        lease = run.execution.lease
        assert lease is not None
        half = lease.ttl_seconds / 2
        assert client.effective_retry_budget() == half
        client.refuse("POST", "/control", Unavailable())
        run.check_control()  # sent again, within the capped budget
    assert pauses.taken
    assert sum(pauses.taken) < half


def test_a_chunk_sent_again_after_unavailable_applies_once(
    live_server: Any, server_clock: Any, pauses: Pauses
) -> None:
    client = patient(live_server, pauses, budget=10)
    with client.job_run(JOB, PARAMETERS) as run, run.step("load") as step:
        client.refuse("POST", "/checkpoint", Unavailable())
        client.refuse("POST", "/checkpoint", Unavailable())
        before = step.step.version
        committed = step.commit(read=10, written=10, checkpoint={"offset": 10})
        assert committed.version == before + 1
    stored = client.checkpoint(step.step)
    assert (stored.step.counts.read, stored.step.counts.committed) == (10, 1)
    assert client.posts("/checkpoint") == 1


def test_a_write_sent_again_that_meets_itself_is_reconciled_as_applied(
    live_server: Any, server_clock: Any, pauses: Pauses
) -> None:
    """A proxy that says ``unavailable`` after the write went through: the
    resend answers ``stale_version`` for this very write — reconciled, the row
    read is returned, not a conflict."""
    client = patient(live_server, pauses, budget=10)
    _, execution = client.launch(JOB, PARAMETERS)
    client.lose_answer("POST", "/transition", Unavailable())
    started = client.transition(execution, execution.version, S.STARTED, reconcile=True)
    assert (started.status, started.version) == (S.STARTED, execution.version + 1)
    assert client.posts("/transition") == 2
    # Without reconciling, the same resend is the conflict it looks like.
    client.lose_answer("POST", "/transition", Unavailable())
    with pytest.raises(StaleVersion) as stale:
        client.transition(started, started.version, S.STOPPING)
    assert getattr(stale.value, "resent", False)


def test_a_resent_write_that_meets_someone_elses_is_still_stale(
    live_server: Any, server_clock: Any, pauses: Pauses
) -> None:
    client = patient(live_server, pauses, budget=10)
    _, execution = client.launch(JOB, PARAMETERS)
    other = patient(live_server, Pauses(), budget=0)
    other.transition(execution, execution.version, S.STARTED)
    client.refuse("POST", "/transition", Unavailable())
    with pytest.raises(StaleVersion):
        client.transition(execution, execution.version, S.FAILED, reconcile=True)


@pytest.mark.parametrize(
    ("method", "suffix"),
    [
        ("POST", "launches"),  # the instance, attempt, claim and start
        ("POST", "/steps"),  # created STARTED
        ("POST", "/checkpoint"),
        ("POST", "/transition"),  # the step's end, with its exit code
    ],
    ids=["launch", "start-step", "chunk", "transition"],
)
def test_every_write_of_a_run_with_an_unknown_outcome_is_settled_once(
    runtime: ScriptedClient, method: str, suffix: str
) -> None:
    runtime.lose_answer(method, suffix, CommitOutcomeUnknown())
    with runtime.job_run(JOB, PARAMETERS) as run:
        with run.step("load") as step:
            step.commit(read=10, checkpoint={"offset": 10})
            step.exit_code = "LOADED"
        run.exit_code = "DONE"
    execution = runtime.execution(run.execution.id)
    assert (execution.status, execution.exit_code, execution.attempt) == (S.COMPLETED, "DONE", 1)
    steps = list(runtime._pages(f"executions/{execution.id}/steps", lambda row: row))
    assert [(row["step_name"], row["status"], row["exit_code"]) for row in steps] == [
        ("load", "COMPLETED", "LOADED")
    ]
    instance_executions = runtime._get(f"instances/{execution.job_instance_id}/executions")
    assert len(instance_executions["results"]) == 1  # no second attempt was made
    assert runtime._faults == []  # the lost answer was this run's
