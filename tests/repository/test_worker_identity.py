"""Who runs it, stored with the claim (decision 310): the launch's insert,
the claim's update and the step's insert write the worker's identity in the
statement that records the owner — no statement more on any of these paths —
on the Django adapter and the in-memory fake alike (``contract``)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch.domain import BatchStatus
from oxide_batch.domain.worker import WorkerIdentity
from tests.helpers import key

TOKEN = bytes(range(16))
WORKER = WorkerIdentity(host="worker-3", pid=4122, name="loader-2", client="oxide-batch 0.6.0")


@pytest.mark.contract
def test_a_launch_records_the_worker_with_its_owner(repo):
    with repo.begin() as uow:
        launched = uow.launch_job_execution(key(), TOKEN, worker=WORKER).execution
        uow.commit()
    with repo.begin() as uow:
        evidence = uow.recovery_evidence(launched.id)
        # The owner's control observation: its view reads what the launch stored.
        view = uow.observe_execution_control(launched.id, TOKEN).execution
    assert evidence.owner == WORKER
    assert view.worker == WORKER


@pytest.mark.contract
def test_a_claim_records_the_worker_once(repo):
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key()).instance
        execution = uow.create_job_execution(instance.id)
        claimed = uow.claim_execution_owner(execution.id, 0, TOKEN, worker=WORKER)
        again = uow.claim_execution_owner(
            execution.id, 0, TOKEN, worker=WorkerIdentity(host="elsewhere")
        )
        uow.commit()
    assert claimed.worker == WORKER
    assert again.worker == WORKER
    with repo.begin() as uow:
        assert uow.recovery_evidence(execution.id).owner == WORKER


@pytest.mark.contract
def test_a_step_records_its_own_worker_and_none_without_one(repo):
    worker = WorkerIdentity(host="worker-9", pid=77)
    with repo.begin() as uow:
        launched = uow.launch_job_execution(key(), TOKEN).execution
        step = uow.create_step_execution(launched.id, "load:1", worker=worker, started=True)
        plain = uow.create_step_execution(launched.id, "plain")
        uow.commit()
    assert step.worker == worker
    assert plain.worker is None
    assert step.status is BatchStatus.STARTED
    with repo.begin() as uow:
        assert uow.get_step_execution(step.id).worker == worker
        assert uow.get_step_execution(plain.id).worker is None
        assert uow.recovery_evidence(launched.id).owner is None


def _statements(run) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        run()
    return [query["sql"] for query in captured.captured_queries]


@pytest.mark.adapter
@pytest.mark.django_db
@pytest.mark.parametrize("path", ["launch", "claim", "step"])
def test_the_identity_is_written_by_the_owners_statement_and_adds_none(repo, path):
    """The same statements with and without an identity; the one that records
    the owner (or inserts the step) carries the worker's columns."""

    def run(worker, name):
        def go():
            with repo.begin() as uow:
                if path == "launch":
                    uow.launch_job_execution(key(job=f"launch-{name}"), TOKEN, worker=worker)
                elif path == "claim":
                    uow.claim_execution_owner(prepared[name], 0, TOKEN, worker=worker)
                else:
                    uow.create_step_execution(prepared[name], "load", worker=worker)
                uow.commit()

        return go

    prepared = {}
    for name in ("without", "with"):
        with repo.begin() as uow:
            instance = uow.select_or_create_job_instance(key(job=name)).instance
            prepared[name] = uow.create_job_execution(instance.id).id
            uow.commit()
    without = _statements(run(None, "without"))
    with_identity = _statements(run(WORKER, "with"))
    assert len(with_identity) == len(without)
    table = "ob_step_execution" if path == "step" else "ob_job_execution"
    writes = [
        sql
        for sql in with_identity
        if sql.lstrip().upper().startswith(("INSERT", "UPDATE")) and table in sql.split("(")[0]
    ]
    assert len(writes) == 1, with_identity
    assert "worker_host" in writes[0]
    assert "worker-3" in writes[0]
