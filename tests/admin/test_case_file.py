"""An execution page is a case file (issue 14 point 1): status, attempt, job and
visible parameters, last activity, inactivity against the threshold, owner and
stop state, the recovery proposal inline for an unresolved execution, and a
timeline from the durable timestamps."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from tests.helpers import key, launch, move, recover_as_proposed

pytestmark = pytest.mark.django_db


def _page(client, execution_id: int) -> str:
    response = client.get(reverse("admin:oxide_batch_jobexecution_change", args=[execution_id]))
    assert response.status_code == 200
    html: str = response.content.decode()
    return html


def _case(html: str) -> str:
    return html.split('<section class="ob-case"', 1)[1].split("</section>", 1)[0]


def test_a_stale_started_execution_says_eligible_with_its_evidence(admin_client, demo):
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    case = _case(_page(admin_client, stale.pk))
    assert "eligible for recovery" in case
    assert re.search(r"inactive \d+ h( \d\d min)?, over the 15 min threshold", case)
    assert "<dt>Owner</dt><dd>no owner recorded</dd>" in case
    assert "no marker raised" in case
    recover = reverse("admin:oxide_batch_jobexecution_act", args=["recover"]) + f"?ids={stale.pk}"
    assert f'href="{recover}"' in case
    # The latest step of the evidence is named, not just "STARTED".
    latest = models.StepExecution.objects.filter(job_execution_id=stale.pk).order_by("-id")[0]
    assert f">{latest.step_name}</a>" in case.split("Evidence:", 1)[1]
    assert " UTC</small>" in case  # absolute times beside the relative ones


def test_an_unknown_execution_explains_the_unknown_commit(admin_client, demo):
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    case = _case(_page(admin_client, unknown.pk))
    assert "eligible for recovery</strong> — its outcome is unknown" in case
    assert "Unknown commit</strong>:" in case
    assert "UNKNOWN_EFFECT" in case


def test_a_finished_execution_has_no_proposal_and_no_recover_link(admin_client, demo):
    done = models.JobExecution.objects.filter(status="COMPLETED").order_by("pk")[0]
    html = _page(admin_client, done.pk)
    case = _case(html)
    assert "Recovery</dt>" not in case
    assert "/act/recover/" not in case
    assert "execution ended" in case
    assert "(running)" not in html


def test_a_viewer_sees_the_proposal_but_no_recover_link(viewer_client, demo):
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    case = _case(_page(viewer_client, stale.pk))
    assert "eligible for recovery" in case
    assert "/act/recover/" not in case
    assert "recover_execution" in case


def test_the_timeline_is_in_time_order_from_the_durable_timestamps(admin_client, demo):
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    case = _case(_page(admin_client, stale.pk))
    timeline = case.split('<ol class="ob-timeline"', 1)[1]
    stamps = re.findall(r'<time datetime="([^"]+)">', timeline)
    assert stamps == sorted(stamps)
    assert len(stamps) >= 3
    assert "execution created (attempt 1)" in timeline
    for step in models.StepExecution.objects.filter(job_execution_id=stale.pk):
        assert f">{step.step_name}</a> started" in timeline
    assert "<strong>now</strong> — still active" in timeline


def test_after_a_recovery_the_page_links_the_decision_and_resolves_the_steps(admin_client, demo):
    from oxide_batch.repository import DjangoJobRepository
    from oxide_batch.services.audit import Actor
    from oxide_batch.services.operator import OperatorService

    stale = models.JobExecution.objects.get(job_name="customer_sync")
    service = OperatorService(DjangoJobRepository())
    result = recover_as_proposed(
        service, stale.pk, actor=Actor("user:test", None), operation_id="case-file-test-1"
    )
    decision = models.RecoveryDecision.objects.get(job_execution_id=stale.pk)
    html = _page(admin_client, stale.pk)
    case = _case(html)
    assert result is not None
    assert "Resolved by</dt>" in case
    assert reverse("admin:oxide_batch_recoverydecision_change", args=[decision.pk]) in case
    assert "Recovery</dt>" not in case  # no longer unresolved: no proposal, no action
    assert "/act/recover/" not in case
    assert "(running)" not in html  # its steps were resolved, none reads running


@override_settings(OXIDE_BATCH_VISIBLE_PARAMETERS=frozenset({"business_date"}))
def test_the_case_file_shows_the_visible_parameters(admin_client, demo):
    run = models.JobExecution.objects.filter(job_name="nightly_import").order_by("-pk")[0]
    case = _case(_page(admin_client, run.pk))
    assert "business_date=<code>" in case


def test_the_owner_token_is_never_read_by_the_execution_pages(admin_client, demo, repo, clock):
    """The pages say whether an owner is recorded (``facts.owner_recorded``,
    ``owner_token IS NOT NULL`` in the list's one query), never the token: no
    statement of a finished execution's pages selects the column, not even a
    deferred field's load (an unresolved one's proposal is the repository's
    evidence read)."""
    owned = launch(repo, key(run="owned"))
    with repo.begin() as uow:
        uow.claim_execution_owner(owned.id, 0, b"\x01" * 16)
        uow.commit()
    move(repo, owned, BatchStatus.STARTED, BatchStatus.COMPLETED, clock=clock)
    pages = [
        reverse("admin:oxide_batch_jobexecution_changelist"),
        reverse("admin:oxide_batch_jobexecution_change", args=[owned.id]),
    ]
    with CaptureQueriesContext(connection) as captured:
        for url in pages:
            assert admin_client.get(url).status_code == 200
    selected = re.compile(r'"owner_token"\s*(,|FROM\b)')
    assert not [q["sql"] for q in captured.captured_queries if selected.search(q["sql"])]
    assert "owner recorded" in _case(_page(admin_client, owned.id))


def test_the_case_file_reads_a_constant_number_of_queries(admin_client, demo, more_rows):
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    url = reverse("admin:oxide_batch_jobexecution_change", args=[stale.pk])
    admin_client.get(url)

    def count() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(url).status_code == 200
        return len(captured.captured_queries)

    before = count()
    more_rows(6)
    assert count() == before


def _notify(execution_id: int, events: int, *, rules: int = 2) -> None:
    """``events`` failure events of the execution, each delivered (or not) to ``rules`` rules."""
    from tests.admin.test_notifications_console import make_delivery, make_rule

    names = [f"case{index}" for index in range(rules)]
    found = {rule.name: rule for rule in models.NotificationRule.objects.filter(name__in=names)}
    made = [found.get(name) or make_rule(name) for name in names]
    for index in range(events):
        for rule in made:
            state = ("dead", "delivered", "pending")[index % 3]
            make_delivery(rule, state=state, attempts=index % 4, execution_id=execution_id)


def test_the_case_file_shows_the_notifications_and_their_delivery_state(admin_client, demo):
    run = models.JobExecution.objects.filter(job_name="nightly_import").order_by("-pk")[0]
    models.NotificationEvent.objects.filter(job_execution_id=run.pk).delete()
    assert "<dt>Notifications</dt><dd>None raised.</dd>" in _case(_page(admin_client, run.pk))
    _notify(run.pk, 1)
    case = _case(_page(admin_client, run.pk))
    assert "<dt>Notifications</dt>" in case
    assert "execution.failed" in case
    assert "case0" in case
    assert "case1" in case
    assert "DEAD" in case
    assert "HTTP 500 from the receiver" in case
    assert (
        reverse("admin:oxide_batch_notificationdelivery_changelist") + (f"?execution={run.pk}")
        in case
    )


def test_the_case_file_reads_its_notifications_in_one_bounded_query(admin_client, demo):
    """The page's budget grows by exactly one statement for the notifications
    (issue 41 point 6), whatever their number: more events and deliveries
    leave the count as it is."""
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    url = reverse("admin:oxide_batch_jobexecution_change", args=[stale.pk])
    _notify(stale.pk, 1)
    admin_client.get(url)

    def statements() -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(url).status_code == 200
        return [q["sql"] for q in captured.captured_queries]

    before = statements()
    _notify(stale.pk, 30)
    after = statements()
    assert len(after) == len(before)
    reading = [sql for sql in after if "ob_notification_event" in sql]
    assert len(reading) == 1
    assert "LIMIT 21" in reading[0]


def test_a_stop_only_operator_is_offered_the_stop_not_a_recover_note(client, demo):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission

    User = get_user_model()

    from oxide_batch.roles import VIEWER, ensure_roles

    ensure_roles()
    user = User.objects.create_user("stu", password="a-long-password", is_staff=True)
    user.groups.add(Group.objects.get(name=VIEWER))
    user.user_permissions.add(Permission.objects.get(codename="stop_execution"))
    client.force_login(user)
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    case = _case(_page(client, stale.pk))
    stop = reverse("admin:oxide_batch_jobexecution_act", args=["stop"]) + f"?ids={stale.pk}"
    assert f'href="{stop}"' in case
    assert "/act/recover/" not in case


def test_a_viewer_is_offered_no_hold_on_an_instance(viewer_client, demo):
    instance = models.JobInstance.objects.order_by("pk")[0]
    page = viewer_client.get(
        reverse("admin:oxide_batch_jobinstance_change", args=[instance.pk])
    ).content.decode()
    assert "/act/hold/" not in page
    assert "/act/release/" not in page


@pytest.mark.parametrize("end", [(), (BatchStatus.STOPPED,)], ids=["stopping", "stopped"])
def test_a_stopped_executions_timeline_says_started_to_stopping_and_when(
    admin_client, demo, repo, clock, end
):
    """The runtime's move to STOPPING is recorded once (``stopping_at``) and
    told at its time, while it stops and after it stopped — issue 39."""
    execution = launch(repo, key(run="stopping"))
    execution = move(repo, execution, BatchStatus.STARTED, BatchStatus.STOPPING, clock=clock)
    acknowledged = clock.now()
    execution = move(repo, execution, *end, clock=clock)
    assert models.JobExecution.objects.get(pk=execution.id).stopping_at == acknowledged
    html = _page(admin_client, execution.id)
    timeline = html.split('class="ob-timeline"', 1)[1].split("</ol>", 1)[0]
    line = next(item for item in timeline.split("<li>") if "acknowledged the stop" in item)
    assert acknowledged.strftime("%Y-%m-%d %H:%M:%S UTC") in line
    assert "STARTED → " in line
    assert ">STOPPING</span>" in line
    if end:
        assert "<strong>now</strong>" not in timeline
    else:
        assert ">STOPPING</span> — the runtime is stopping; still active" in timeline
