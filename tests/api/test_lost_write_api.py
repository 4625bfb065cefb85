"""``version_ahead`` over HTTP (issue 26 point 3): a write whose expected version
is ahead of the stored row — a write the repository acknowledged and lost — is a
409 ``version_ahead`` naming both versions on the runtime's and the operator's
compare-and-swap endpoints, never ``stale_version``; the execution is marked."""

from __future__ import annotations

import pytest
from django.db.models import F

from oxide_batch import models
from tests.api.support import Runtime, problem

pytestmark = pytest.mark.django_db
CHUNK = {"read": 10, "processed": 10, "written": 10, "filtered": 0, "committed": 1}


def test_a_chunk_after_a_lost_write_answers_version_ahead(rt: Runtime) -> None:
    execution = rt.started()
    step = rt.started_step(execution)
    models.StepExecution.objects.filter(pk=step["id"]).update(version=F("version") - 1)
    body = problem(
        rt.post(f"steps/{step['id']}/checkpoint", {"expected_version": step["version"],
                                                   "counts": CHUNK}),
        409,
        "version_ahead",
    )  # fmt: skip
    assert (body["expected"], body["actual"]) == (step["version"], step["version"] - 1)
    assert "lost an acknowledged write" in body["detail"]
    marker = models.JobExecution.objects.get(pk=execution["id"]).lost_write
    assert marker is not None
    assert marker["expected_version"] == step["version"]
    # The version it really had is a stale_version no more: it is what is stored.
    rt.post(
        f"steps/{step['id']}/checkpoint",
        {"expected_version": step["version"] - 1, "counts": CHUNK},
        200,
    )


def test_an_execution_transition_and_an_operator_stop_answer_version_ahead(
    rt: Runtime, operator: Runtime
) -> None:
    execution = rt.started()
    ahead = execution["version"] + 1
    problem(rt.post(f"executions/{execution['id']}/transition",
                    {"expected_version": ahead, "status": "COMPLETED"}), 409,
            "version_ahead")  # fmt: skip
    problem(operator.post(f"executions/{execution['id']}/stop",
                          {"expected_version": ahead, "operation_id": "s-1"}), 409,
            "version_ahead")  # fmt: skip
    problem(rt.post(f"executions/{execution['id']}/transition",
                    {"expected_version": execution["version"] - 1, "status": "COMPLETED"}),
            409, "stale_version")  # fmt: skip
