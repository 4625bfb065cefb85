"""Lists built for triage (issue 14 point 4): last activity and inactivity
columns, the "unresolved" and "failed in the last 24 h" filters, counts that
count each record once, and search by a visible parameter's exact value."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Sum
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from oxide_batch import models
from oxide_batch.conf import batch_settings
from oxide_batch.demo.workload import Workload
from oxide_batch.domain import BatchStatus
from oxide_batch.selectors.unresolved import needs_attention_queryset
from tests.admin.conftest import business_day

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:oxide_batch_jobexecution_changelist"


def _listed(html: str) -> set[int]:
    """The execution ids of a changelist page (the row checkboxes)."""
    return {int(v) for v in re.findall(r'name="_selected_action" value="(\d+)"', html)}


def _get(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    html: str = response.content.decode()
    return html


def test_the_list_has_last_activity_and_inactivity_columns(admin_client, demo):
    html = _get(admin_client, reverse(CHANGELIST))
    assert 'column-activity"' in html
    assert 'column-inactivity"' in html
    # The stale STARTED execution of the demo (customer_sync, silent for hours).
    assert re.search(
        r'title="inactive \d+ h( \d\d min)?, over the 15 min threshold: eligible for '
        r'recovery">stale \d+ h( \d\d min)?</span>',
        html,
    )
    assert "outcome unknown" in html  # the UNKNOWN one
    # The job-level counters (only a terminal rollback moves them) are not a column.
    assert 'column-counts"' not in html


def test_the_unresolved_filter_lists_exactly_the_unresolved_executions(admin_client, demo):
    """UNKNOWN, a claimed execution whose owner's lease expired (contract §2.5.3), an
    unclaimed one silent longer than the stale threshold; not a claimed one
    within its lease, nor an unclaimed one silent less than the threshold."""
    fresh = Workload(datetime.now(UTC) - timedelta(seconds=30))
    running = fresh.move(fresh.launch("fresh_job", n=1), BatchStatus.STARTED)
    held = claimed(fresh, "held_job")
    lapsed = claimed(Workload(datetime.now(UTC) - timedelta(minutes=2)), "lapsed_job")
    html = _get(admin_client, reverse(CHANGELIST) + "?triage=unresolved")
    expected = set(
        needs_attention_queryset(
            now=timezone.now(),
            stale_after=batch_settings.RECOVERY_STALE_AFTER,
            lease_ttl=batch_settings.LEASE_TTL,
        ).values_list("pk", flat=True)
    )
    statuses = set(
        models.JobExecution.objects.filter(pk__in=expected).values_list("status", flat=True)
    )
    assert {"UNKNOWN", "STARTED"} <= statuses  # the demo has both kinds
    assert _listed(html) == expected
    assert lapsed.id in _listed(html)  # two minutes silent: its 60 s lease expired
    assert running.id not in _listed(html)  # unclaimed, within the threshold
    assert held.id not in _listed(html)  # claimed, within its lease
    assert "unresolved (UNKNOWN, a lease expired, or unclaimed and inactive &gt; 15 min)" in html


def claimed(work: Workload, job: str):  # type: ignore[no-untyped-def]
    """A STARTED execution its runtime claimed at the workload's clock."""
    execution = work.launch(job, n=1)
    with work.repo.begin() as uow:
        uow.claim_execution_owner(execution.id, execution.version, b"\x0c" * 16)
        uow.commit()
    return work.move(execution, BatchStatus.STARTED)


def test_the_failed_filter_keeps_the_last_24_hours(admin_client, demo):
    failed = list(models.JobExecution.objects.filter(status="FAILED").order_by("pk"))
    assert len(failed) >= 2
    old, recent = failed[0], failed[1]
    now = timezone.now()
    models.JobExecution.objects.filter(pk=old.pk).update(
        created_at=now - timedelta(days=3),
        started_at=now - timedelta(days=3),
        ended_at=now - timedelta(days=2),
        failed_at=now - timedelta(days=2),
    )
    models.JobExecution.objects.filter(pk=recent.pk).update(
        ended_at=now - timedelta(hours=3), failed_at=now - timedelta(hours=3)
    )
    listed = _listed(_get(admin_client, reverse(CHANGELIST) + "?triage=failed24h"))
    assert recent.pk in listed
    assert old.pk not in listed
    assert all(
        failed is not None
        for failed in models.JobExecution.objects.filter(pk__in=listed).values_list(
            "failed_at", flat=True
        )
    )


def test_a_partitioned_execution_counts_each_record_once(admin_client, demo):
    parent_ids = set(models.StepPartition.objects.values_list("step_execution_id", flat=True))
    worker_ids = set(
        models.StepPartition.objects.exclude(worker_step_execution_id=None).values_list(
            "worker_step_execution_id", flat=True
        )
    )
    parent = models.StepExecution.objects.filter(pk__in=parent_ids, status="COMPLETED").first()
    assert parent is not None, "the demo has an aggregated partitioned step"
    steps = models.StepExecution.objects.filter(job_execution_id=parent.job_execution_id)
    naive = steps.aggregate(n=Sum("read_count"))["n"]
    once = steps.exclude(pk__in=worker_ids).aggregate(n=Sum("read_count"))["n"]
    assert naive > once > 0  # the workers' records are also in the manager step
    html = _get(
        admin_client,
        reverse("admin:oxide_batch_jobexecution_change", args=[parent.job_execution_id]),
    )
    field = html.split("ecords (the steps&#x27; totals)", 1)[1][:600]
    assert f"read {once:,}" in field
    assert f"read {naive:,}" not in field


@override_settings(OXIDE_BATCH_VISIBLE_PARAMETERS=frozenset({"business_date"}))
def test_search_by_a_visible_parameter_value(admin_client, demo):
    day = business_day(demo, 1)  # yesterday's nightly run, as the demo dated it
    instance = models.JobInstance.objects.get(
        identifying_parameters__0__value=day, job_name="nightly_import"
    )
    wanted = set(
        models.JobExecution.objects.filter(job_instance_id=instance.pk).values_list("pk", flat=True)
    )
    html = _get(admin_client, reverse(CHANGELIST) + f"?q=business_date%3D{day}")
    assert _listed(html) == wanted
    html = _get(admin_client, reverse(CHANGELIST) + f"?q=business_date+%3D+{day}")
    assert _listed(html) == wanted  # spaces around "=" do not matter
    html = _get(admin_client, reverse(CHANGELIST) + "?q=business_date%3D1999-01-01")
    assert _listed(html) == set()
    instances = _get(
        admin_client,
        reverse("admin:oxide_batch_jobinstance_changelist") + f"?q=business_date%3D{day}",
    )
    assert _listed(instances) == {instance.pk}


@override_settings(OXIDE_BATCH_VISIBLE_PARAMETERS=frozenset({"business_date"}))
def test_a_hidden_parameter_cannot_be_probed_by_search(admin_client, demo):
    """``batch`` is not visible: the right value and a wrong one answer alike
    (no rows, the same note), so a search cannot reveal a value by trial."""
    answers = []
    for value in ("42", "43"):
        html = _get(admin_client, reverse(CHANGELIST) + f"?q=batch%3D{value}")
        assert _listed(html) == set()
        assert "&#x27;batch&#x27; is not a visible parameter" in html
        answers.append(html.replace(value, "N"))
    strip = re.compile(r'name="csrfmiddlewaretoken" value="[^"]+"')
    assert strip.sub("", answers[0]) == strip.sub("", answers[1])


def test_a_job_name_with_an_equals_sign_is_still_searched_by_name(admin_client, demo):
    work = Workload(datetime.now(UTC) - timedelta(hours=1))
    done = work.complete("pay=roll", ["only"], n=1)
    html = _get(admin_client, reverse(CHANGELIST) + "?q=pay%3Droll")
    assert _listed(html) == {done.id}


@pytest.mark.parametrize(
    "query",
    [
        "?q=%C2%B2",  # "²".isdigit() is true; int("²") fails
        "?q=99999999999999999999999",
        "?instance=%C2%B2",
        "?instance=99999999999999999999999",
        "?triage=nonsense",
    ],
)
def test_odd_ids_in_the_list_are_no_500(admin_client, demo, query):
    assert admin_client.get(reverse(CHANGELIST) + query).status_code == 200
    if "triage" not in query:  # (the step list has no such filter: Django's ?e=1)
        steps = reverse("admin:oxide_batch_stepexecution_changelist")
        assert admin_client.get(steps + query.replace("instance", "execution")).status_code == 200
