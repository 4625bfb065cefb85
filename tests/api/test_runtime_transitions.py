"""A runtime's job transitions (contract §2.1): one rule, the domain's, applied by
the repository under the row lock. ``POST executions/{id}/transition`` and
``transition_job_execution(..., by_runtime=True)`` answer the same code for every
(from, to) pair, with and without a failure, and the HTTP transition costs one
locking read and one write of the execution row — no read ahead of the lock."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch.api import deps
from oxide_batch.domain import BatchStatus, FailureCategory, FailureSummary, LifecycleTransition
from oxide_batch.domain.errors import OxideBatchError
from oxide_batch.repository import DjangoJobRepository, FixedClock
from tests.api.support import FAILURE, Runtime, problem
from tests.conftest import on_postgres
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus

# contract §2.1, written out: what a runtime may do to its own job execution —
# the lifecycle table without ABANDONED and without any way out of UNKNOWN.
RUNTIME_MAY = {
    S.STARTING: {S.STARTED, S.STOPPING, S.FAILED, S.UNKNOWN},
    S.STARTED: {S.STOPPING, S.STOPPED, S.FAILED, S.COMPLETED, S.UNKNOWN},
    S.STOPPING: {S.STOPPED, S.FAILED, S.UNKNOWN},
    S.STOPPED: set(),
    S.FAILED: set(),
    S.UNKNOWN: set(),
    S.COMPLETED: set(),
    S.ABANDONED: set(),
}
# How each source status is reached (an operator-side path: no runtime flag).
SETUP = {
    S.STARTING: (),
    S.STARTED: (S.STARTED,),
    S.STOPPING: (S.STARTED, S.STOPPING),
    S.STOPPED: (S.STARTED, S.STOPPED),
    S.FAILED: (S.STARTED, S.FAILED),
    S.COMPLETED: (S.STARTED, S.COMPLETED),
    S.UNKNOWN: (S.STARTED, S.UNKNOWN),
    S.ABANDONED: (S.STARTED, S.FAILED, S.ABANDONED),
}
CASES = list(itertools.product(list(S), list(S), [True, False]))
# ``FAILURE`` (what the HTTP path sends) as the repository path passes it.
REQUEST_FAILURE = FailureSummary(FailureCategory.USER_COMPONENT, 7)


def expected_outcome(source: BatchStatus, target: BatchStatus, with_failure: bool) -> str:
    """The code contract §2.1 fixes (``ok`` for an applied move); the failure check
    only matters for a pair the runtime may make (the sources here carry none)."""
    if target is S.STARTING and source in {S.STOPPED, S.FAILED}:
        return "restart_requires_new_attempt"
    if target not in RUNTIME_MAY[source]:
        return "illegal_transition"
    if target is S.FAILED and not with_failure:
        return "failed_transition_missing_failure"
    return "ok"


@pytest.fixture
def api_clock(monkeypatch: pytest.MonkeyPatch, clock: FixedClock) -> FixedClock:
    """The API stamps with the clock the setup advances (never behind the rows)."""
    monkeypatch.setattr(deps, "clock", clock)
    return clock


def execution_in(repo: DjangoJobRepository, clock: FixedClock, source: BatchStatus, run: str):
    return move(repo, launch(repo, key(run=run)), *SETUP[source], clock=clock)


def via_repository(repo, execution, target: BatchStatus, with_failure: bool) -> tuple[Any, ...]:
    transition = LifecycleTransition(target, failure=REQUEST_FAILURE if with_failure else None)
    try:
        with repo.begin() as uow:
            moved = uow.transition_job_execution(
                execution.id, execution.version, transition, by_runtime=True
            )
            uow.commit()
    except OxideBatchError as error:
        return (error.code,)
    return ("ok", moved.status, moved.version)


def via_http(rt: Runtime, execution, target: BatchStatus, with_failure: bool) -> tuple[Any, ...]:
    body: dict[str, Any] = {"expected_version": execution.version, "status": target.value}
    if with_failure:
        body["failure"] = FAILURE
    response = rt.post(f"executions/{execution.id}/transition", body)
    if response.status_code == 200:
        moved = response.json()
        return ("ok", S(moved["status"]), moved["version"])
    return (problem(response, 409)["code"],)


@pytest.mark.parametrize(
    ("source", "target", "with_failure"),
    CASES,
    ids=[f"{s.value}->{t.value}-{'failure' if f else 'no-failure'}" for s, t, f in CASES],
)
def test_http_and_repository_answer_the_same_code_for_every_runtime_job_transition(
    rt: Runtime, repo, api_clock, source, target, with_failure
):
    run = f"{source.value}-{target.value}-{with_failure}"
    through_repository = via_repository(
        repo, execution_in(repo, api_clock, source, f"repo-{run}"), target, with_failure
    )
    through_http = via_http(
        rt, execution_in(repo, api_clock, source, f"http-{run}"), target, with_failure
    )

    assert through_http == through_repository
    assert through_repository[0] == expected_outcome(source, target, with_failure)


@pytest.mark.parametrize("with_failure", [False, True], ids=["no-failure", "failure"])
def test_leaving_unknown_with_a_carried_failure_is_still_illegal_on_both_paths(
    rt: Runtime, repo, api_clock, with_failure
):
    """An unknown commit reported as UNKNOWN with its failure: FAILED would find
    the failure carried forward, but leaving UNKNOWN is the operator's decision."""
    unknown_commit = FailureSummary(FailureCategory.UNKNOWN_COMMIT, 3)
    executions = []
    for run in ("repo", "http"):
        started = move(repo, launch(repo, key(run=run)), S.STARTED, clock=api_clock)
        with repo.begin() as uow:
            executions.append(
                uow.transition_job_execution(
                    started.id, started.version, LifecycleTransition(S.UNKNOWN, unknown_commit)
                )
            )
            uow.commit()
    assert via_repository(repo, executions[0], S.FAILED, with_failure) == ("illegal_transition",)
    assert via_http(rt, executions[1], S.FAILED, with_failure) == ("illegal_transition",)


@pytest.mark.parametrize(
    ("source", "target", "applied"),
    [
        (S.STARTED, S.FAILED, True),
        (S.STARTED, S.STOPPING, True),
        (S.UNKNOWN, S.FAILED, False),
        (S.STOPPED, S.ABANDONED, False),
    ],
    ids=["to-FAILED", "to-STOPPING", "leave-UNKNOWN", "ABANDON"],
)
def test_a_runtime_transition_is_one_locking_read_and_one_write(
    rt: Runtime, repo, api_clock, source, target, applied
):
    execution = execution_in(repo, api_clock, source, "budget")
    body = {"expected_version": execution.version, "status": target.value, "failure": FAILURE}
    with CaptureQueriesContext(connection) as queries:
        response = rt.post(f"executions/{execution.id}/transition", body)
    assert response.status_code == (200 if applied else 409), response.content
    on_row = [q["sql"] for q in queries.captured_queries if '"ob_job_execution"' in q["sql"]]
    writes = [sql for sql in on_row if sql.startswith("UPDATE")]
    before_write = on_row[: on_row.index(writes[0])] if writes else on_row

    assert len(before_write) == 1, before_write  # the locking read, nothing ahead of it
    if on_postgres():
        assert " FOR " in before_write[0], before_write[0]
    assert len(writes) == (1 if applied else 0), writes
