"""The console keeps the whole story (issue 25): a failure stays a failure
whatever followed, and says what became of it; a recovery keeps the evidence it
was taken on and the runtime's last activity; the operators' acts are events of
their own on the timeline; a recovery's failure id is presented as what it is."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from oxide_batch import models
from oxide_batch.admin import dashboard
from oxide_batch.admin.eligibility import recorded_evidence
from oxide_batch.demo.workload import Workload
from oxide_batch.domain import BatchStatus
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.domain.status import FailureCategory
from oxide_batch.repository import DjangoJobRepository
from oxide_batch.services.audit import Actor
from oxide_batch.services.bootstrap import operator_service, retention_service
from oxide_batch.services.operator import OperatorService
from tests.helpers import recover_as_proposed

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:oxide_batch_jobexecution_changelist")
FAILED24H = CHANGELIST + "?triage=failed24h"


def _page(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    html: str = response.content.decode()
    return html


def _execution(client, pk: int) -> str:
    return _page(client, reverse("admin:oxide_batch_jobexecution_change", args=[pk]))


def _case(html: str) -> str:
    return html.split('<section class="ob-case"', 1)[1].split("</section>", 1)[0]


def _timeline(html: str) -> str:
    return _case(html).split('<ol class="ob-timeline"', 1)[1].split("</ol>", 1)[0]


def _row(html: str, pk: int) -> str:
    """The changelist row of execution ``pk``."""
    for row in re.findall(r"<tr>.*?</tr>", html, flags=re.S):
        if f'name="_selected_action" value="{pk}"' in row:
            return str(row)
    raise AssertionError(f"execution {pk} is not listed")


def _listed(html: str) -> set[int]:
    return {int(v) for v in re.findall(r'name="_selected_action" value="(\d+)"', html)}


def _service() -> OperatorService:
    return operator_service(DjangoJobRepository())


def _abandon(pk: int, actor: str = "user:otto", operation: str = "abandon-1") -> None:
    execution = models.JobExecution.objects.get(pk=pk)
    _service().abandon(
        pk,
        expected_version=execution.version,
        reason_code="RERUN_NOT_NEEDED",
        actor=Actor(actor, None),
        operation_id=operation,
    )


def _recover(pk: int, disposition: RecoveryDisposition = RecoveryDisposition.MARK_FAILED) -> int:
    recover_as_proposed(
        _service(),
        pk,
        actor=Actor("user:otto", None),
        operation_id=f"recover-{pk}",
        disposition=disposition,
    )
    return int(models.RecoveryDecision.objects.get(job_execution_id=pk).pk)


def _failed(job: str, *, hours_ago: float = 1, n: int = 1):  # type: ignore[no-untyped-def]
    work = Workload(datetime.now(UTC) - timedelta(hours=hours_ago))
    execution = work.move(work.launch(job, n=n), BatchStatus.STARTED)
    work.run_steps(
        execution, ["load"], last=BatchStatus.FAILED, category=FailureCategory.USER_COMPONENT
    )
    failed = work.move(execution, BatchStatus.FAILED, category=FailureCategory.USER_COMPONENT)
    return work, failed


# -- 1. a failure stays a failure, and says what became of it ---------------------------


def test_an_abandoned_failure_is_still_failed_in_the_last_24_hours_and_says_by_whom(
    admin_client, demo
):
    _, failed = _failed("history_job")
    _abandon(failed.id)
    assert models.JobExecution.objects.get(pk=failed.id).status == "ABANDONED"
    html = _page(admin_client, FAILED24H)
    assert failed.id in _listed(html)
    row = _row(html, failed.id)
    assert "abandoned by user:otto" in row
    case = _case(_execution(admin_client, failed.id))
    assert "Since the failure</dt>" in case
    assert "abandoned by user:otto" in case
    assert "reason RERUN_NOT_NEEDED" in case


def test_a_failure_followed_by_a_later_attempt_says_superseded(admin_client, demo):
    work, failed = _failed("rerun_job")
    rerun = work.restart(failed)
    work.move(rerun, BatchStatus.STARTED)
    html = _page(admin_client, FAILED24H)
    row = _row(html, failed.id)
    assert "superseded by attempt 2" in row
    assert f">#{rerun.id}</a>" in row
    assert "STARTED" in row
    case = _case(_execution(admin_client, failed.id))
    assert "superseded by attempt 2" in case


def test_a_failure_nothing_followed_says_still_failed(admin_client, demo):
    _, failed = _failed("lonely_job")
    assert "still failed" in _row(_page(admin_client, FAILED24H), failed.id)


def test_the_failed_filter_selects_by_when_it_failed_not_when_it_ended(admin_client, demo):
    _, failed = _failed("old_failure_job", hours_ago=30)
    now = timezone.now()
    models.JobExecution.objects.filter(pk=failed.id).update(failed_at=now - timedelta(hours=30))
    assert failed.id not in _listed(_page(admin_client, FAILED24H))
    models.JobExecution.objects.filter(pk=failed.id).update(failed_at=now - timedelta(hours=2))
    assert failed.id in _listed(_page(admin_client, FAILED24H))


def test_the_failed_list_reads_a_constant_number_of_queries(admin_client, demo):
    def count() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(FAILED24H).status_code == 200
        return len(captured.captured_queries)

    admin_client.get(FAILED24H)
    before = count()
    for index in range(4):
        work, failed = _failed("more_failures", n=index)
        work.restart(failed)
        _abandon(failed.id, operation=f"abandon-more-{index}")
    assert count() == before


def test_the_case_file_of_an_abandoned_held_failure_reads_a_constant_number_of_queries(
    admin_client, demo
):
    _, failed = _failed("counted_job")
    url = reverse("admin:oxide_batch_jobexecution_change", args=[failed.id])

    def count() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(url).status_code == 200
        return len(captured.captured_queries)

    _abandon(failed.id)
    admin_client.get(url)
    before = count()
    retention = retention_service(DjangoJobRepository())
    for index in range(3):  # holds placed and released, a rerun: more timeline rows
        for action in (retention.place_hold, retention.release_hold):
            action(
                failed.job_instance_id,
                actor=Actor("user:hana", None),
                reason_code="LEGAL_HOLD",
                operation_id=f"{action.__name__}-{index}",
            )
    assert count() == before


def test_the_dashboard_counts_an_abandoned_failure_and_links_its_executions(admin_client, demo):
    _, failed = _failed("dash_job")
    _abandon(failed.id)
    html = _page(admin_client, reverse("admin:oxide_batch_dashboard"))
    section = html.split('id="ob-failures"', 1)[1].split("</section>", 1)[0]
    assert "No execution failed" not in section
    link = f"{CHANGELIST}?triage=failed24h&amp;failure_category=USER_COMPONENT"
    assert f'href="{link}"' in section
    listed = _listed(_page(admin_client, link.replace("&amp;", "&")))
    assert failed.id in listed
    assert set(
        models.JobExecution.objects.filter(pk__in=listed).values_list("failure_category", flat=True)
    ) == {"USER_COMPONENT"}
    assert "abandoned since" in section


def _dashboard_row(html: str, label: str) -> list[str]:
    """The cells of the dashboard's failure row whose first cell is ``label``."""
    section = html.split('id="ob-failures"', 1)[1].split("</section>", 1)[0]
    for row in section.split("<tr>")[1:]:
        cells = [re.sub(r"<[^>]+>", "", cell) for cell in row.split("<td>")[1:]]
        if cells and cells[0].strip() == label:
            return [cell.strip() for cell in cells]
    raise AssertionError(f"no dashboard row {label!r}")


def test_the_dashboard_counts_each_failure_once(admin_client, demo):
    """A failure followed by a rerun and then abandoned is abandoned, not also
    rerun: still failed + abandoned + rerun add up to the failures."""
    work, failed = _failed("once_job")
    rerun = work.restart(failed)
    work.move(rerun, BatchStatus.STARTED)
    _abandon(failed.id)
    _failed("once_job_2")  # still failed
    row = _dashboard_row(
        _page(admin_client, reverse("admin:oxide_batch_dashboard")), "USER_COMPONENT"
    )
    failures, still, abandoned, reran = (int(cell) for cell in row[1:5])
    assert (
        failures
        == models.JobExecution.objects.filter(
            failure_category="USER_COMPONENT", failed_at__isnull=False
        ).count()
    )
    assert still + abandoned + reran == failures
    assert abandoned >= 1


def test_the_no_category_row_lists_only_failures_without_one(admin_client, demo):
    # A FAILED row always has its failure; an abandoned one from before the
    # schema kept it may have none (the dashboard groups it as "no category").
    _, bare = _failed("bare_job")
    _abandon(bare.id)
    models.JobExecution.objects.filter(pk=bare.id).update(failure_category=None, failure_id=None)
    _, categorized = _failed("categorized_job")
    html = _page(admin_client, reverse("admin:oxide_batch_dashboard"))
    link = f"{CHANGELIST}?triage=failed24h&amp;failure_category=none"
    assert f'href="{link}">no category</a>' in html
    listed = _listed(_page(admin_client, link.replace("&amp;", "&")))
    assert bare.id in listed
    assert categorized.id not in listed
    assert set(
        models.JobExecution.objects.filter(pk__in=listed).values_list("failure_category", flat=True)
    ) <= {None, ""}


def test_the_dashboard_shows_a_stop_requested_on_an_unresolved_row(admin_client, demo):
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    _service().stop(
        stale.pk,
        expected_version=stale.version,
        actor=Actor("user:otto", None),
        operation_id="stop-dash",
    )
    html = _page(admin_client, reverse("admin:oxide_batch_dashboard"))
    unresolved = html.split('id="ob-unresolved"', 1)[1].split("</section>", 1)[0]
    row = next(r for r in re.findall(r"<tr>.*?</tr>", unresolved, re.S) if f"#{stale.pk}<" in r)
    assert "STOP REQUESTED" in row


def test_the_dashboard_refuses_naming_the_permission(db):
    user = get_user_model().objects.create_user("nobody", password="pw", is_staff=True)
    request = RequestFactory().get("/")
    request.user = user
    with pytest.raises(PermissionDenied) as refused:
        dashboard.dashboard_view(None, request)  # type: ignore[arg-type]
    assert str(refused.value) == "oxide_batch.view_batch"


# -- 2. a recovery keeps its evidence --------------------------------------------------


def test_after_a_recovery_the_page_keeps_the_runtimes_activity_and_the_steps_last_write(
    admin_client, demo
):
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    before = _case(_execution(admin_client, stale.pk))
    activity = re.search(r"<dt>Last activity</dt><dd><time datetime=\"([^\"]+)\"", before)
    assert activity is not None
    step = models.StepExecution.objects.filter(job_execution_id=stale.pk).order_by("-id")[0]
    decision = _recover(stale.pk)
    html = _execution(admin_client, stale.pk)
    case = _case(html)
    after = re.search(r"<dt>Last activity</dt><dd><time datetime=\"([^\"]+)\"", case)
    assert after is not None
    assert after.group(1) == activity.group(1)  # not the decision's time
    timeline = _timeline(html)
    written = step.last_activity_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert re.search(
        rf">{written}</time>.*?>{step.step_name}</a> last runtime write", timeline, re.S
    )
    link = reverse("admin:oxide_batch_recoverydecision_change", args=[decision])
    assert re.search(rf"execution ended .*?FAILED</span> by <a href=\"{link}\">", timeline)
    assert 'ended <span class="ob-badge ob-bad" title="status FAILED">FAILED</span> by' in (
        timeline
    )
    assert re.search(r"recovery decision #\d+</a>: STARTED → .*by user:otto, reason", timeline)


def test_the_last_activity_is_the_proposals_on_an_unresolved_execution(admin_client, demo):
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    proposal = _service().propose(stale.pk)
    case = _case(_execution(admin_client, stale.pk))
    shown = re.search(r"<dt>Last activity</dt><dd><time datetime=\"([^\"]+)\"", case)
    assert shown is not None
    assert datetime.fromisoformat(shown.group(1)) == proposal.evidence.activity_at


def test_the_timeline_has_the_stop_the_abandon_and_the_hold_with_who_and_why(admin_client, demo):
    _, failed = _failed("story_job")
    retention_service(DjangoJobRepository()).place_hold(
        failed.job_instance_id,
        actor=Actor("user:hana", None),
        reason_code="LEGAL_HOLD",
        operation_id="hold-story",
    )
    _abandon(failed.id, actor="user:abe")
    timeline = _timeline(_execution(admin_client, failed.id))
    assert re.search(r"abandoned</a> by user:abe, reason RERUN_NOT_NEEDED: FAILED → ", timeline)
    assert re.search(r"hold placed</a> on the instance by user:hana, reason LEGAL_HOLD", timeline)
    # The end is told at the failure's time, as FAILED (the abandon kept the end time).
    assert re.search(r"execution ended <span[^>]*>FAILED</span>", timeline)
    stamps = re.findall(r'<time datetime="([^"]+)">', timeline)
    assert stamps == sorted(stamps)


def test_the_timeline_has_a_stop_request_as_an_event(admin_client, demo):
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    _service().stop(
        stale.pk,
        expected_version=stale.version,
        actor=Actor("user:sam", None),
        operation_id="stop-story",
    )
    html = _execution(admin_client, stale.pk)
    assert re.search(r"stop requested</a> by user:sam", _timeline(html))
    # Said with its age, never "it never confirmed" right after the request.
    case = _case(html)
    assert "never confirmed" not in case
    assert re.search(
        r"Stop requested</strong>: an operator asked the runtime to stop \d+ s ago; "
        "the runtime has not confirmed yet.",
        case,
    )


def test_the_decision_page_shows_the_evidence_it_was_taken_on(admin_client, demo):
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    proposal = _service().propose(stale.pk)
    decision = _recover(stale.pk)
    url = reverse("admin:oxide_batch_recoverydecision_change", args=[decision])
    html = _page(admin_client, url)
    evidence = html.split("ob-evidence-recorded", 1)[1].split("</dl>", 1)[0]
    activity = proposal.evidence.activity_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert "last activity (what the rule read)</dt><dd><time datetime=" in evidence
    assert activity in evidence
    assert "before the decision" in evidence
    assert "newest step write</dt>" in evidence
    assert "owner&#x27;s last observation</dt>" in evidence
    assert "lease expiry</dt><dd>no lease (no owner recorded)" in evidence
    assert "rule</dt><dd>inactivity" in evidence
    assert re.search(r"inactive \d+ h( \d\d min)?, over the 15 min threshold", evidence)


def test_a_decision_before_schema_6_says_its_evidence_was_not_recorded(admin_client, demo):
    """Decision rows are append-only (a trigger on PostgreSQL): the renderer of
    the page's field is given the NULL an older decision holds."""
    from django.contrib import admin as django_admin

    stale = models.JobExecution.objects.get(job_name="customer_sync")
    decision = models.RecoveryDecision.objects.get(pk=_recover(stale.pk))
    decision.evidence = None  # (in memory only)
    page = django_admin.site._registry[models.RecoveryDecision]
    shown = page.evidence_taken(decision)  # type: ignore[attr-defined]
    assert shown == "evidence not recorded (decided before schema 6)"
    assert recorded_evidence({"evidence": "garbage"}, decision.decided_at) == shown


# -- 8. a recovery's failure id is no log key ------------------------------------------


def test_a_recovered_failure_says_recorded_by_the_decision(admin_client, demo):
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    decision = _recover(stale.pk)
    link = reverse("admin:oxide_batch_recoverydecision_change", args=[decision])
    case = _case(_execution(admin_client, stale.pk))
    failure = case.split("<dt>Failure</dt>", 1)[1].split("</dd>", 1)[0]
    assert f'recorded by <a href="{link}">decision #{decision}</a>' in failure
    assert "no log holds it" in failure
    assert "search your logs" not in failure
    step = models.StepExecution.objects.filter(recovery_decision_id=decision).order_by("id")[0]
    page = _page(admin_client, reverse("admin:oxide_batch_stepexecution_change", args=[step.pk]))
    assert f'recorded by <a href="{link}">decision #{decision}</a>' in page
    assert "search your logs" not in page


def test_a_failure_id_the_operator_gave_is_searched_in_the_logs(admin_client, demo):
    """MARK_FAILED with the operator's failure id (a key of their logs): the
    page searches it as any failure and names the decision that recorded it —
    it does not say that no log holds it."""
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    recover_as_proposed(
        _service(),
        stale.pk,
        actor=Actor("user:otto", None),
        operation_id="recover-given",
        failure_category=FailureCategory.TRANSIENT_INFRASTRUCTURE,
        failure_id=424242,
    )
    decision = models.RecoveryDecision.objects.get(job_execution_id=stale.pk).pk
    link = reverse("admin:oxide_batch_recoverydecision_change", args=[decision])
    case = _case(_execution(admin_client, stale.pk))
    failure = case.split("<dt>Failure</dt>", 1)[1].split("</dd>", 1)[0]
    assert "failure id <code>424242</code> — search your logs" in failure
    assert f'the operator gave when <a href="{link}">decision #{decision}</a>' in failure
    assert "no log holds it" not in failure
    step = models.StepExecution.objects.filter(recovery_decision_id=decision).order_by("id")[0]
    page = _page(admin_client, reverse("admin:oxide_batch_stepexecution_change", args=[step.pk]))
    assert "search your logs" in page
    assert "no log holds it" not in page


def test_a_runtime_failure_still_points_to_the_logs(admin_client, demo):
    _, failed = _failed("runtime_failure_job")
    case = _case(_execution(admin_client, failed.id))
    assert "search your logs" in case
    assert "recorded by" not in case


def test_an_abandon_by_recovery_keeps_the_failure_it_had_as_the_runtimes(admin_client, demo):
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    decision = _recover(unknown.pk, RecoveryDisposition.ABANDON)
    case = _case(_execution(admin_client, unknown.pk))
    link = reverse("admin:oxide_batch_recoverydecision_change", args=[decision])
    assert re.search(rf"execution ended .*?ABANDONED</span> by <a href=\"{link}\">", case)
    if "<dt>Failure</dt>" in case:  # the runtime's, kept: not the decision's
        assert "recorded by" not in case.split("<dt>Failure</dt>", 1)[1].split("</dd>", 1)[0]


# -- 9. the list fits, triage first ------------------------------------------------------


def test_the_list_has_seven_columns_status_and_stale_first(admin_client, demo):
    html = _page(admin_client, CHANGELIST)
    head = html.split("<thead>", 1)[1].split("</thead>", 1)[0]
    columns = re.findall(r'class="[^"]*column-([a-z_]+)', head)
    assert columns == [
        "id",
        "status_badge",
        "inactivity",
        "job",
        "run_parameters",
        "activity",
        "marks",
    ]
    job = _row(html, models.JobExecution.objects.order_by("-created_at", "-id")[0].pk)
    assert re.search(r"attempt \d+ · created <time [^>]*>[^<]* ago</time>", job)


def test_the_triage_links_come_before_the_results(admin_client, demo):
    html = _page(admin_client, CHANGELIST + "?status__exact=FAILED")
    triage = html.index('class="ob-triage"')
    assert triage < html.index('id="result_list"')
    links = html[triage:].split("</nav>", 1)[0]
    assert 'href="?status__exact=FAILED&amp;triage=failed24h"' in links
    assert 'href="?status__exact=FAILED&amp;triage=unresolved"' in links
    assert 'href="?status__exact=FAILED" aria-current="true"' in links


def test_a_requested_stop_shows_on_an_unresolved_row(admin_client, demo):
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    _service().stop(
        stale.pk,
        expected_version=stale.version,
        actor=Actor("user:otto", None),
        operation_id="stop-list",
    )
    row = _row(_page(admin_client, CHANGELIST + "?triage=unresolved"), stale.pk)
    assert "STOP REQUESTED" in row
    assert re.search(r"\d+ s ago</time>", row)


# -- 10. smaller ------------------------------------------------------------------------


def test_a_failed_run_shows_no_unknown_exit_code_and_no_counters(admin_client, demo):
    _, failed = _failed("exit_code_job")
    assert models.JobExecution.objects.get(pk=failed.id).exit_code == "UNKNOWN"
    html = _execution(admin_client, failed.id)
    assert "field-exit_code" not in html
    assert "field-counts" not in html
    assert "field-step_counts" in html
    done = models.JobExecution.objects.filter(status="COMPLETED", exit_code="COMPLETED")[0]
    assert "field-exit_code" not in _execution(admin_client, done.pk)  # the status repeated


def test_a_read_only_user_reads_one_sentence_naming_the_permission(viewer_client, demo):
    failed = models.JobExecution.objects.filter(status="FAILED")[0]
    html = _execution(viewer_client, failed.pk)
    assert (
        "Read-only: acting here needs the permission “Can abandon a stopped or failed "
        "execution” (abandon_execution)."
    ) in html
    assert "No action applies to this row now" not in html
    stale = models.JobExecution.objects.get(job_name="customer_sync")
    html = _execution(viewer_client, stale.pk)
    assert "needs the permission “Can recover an execution" in html
    assert "(recover_execution)." in html
    assert "You may look but not act" not in html
    assert "No action applies to this row now" not in html
    assert "/act/recover/" not in html
