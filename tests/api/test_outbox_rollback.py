"""A terminal transition through the API that rolls back after its UPDATE leaves
no notification event; the same request retried and committed leaves exactly
one (issue 41 point 1, acceptance: "a change that rolls back after its UPDATE
produces no event"). The fault is injected after the write, before the
commit: the unit of work's COMMIT is replaced by a lost connection."""

from __future__ import annotations

from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.domain.errors import Unavailable
from tests.api.support import Runtime, problem

pytestmark = pytest.mark.django_db

FAILED = {"status": "FAILED", "failure": {"category": "USER_COMPONENT", "failure_id": 7}}


def test_a_failed_transition_that_rolls_back_after_its_write_leaves_no_event(
    rt: Runtime, monkeypatch
) -> None:
    _, execution = rt.launch()
    path = f"executions/{execution['id']}/transition"
    rt.post(path, {"expected_version": 0, "status": "STARTED"}, 200)
    seen_in_the_transaction: list[list[str]] = []

    def fault_before_the_commit(self: Any) -> None:
        seen_in_the_transaction.append(
            list(models.NotificationEvent.objects.values_list("kind", flat=True))
        )
        raise Unavailable()  # the unit of work rolls back on the way out

    with monkeypatch.context() as patch:
        patch.setattr(
            "oxide_batch.repository.unit_of_work.UnitOfWorkBase.commit", fault_before_the_commit
        )
        problem(rt.post(path, {"expected_version": 1, **FAILED}), 503, "unavailable")
    # The UPDATE and the event's INSERT were both in the transaction…
    assert seen_in_the_transaction == [["execution.failed"]]
    # …and both left with it.
    assert not models.NotificationEvent.objects.exists()
    assert models.JobExecution.objects.get(pk=execution["id"]).status == "STARTED"

    rt.post(path, {"expected_version": 1, **FAILED}, 200)  # the retry commits
    assert list(models.NotificationEvent.objects.values_list("kind", "job_execution_id")) == [
        ("execution.failed", execution["id"])
    ]
