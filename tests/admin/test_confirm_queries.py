"""The confirmation page reads its rows, their applicability and (for recover)
their proposals in a fixed number of queries: 50 rows cost what 1 row costs
(it was 4 more per row for recover — one unit of work per proposal)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch.domain import BatchStatus, LifecycleTransition
from tests.admin.test_actions import _url
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus
ROWS = 50


@pytest.fixture
def executions(repo):
    """50 executions, the first UNKNOWN, then a mix: UNKNOWN, STARTED with a
    step, FAILED, COMPLETED (so every page has rows to act on and rows not)."""
    ids = []
    for n in range(ROWS):
        execution = move(repo, launch(repo, key(run=f"run-{n}")), S.STARTED)
        kind = n % 4
        if kind == 0:
            execution = move(repo, execution, S.UNKNOWN)
        elif kind == 1:
            with repo.begin() as uow:
                step = uow.create_step_execution(execution.id, "load")
                uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
                uow.commit()
        elif kind == 2:
            execution = move(repo, execution, S.FAILED)
        else:
            execution = move(repo, execution, S.COMPLETED)
        ids.append(execution.id)
    return ids


def _count(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(captured.captured_queries)


@pytest.mark.parametrize("action", ["recover", "abandon", "stop"])
def test_an_execution_confirmation_of_50_rows_costs_what_1_row_costs(
    operator_client, executions, action
):
    one = _url("jobexecution", action, executions[0])
    many = _url("jobexecution", action, *executions)
    operator_client.get(one)  # warm the per-process caches (content types, session)
    assert _count(operator_client, many) == _count(operator_client, one)
    page = operator_client.get(many).content.decode()
    assert f"{ROWS} rows selected" in page


@pytest.mark.parametrize("action", ["hold", "release"])
def test_an_instance_confirmation_of_50_rows_costs_what_1_row_costs(
    operator_client, executions, action
):
    from oxide_batch import models

    instances = list(
        models.JobExecution.objects.filter(pk__in=executions)
        .order_by("pk")
        .values_list("job_instance_id", flat=True)
    )
    one = _url("jobinstance", action, instances[0])
    many = _url("jobinstance", action, *instances)
    operator_client.get(one)
    assert _count(operator_client, many) == _count(operator_client, one)
