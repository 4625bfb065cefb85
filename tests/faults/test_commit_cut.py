"""A connection cut around COMMIT, through a fault-injection proxy on a real
PostgreSQL: whether the server received the COMMIT or not, the caller sees the
same ``CommitOutcomeUnknown`` — one cut applied the write, the other did not,
which is exactly why the outcome is indeterminate. The client tells them apart
by re-reading (``RuntimeClient.reconcile_*``), never by repeating blindly. A
COMMIT held at the proxy (the request still running when the client gave up on
it) shows the rule's edges: re-reads that all fail leave the outcome unknown,
and a resend may meet the first request's late commit as ``stale_version``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from oxide_batch import models
from oxide_batch.client import Outcome, RuntimeClient, Step
from oxide_batch.client.wire import PROBLEM_CONTENT_TYPE
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import CommitOutcomeUnknown, StaleVersion, Unavailable
from oxide_batch.domain.execution import ExecutionCounts
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.roles import RUNTIME
from tests.faults.proxy import COMMIT, FaultProxy
from tests.faults.support import in_background, post, stored
from tests.helpers import launch
from tests.live import database_url, gunicorn, token_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
START = LifecycleTransition(S.STARTED)


# -- the wire -----------------------------------------------------------------------


def test_commit_is_one_simple_query_message_and_statements_carry_their_text(repo, proxied):
    execution = launch(repo)
    proxied.trace = []
    with repo.begin() as uow:
        uow.transition_job_execution(execution.id, execution.version, START)
        uow.commit()
    chunks = proxied.trace
    assert chunks[0] == b"Q\x00\x00\x00\x0aBEGIN\x00"
    assert chunks[-1] == COMMIT
    assert [b"FOR NO KEY UPDATE" in chunk for chunk in chunks[1:-1]] == [True, False]
    assert chunks[2].startswith(b"P")  # Parse, with the text: nothing is prepared
    assert b'UPDATE "ob_job_execution"' in chunks[2]


def test_a_chunk_commit_is_four_messages_on_the_wire(repo, proxied):
    """BEGIN, the locking read, the write, COMMIT — and nothing else, with the
    recovery fence on the row it reads (contract §8.2: a chunk commit ≤ 4 statements)."""
    execution = launch(repo)
    with repo.begin() as uow:
        uow.transition_job_execution(execution.id, execution.version, START)
        step = uow.create_step_execution(execution.id, "load")
        step = uow.transition_step_execution(step.id, 0, START)
        uow.commit()
    proxied.trace = []
    with repo.begin() as uow:
        uow.commit_chunk(
            step.id,
            step.version,
            ExecutionCounts(read=10, written=10, committed=1),
            checkpoint=StateEnvelope("reader.offset", 1, {"offset": 10}),
        )
        uow.commit()
    chunks = proxied.trace
    assert len(chunks) == 4, chunks
    assert chunks[0] == b"Q\x00\x00\x00\x0aBEGIN\x00"
    assert b'FROM "ob_step_execution"' in chunks[1]
    assert b"FOR NO KEY UPDATE" in chunks[1]
    assert b'UPDATE "ob_step_execution"' in chunks[2]
    assert chunks[3] == COMMIT


# -- the repository -----------------------------------------------------------------


def test_a_reply_to_commit_lost_is_unknown_though_the_write_applied(repo, proxied, direct):
    execution = launch(repo)
    cut = proxied.cut_reply_after(COMMIT)
    with repo.begin() as uow:
        uow.transition_job_execution(execution.id, execution.version, START)
        with pytest.raises(CommitOutcomeUnknown):
            uow.commit()
    assert cut.is_set()
    assert stored(direct, models.JobExecution, execution.id) == ("STARTED", execution.version + 1)


def test_a_commit_never_delivered_is_unknown_and_the_write_did_not_apply(repo, proxied, direct):
    execution = launch(repo)
    cut = proxied.cut_before(COMMIT)
    with repo.begin() as uow:
        uow.transition_job_execution(execution.id, execution.version, START)
        with pytest.raises(CommitOutcomeUnknown):
            uow.commit()
    assert cut.is_set()
    assert stored(direct, models.JobExecution, execution.id) == ("STARTING", execution.version)
    # Not applied: the same write at the same expected version is safe, once.
    with repo.begin() as uow:
        retried = uow.transition_job_execution(execution.id, execution.version, START)
        uow.commit()
    assert retried.version == execution.version + 1
    assert stored(direct, models.JobExecution, execution.id) == ("STARTED", retried.version)


# -- over HTTP: gunicorn → proxy → PostgreSQL ---------------------------------------


@pytest.fixture
def client(served: str) -> RuntimeClient:
    return RuntimeClient(served, token_for("runner", RUNTIME), timeout=20, retry_budget=0)


def started_step(client: RuntimeClient) -> Step:
    _, execution = client.launch("cut_job", {"run": "1"})
    step = client.create_step(client.start(execution), "load")
    return client.transition_step(step, step.version, S.STARTED)


DELTA = ExecutionCounts(read=5, written=5)
CHECKPOINT = StateEnvelope("reader.offset", 1, {"offset": 5})


def test_a_lost_reply_to_a_transition_commit_is_503_and_reconciles_as_applied(
    served, proxy: FaultProxy, client: RuntimeClient, direct
):
    _, execution = client.launch("cut_job", {"run": "1"})
    cut = proxy.cut_reply_after(COMMIT)
    status, headers, problem = post(
        f"{served}/api/v1/executions/{execution.id}/transition",
        client.token,
        {"expected_version": execution.version, "status": "STARTED"},
    )
    assert cut.is_set()
    assert status == 503
    assert headers["Content-Type"] == PROBLEM_CONTENT_TYPE
    assert problem["code"] == "commit_outcome_unknown"
    assert int(headers["Retry-After"]) > 0

    found = client.reconcile_transition(execution.id, execution.version, S.STARTED)
    assert found.outcome is Outcome.APPLIED
    assert (found.current.status, found.current.version) == (S.STARTED, execution.version + 1)
    assert stored(direct, models.JobExecution, execution.id) == ("STARTED", execution.version + 1)
    # What a blind repeat would have met: its own write, as someone else's.
    with pytest.raises(StaleVersion):
        client.transition(execution, execution.version, S.STARTED)


def test_a_lost_reply_to_a_chunk_commit_is_unknown_and_reconciles_as_applied(
    proxy: FaultProxy, client: RuntimeClient, direct
):
    step = started_step(client)
    cut = proxy.cut_reply_after(COMMIT)
    with pytest.raises(CommitOutcomeUnknown):
        client.commit_chunk(step.id, step.version, DELTA, checkpoint=CHECKPOINT)
    assert cut.is_set()

    found = client.reconcile_chunk(step, DELTA, CHECKPOINT)
    assert found.outcome is Outcome.APPLIED
    assert found.current.step.version == step.version + 1
    assert found.current.step.counts == step.counts.plus(DELTA)
    assert found.current.checkpoint == CHECKPOINT
    assert stored(direct, models.StepExecution, step.id) == ("STARTED", step.version + 1)


def test_a_commit_never_delivered_reconciles_as_not_applied_and_the_retry_succeeds(
    proxy: FaultProxy, client: RuntimeClient, direct
):
    step = started_step(client)
    execution = client.execution(step.job_execution_id)
    cut = proxy.cut_before(COMMIT)
    with pytest.raises(CommitOutcomeUnknown):
        client.transition(execution, execution.version, S.STOPPING)
    assert cut.is_set()
    found = client.reconcile_transition(execution.id, execution.version, S.STOPPING)
    assert found.outcome is Outcome.NOT_APPLIED
    assert found.current == execution
    stopping = client.transition(execution, execution.version, S.STOPPING)
    assert stopping.version == execution.version + 1

    cut = proxy.cut_before(COMMIT)
    with pytest.raises(CommitOutcomeUnknown):
        client.commit_chunk(step.id, step.version, DELTA, checkpoint=CHECKPOINT)
    assert cut.is_set()
    found_chunk = client.reconcile_chunk(step, DELTA, CHECKPOINT)
    assert found_chunk.outcome is Outcome.NOT_APPLIED
    assert (found_chunk.current.step, found_chunk.current.checkpoint) == (step, None)
    committed = client.commit_chunk(step.id, step.version, DELTA, checkpoint=CHECKPOINT)
    assert committed.counts == step.counts.plus(DELTA)
    assert stored(direct, models.StepExecution, step.id) == ("STARTED", step.version + 1)


@pytest.mark.parametrize("cut", ["cut_reply_after", "cut_before"])
def test_reconcile_true_settles_either_cut_with_exactly_one_write(
    cut: str, proxy: FaultProxy, client: RuntimeClient, direct
):
    step = started_step(client)
    fired = getattr(proxy, cut)(COMMIT)
    committed = client.commit_chunk(
        step, step.version, DELTA, checkpoint=CHECKPOINT, reconcile=True
    )
    assert fired.is_set()
    assert (committed.version, committed.counts) == (step.version + 1, step.counts.plus(DELTA))

    execution = client.execution(step.job_execution_id)
    fired = getattr(proxy, cut)(COMMIT)
    stopping = client.transition(execution, execution.version, S.STOPPING, reconcile=True)
    assert fired.is_set()
    assert (stopping.status, stopping.version) == (S.STOPPING, execution.version + 1)
    assert stored(direct, models.JobExecution, execution.id) == ("STOPPING", stopping.version)
    assert client.checkpoint(step).step.counts == step.counts.plus(DELTA)  # counted once


# -- a COMMIT held past the client's patience ---------------------------------------

# The client's timeout (seconds) while the first request is held: short where
# every request it waits for is held; longer where the resend must be answered
# once the hold is released.
BRIEF, PATIENT = 1.0, 3.0


def lock_waiter(direct: psycopg.Connection[Any]) -> bool:
    """Whether a session of the test database comes to wait on a lock (20 s)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        row = direct.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()
        if row is not None and row[0] > 0:
            return True
        time.sleep(0.02)
    return False


def committed(direct: psycopg.Connection[Any], pk: int, expected: tuple[str, int]) -> bool:
    """Whether the execution comes to be stored as ``expected`` (10 s)."""
    deadline = time.monotonic() + 10
    while stored(direct, models.JobExecution, pk) != expected:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def single(proxy: FaultProxy) -> Iterator[str]:
    """gunicorn with one worker of one thread through ``proxy``: while a request
    is held there, every other one waits."""
    with gunicorn(
        database=database_url(port=proxy.port),
        workers=1,
        threads=1,
        environment={"OXIDE_BATCH_PG_PREPARE": "false"},
    ) as url:
        yield url


def test_rereads_that_all_fail_leave_the_outcome_unknown_and_the_write_commits_later(
    single: str, proxy: FaultProxy, direct
):
    token = token_for("runner", RUNTIME)
    _, execution = RuntimeClient(single, token, timeout=20).launch("cut_job", {"run": "1"})
    client = RuntimeClient(single, token, timeout=BRIEF, retry_budget=0)
    client.reread_attempts = 2
    hold = proxy.hold(COMMIT)

    # The transition times out at its COMMIT; both re-reads queue behind it.
    with pytest.raises(CommitOutcomeUnknown) as raised:
        client.transition(execution, execution.version, S.STARTED, reconcile=True)
    assert hold.reached.wait(10)
    assert isinstance(raised.value.__cause__, Unavailable)
    assert stored(direct, models.JobExecution, execution.id) == ("STARTING", execution.version)

    # Why not Unavailable ("nothing was done, retry"): the write then commits.
    hold.release()
    assert committed(direct, execution.id, ("STARTED", execution.version + 1))


def test_a_resend_meeting_the_first_request_committed_late_settles_as_applied(
    served: str, proxy: FaultProxy, direct
):
    token = token_for("runner", RUNTIME)
    _, execution = RuntimeClient(served, token, timeout=20).launch("cut_job", {"run": "1"})
    client = RuntimeClient(served, token, timeout=PATIENT, retry_budget=0)
    hold = proxy.hold(COMMIT)
    settled = in_background(
        lambda: client.transition(execution, execution.version, S.STARTED, reconcile=True)
    )
    assert hold.reached.wait(10)
    # The first request times out; the re-read sees the row untouched (not
    # applied); the resend waits on the row lock the held request keeps.
    assert lock_waiter(direct)
    assert stored(direct, models.JobExecution, execution.id) == ("STARTING", execution.version)
    hold.release()  # the first request commits; the resend is then stale

    started = settled.result(timeout=30)
    assert (started.status, started.version) == (S.STARTED, execution.version + 1)
    assert stored(direct, models.JobExecution, execution.id) == ("STARTED", started.version)
