"""Who owns an execution and who resolved it, as the console says (issue 39):
the claimant's username wherever the owner is shown (the case file, the
executions list, the dashboard), and a STALE_RECOVERED failure names the
watchdog when the watchdog failed it, an operator when one did."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from oxide_batch import models
from oxide_batch.domain import BatchStatus, ExecutionCounts, LifecycleTransition
from oxide_batch.services import bootstrap
from oxide_batch.services.audit import Actor
from tests.helpers import key, launch, move, recover_as_proposed

pytestmark = pytest.mark.django_db
User = get_user_model()
TTL = timedelta(seconds=30)


def _claimed_running(repo, clock, *, username: str = "worker-7", run: str = "owned"):
    """A STARTED execution claimed by ``username``'s token, with a running step."""
    user = User.objects.create_user(username)
    execution = launch(repo, key(run=run))
    with repo.begin(runtime_user_id=user.pk) as uow:
        uow.claim_execution_owner(execution.id, 0, b"\x07" * 16)
        uow.commit()
    execution = move(repo, execution, BatchStatus.STARTED, clock=clock)
    with repo.begin(runtime_user_id=user.pk) as uow:
        step = uow.create_step_execution(execution.id, "load")
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(BatchStatus.STARTED))
        uow.commit_chunk(step.id, step.version, ExecutionCounts(read=1, committed=1))
        uow.commit()
    return execution


def _page(client, execution_id: int) -> str:
    url = reverse("admin:oxide_batch_jobexecution_change", args=[execution_id])
    response = client.get(url)
    assert response.status_code == 200
    html: str = response.content.decode()
    return html


def _case(html: str) -> str:
    return html.split('<section class="ob-case"', 1)[1].split("</section>", 1)[0]


def test_the_case_file_names_the_claimant_user(admin_client, repo, clock):
    execution = _claimed_running(repo, clock)
    case = _case(_page(admin_client, execution.id))
    assert "claimed by user <strong>worker-7</strong>" in case
    # The recovery panel's marker names the user too: whose process to look for.
    assert "a worker of user worker-7 claimed this execution. Make sure that process" in case


def test_a_claimant_whose_account_is_gone_is_named_by_id(admin_client, repo, clock):
    execution = _claimed_running(repo, clock, username="gone")
    user_id = User.objects.get(username="gone").pk
    User.objects.filter(pk=user_id).delete()
    case = _case(_page(admin_client, execution.id))
    assert f"claimed by user #{user_id} (the account no longer exists)" in case


def test_the_list_and_the_dashboard_name_the_claimant(admin_client, repo, clock):
    execution = _claimed_running(repo, clock)
    listing = admin_client.get(reverse("admin:oxide_batch_jobexecution_changelist"))
    assert "owner</span> worker-7" in listing.content.decode()
    # Past its lease the execution is unresolved: the dashboard lists it.
    models.JobExecution.objects.filter(pk=execution.id).update(
        last_activity_at=clock.now() - timedelta(days=1)
    )
    models.StepExecution.objects.filter(job_execution_id=execution.id).update(
        last_activity_at=clock.now() - timedelta(days=1)
    )
    dashboard = admin_client.get(reverse("admin:oxide_batch_dashboard")).content.decode()
    unresolved = dashboard.split('id="ob-unresolved"', 1)[1].split("</section>", 1)[0]
    assert f"#{execution.id}" in unresolved
    assert "user worker-7" in unresolved


def _failure_line(client, execution_id: int) -> str:
    return _case(_page(client, execution_id)).split("STALE_RECOVERED", 1)[1].split("</div>", 1)[0]


def test_a_watchdog_recovery_names_the_watchdog_not_an_operator(
    admin_client, repo, clock, settings
):
    settings.OXIDE_BATCH_LEASE_TTL = TTL  # the claim is granted the TTL judged by
    execution = _claimed_running(repo, clock)
    clock.advance(TTL + timedelta(milliseconds=1))
    service = bootstrap.operator_service(repo, stale_after=timedelta(minutes=15), lease_ttl=TTL)
    bootstrap.watchdog(service, actor=Actor("watchdog@batch-7")).run_pass()
    line = _failure_line(admin_client, execution.id)
    assert "The watchdog (watchdog@batch-7) failed the execution" in line
    assert "An operator" not in line


def test_an_operator_recovery_names_the_operator(admin_client, repo, clock):
    execution = _claimed_running(repo, clock)
    clock.advance(timedelta(days=1))
    service = bootstrap.operator_service(repo, stale_after=timedelta(minutes=15), lease_ttl=TTL)
    recover_as_proposed(service, execution.id, actor=Actor("alice"), operation_id="op-1")
    line = _failure_line(admin_client, execution.id)
    assert "An operator (alice) resolved the execution" in line
