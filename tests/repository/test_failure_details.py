"""A failure's detail (contract §2, "Failure detail"; decisions 300-306): kept by
the transition that records the failure, scrubbed of secrets and of the
instance's hidden parameter values, bounded, as much as the deployment allows,
apart from the execution and step rows — the same on both adapters — and
purged with its instance. The adapter's statements: one INSERT more, only
when a detail is kept."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import StaleVersion
from oxide_batch.domain.execution import FailureSummary
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.parameters import JobInstanceKey, JobParameter, ParameterType
from oxide_batch.domain.recovery import RecoveryRequest
from oxide_batch.domain.retention import PurgeCriteria
from oxide_batch.domain.status import FailureCategory
from tests.conftest import on_postgres
from tests.helpers import launch, move

pytestmark = pytest.mark.contract
S = BatchStatus
SECRET = "s3cr3t-Vault-Pass"
SENT = FailureDetail(
    "ValueError",
    f"bad row 17: password=hunter2 (vault {SECRET})",
    f'Traceback (most recent call last):\n  File "job.py", line 3\nValueError: {SECRET}\n',
)


def secret_key(run: str = "2026-07-29") -> JobInstanceKey:
    """An instance with a hidden parameter holding a secret, and a short one."""
    return JobInstanceKey.of(
        "detail_job",
        [
            JobParameter("business_date", ParameterType.STRING, run),
            JobParameter("region", ParameterType.STRING, "EU"),
            JobParameter("vault_pass", ParameterType.STRING, SECRET),
        ],
    )


def failed(detail: FailureDetail | None = SENT, failure_id: int = 41) -> LifecycleTransition:
    return LifecycleTransition(
        S.FAILED, failure=FailureSummary(FailureCategory.USER_COMPONENT, failure_id, detail)
    )


def started(repo, clock):
    return move(repo, launch(repo, secret_key()), S.STARTED, clock=clock)


def fail(repo, execution, transition=None):
    with repo.begin() as uow:
        written = uow.transition_job_execution(
            execution.id, execution.version, transition or failed(), by_runtime=True
        )
        uow.commit()
    return written


def detail_of(repo, execution_id, step_id=None):
    with repo.begin() as uow:
        return uow.failure_detail(execution_id, step_execution_id=step_id)


def test_a_failing_transition_keeps_the_type_and_the_scrubbed_message_by_default(repo, clock):
    execution = fail(repo, started(repo, clock))
    kept = detail_of(repo, execution.id)
    assert kept is not None
    assert kept.type == "ValueError"
    assert kept.message == "bad row 17: password=[redacted] (vault [redacted])"
    assert kept.traceback is None  # `message` keeps no traceback
    assert not (kept.type_truncated)
    assert not (kept.message_truncated)
    assert not (kept.traceback_truncated)


def test_traceback_keeps_the_scrubbed_traceback_and_off_keeps_nothing(repo, clock, settings):
    settings.OXIDE_BATCH_FAILURE_DETAIL = "traceback"
    execution = fail(repo, started(repo, clock))
    kept = detail_of(repo, execution.id)
    assert kept is not None
    assert kept.traceback is not None
    assert SECRET not in kept.traceback
    assert "ValueError: [redacted]" in kept.traceback
    settings.OXIDE_BATCH_FAILURE_DETAIL = "off"
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(secret_key("2026-07-30")).instance
        other = uow.create_job_execution(instance.id)
        uow.commit()
    other = fail(repo, move(repo, other, S.STARTED, clock=clock))
    assert other.status is S.FAILED
    assert detail_of(repo, other.id) is None


def test_a_visible_parameter_and_a_short_value_are_not_redacted(repo, clock, settings):
    settings.OXIDE_BATCH_VISIBLE_PARAMETERS = ["vault_pass"]
    sent = FailureDetail("KeyError", f"{SECRET} in EU")
    execution = fail(repo, started(repo, clock), failed(sent))
    kept = detail_of(repo, execution.id)
    assert kept is not None
    assert kept.message == f"{SECRET} in EU"


def test_a_step_keeps_its_own_detail(repo, clock):
    execution = started(repo, clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load", started=True)
        uow.transition_step_execution(step.id, step.version, failed(failure_id=7))
        uow.commit()
    kept = detail_of(repo, execution.id, step.id)
    assert kept is not None
    assert kept.type == "ValueError"
    assert detail_of(repo, execution.id) is None  # the execution's own: none yet


def test_a_transition_without_detail_or_refused_keeps_nothing(repo, clock):
    execution = started(repo, clock)
    with repo.begin() as uow, pytest.raises(StaleVersion):
        uow.transition_job_execution(execution.id, execution.version - 1, failed())
    fail(repo, execution, failed(detail=None))
    assert detail_of(repo, execution.id) is None


def test_the_detail_stays_when_the_execution_is_recovered(repo, clock):
    unknown = LifecycleTransition(
        S.UNKNOWN, failure=FailureSummary(FailureCategory.UNKNOWN_COMMIT, 5, SENT)
    )
    execution = fail(repo, started(repo, clock), unknown)
    request = RecoveryRequest.abandon(
        expected_version=execution.version,
        reason_code="ORPHAN_CONFIRMED",
        operator_reference="ops",
        evidence_digest=b"\x01" * 32,
    )
    with repo.begin() as uow:
        uow.recover_job_execution(execution.id, request)
        uow.commit()
    kept = detail_of(repo, execution.id)
    assert kept is not None
    assert kept.type == "ValueError"


def test_the_purge_deletes_the_details_of_the_instances_it_purges(repo, clock):
    execution = started(repo, clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load", started=True)
        uow.transition_step_execution(step.id, step.version, failed(failure_id=7))
        uow.commit()
    execution = fail(repo, execution)
    assert detail_of(repo, execution.id, step.id) is not None
    clock.advance(timedelta(days=2))
    with repo.begin() as uow:
        plan = uow.purge_survey(
            PurgeCriteria(clock.now() - timedelta(days=1)), min_age=timedelta(0)
        )
    assert [c.instance_id for c in plan.candidates] == [execution.job_instance_id]
    with repo.begin() as uow:
        uow.apply_purge(plan, min_age=timedelta(0))
        uow.commit()
    if getattr(repo, "tables", None) is not None:
        assert not repo.tables.failure_details
    else:
        assert not models.FailureDetail.objects.exists()


# -- the adapter's statements ------------------------------------------------------------


def sql_of(repo, execution, transition):
    with repo.begin() as uow, CaptureQueriesContext(connection) as queries:
        uow.transition_job_execution(execution.id, execution.version, transition, by_runtime=True)
        uow.commit()
    return [
        q["sql"]
        for q in queries.captured_queries
        if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))
    ]


@pytest.mark.adapter
@pytest.mark.parametrize("level", ["message", "off"])
def test_without_a_kept_detail_a_failing_transition_is_unchanged(repo, clock, settings, level):
    """No detail sent, or `off`: the locking read, the write, the outbox event —
    the locking read without the instance's parameters."""
    settings.OXIDE_BATCH_FAILURE_DETAIL = level
    transition = failed(detail=None if level == "message" else SENT)
    sql = sql_of(repo, started(repo, clock), transition)
    verbs = [statement.split()[0] for statement in sql if statement.split()[0] != "COMMIT"]
    assert verbs == ["SELECT", "UPDATE", "INSERT"], sql
    assert "ob_job_instance" not in sql[0]
    assert "ob_notification_event" in sql[2]


@pytest.mark.adapter
def test_a_kept_detail_is_exactly_one_insert_more(repo, clock):
    """The same locking read (it joins the instance's parameters), the same write,
    one INSERT of the detail, then the outbox event."""
    sql = sql_of(repo, started(repo, clock), failed())
    verbs = [statement.split()[0] for statement in sql if statement.split()[0] != "COMMIT"]
    assert verbs == ["SELECT", "UPDATE", "INSERT", "INSERT"], sql
    assert "ob_job_instance" in sql[0]
    assert "ob_failure_detail" in sql[2]
    if on_postgres():
        assert sql[0].endswith("FOR NO KEY UPDATE OF e")


@pytest.mark.adapter
def test_a_step_with_a_kept_detail_is_one_insert_more(repo, clock):
    execution = started(repo, clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load", started=True)
        uow.commit()
    with repo.begin() as uow, CaptureQueriesContext(connection) as queries:
        uow.transition_step_execution(step.id, step.version, failed())
    verbs = [q["sql"].split()[0] for q in queries.captured_queries]
    assert verbs == ["SELECT", "UPDATE", "INSERT"]
    assert "ob_failure_detail" in queries.captured_queries[2]["sql"]


@pytest.mark.adapter
def test_reading_a_detail_is_one_statement(repo, clock):
    execution = fail(repo, started(repo, clock))
    with repo.begin() as uow, CaptureQueriesContext(connection) as queries:
        uow.failure_detail(execution.id)
    assert len(queries.captured_queries) == 1
