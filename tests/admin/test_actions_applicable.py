"""Actions only where they apply (issue 14 point 5): which action a row offers
follows the services' rules — recover when the proposal is eligible, abandon
where the lifecycle lets an operator abandon, stop for a running execution
without a stop request, hold without a hold and release with one — and a row
that does not qualify says why in words."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from oxide_batch import models
from oxide_batch.admin import applicable
from oxide_batch.admin.applicable import (
    action_choices,
    action_choices_many,
    applicable_actions,
)
from oxide_batch.domain import BatchStatus
from oxide_batch.domain.evidence import RecoveryEvidence, propose_recovery
from oxide_batch.domain.lifecycle import LEGAL_TRANSITIONS
from oxide_batch.repository.clock import SystemClock

S = BatchStatus
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
STALE_AFTER = timedelta(minutes=15)


def proposal(status: BatchStatus, inactive: timedelta, *, owned: bool = False):
    evidence = RecoveryEvidence(
        job_execution_id=7,
        status=status,
        attempt=1,
        version=3,
        owner_recorded=owned,
        failure_category=None,
        last_activity_at=NOW - inactive,
        last_observed_at=None,
        stop_requested_at=None,
        newest_step_write_at=None,
        latest_step=None,
        completed_partition=False,
        committed_flow_decision=False,
    )
    return propose_recovery(evidence, now=NOW, stale_after=STALE_AFTER)


# status, inactive for, stop requested → the actions offered
TABLE = [
    (S.STARTING, timedelta(minutes=1), False, ["stop"]),
    (S.STARTED, timedelta(minutes=1), False, ["stop"]),
    (S.STARTED, timedelta(minutes=1), True, []),
    (S.STARTED, timedelta(hours=1), False, ["recover", "stop"]),
    (S.STARTED, timedelta(hours=1), True, ["recover"]),
    (S.STOPPING, timedelta(minutes=1), True, []),
    (S.STOPPING, timedelta(hours=1), True, ["recover"]),
    (S.UNKNOWN, timedelta(minutes=1), False, ["recover"]),
    (S.STOPPED, timedelta(hours=1), False, ["abandon"]),
    (S.FAILED, timedelta(hours=1), False, ["abandon"]),
    (S.COMPLETED, timedelta(hours=1), False, []),
    (S.ABANDONED, timedelta(hours=1), False, []),
]


@pytest.mark.parametrize(("status", "inactive", "stop", "offered"), TABLE)
def test_the_actions_a_row_offers_by_state(status, inactive, stop, offered):
    row = {
        "id": 7,
        "status": status.value,
        "stop_requested_at": NOW - timedelta(minutes=2) if stop else None,
        "stop_requested_by": "otto" if stop else None,
    }
    specs = applicable_actions(row, proposal=proposal(status, inactive))
    assert [spec.name for spec in specs] == offered
    for choice in action_choices(row, proposal=proposal(status, inactive)):
        # Every action not offered says why, in words, not as a bare code.
        assert choice.applies == (choice.spec.name in offered)
        if not choice.applies:
            assert choice.why_not is not None
            assert choice.why_not.startswith(("not eligible: ", "not applicable: "))
            assert "_" not in choice.why_not.split(":", 1)[1]


@pytest.mark.parametrize("status", list(S))
def test_abandon_is_offered_only_where_the_lifecycle_leads_to_abandoned(status):
    """The lifecycle table's sources of ABANDONED, except UNKNOWN, which a
    recovery (disposition ABANDON) abandons with its evidence recorded."""
    row = {"id": 7, "status": status.value}
    offered = "abandon" in [
        s.name for s in applicable_actions(row, proposal=proposal(status, timedelta(0)))
    ]
    assert offered == (S.ABANDONED in LEGAL_TRANSITIONS[status] and status is not S.UNKNOWN)


def test_reasons_are_sentences():
    row = {"id": 7, "status": "STARTED", "stop_requested_at": None}
    (recover, _, _) = action_choices(row, proposal=proposal(S.STARTED, timedelta(minutes=3)))
    assert recover.why_not == (
        "not eligible: the execution is still active (STARTED) — inactive for only 3m 00s of "
        "the 15m 00s threshold, no owner recorded: stale after 2026-01-01 12:12:00 UTC (in "
        "12m 00s); if its worker is gone, an operator may recover it now with the override "
        "(a note is required)"
    )
    # An owned one is decided by its owner's lease (60 s by default): when it expires.
    owned = proposal(S.STARTED, timedelta(seconds=15), owned=True)
    (recover, _, _) = action_choices(row, proposal=owned)
    assert recover.why_not == (
        "not eligible: the execution is still active (STARTED) — lease held until "
        "2026-01-01 12:00:45 UTC (in 45s), its owner last active 15s ago (lease 1m 00s); if "
        "its worker is gone, an operator may recover it now with the override (a note is "
        "required)"
    )
    (recover, abandon, stop) = action_choices({"id": 7, "status": "FAILED"})
    assert recover.why_not is not None
    assert "FAILED" in recover.why_not
    assert "recovery_not_allowed" not in recover.why_not
    assert stop.why_not == "not applicable: the execution has finished (FAILED)"
    assert abandon.applies


@pytest.mark.parametrize(("held", "offered"), [(False, ["hold"]), (True, ["release"])])
def test_an_instance_offers_hold_without_a_hold_and_release_with_one(held, offered):
    row = {
        "id": 3,
        "hold_placed_at": NOW if held else None,
        "hold_actor": "otto" if held else None,
        "hold_reason_code": "LEGAL_HOLD" if held else None,
    }
    assert [spec.name for spec in applicable_actions(row)] == offered


# -------------------------------------------------------------- on the pages


def _offered(html: str, pk: int) -> set[str]:
    return set(re.findall(rf"/act/(\w+)/\?ids={pk}\b", html))


def _execution_page(client, pk: int) -> str:
    page = client.get(reverse("admin:oxide_batch_jobexecution_change", args=[pk]))
    assert page.status_code == 200
    return str(page.content.decode())


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("job", "status", "offered"),
    [
        ("billing_export", "FAILED", {"abandon"}),
        ("billing_export", "COMPLETED", set()),
        ("report_build", "STOPPED", {"abandon"}),
        ("ledger_post", "UNKNOWN", {"recover"}),
        ("customer_sync", "STARTED", {"recover", "stop"}),  # crashed hours ago: stale
        ("cleanup", "ABANDONED", set()),
    ],
)
def test_an_execution_page_offers_only_the_actions_that_apply(
    operator_client, demo, job, status, offered
):
    execution = models.JobExecution.objects.filter(job_name=job, status=status).first()
    assert execution is not None
    html = _execution_page(operator_client, execution.pk)
    assert _offered(html, execution.pk) == offered
    if "recover" not in offered:
        assert "not eligible: the execution is" in html


@pytest.mark.django_db
def test_a_running_execution_says_why_it_cannot_be_recovered_yet(operator_client, demo):
    """Recover is not offered as an action; the case file leads to the override
    instead, named as such (the recover page asks for the note)."""
    live = models.JobExecution.objects.filter(job_name="nightly_import", status="STARTED").get()
    html = _execution_page(operator_client, live.pk)
    assert _offered(html, live.pk) == {"stop", "recover"}
    override = (
        f'/act/recover/?ids={live.pk}&amp;override=1">Recover #{live.pk} with an override…</a>'
    )
    assert override in html
    actions = html.split('class="ob-actions"', 1)[1]
    assert "/act/recover/" not in actions  # the actions field offers only the stop
    assert "not eligible: the execution is still active (STARTED) — inactive for only " in html
    assert "of the 15m 00s threshold, no owner recorded: stale after " in html
    assert "recover it now with the override (a note is required)" in html


@pytest.mark.django_db
def test_an_instance_page_offers_hold_or_release_by_its_hold(operator_client, demo):
    instance = models.JobInstance.objects.get(job_name="billing_export")
    url = reverse("admin:oxide_batch_jobinstance_change", args=[instance.pk])
    assert _offered(operator_client.get(url).content.decode(), instance.pk) == {"hold"}
    models.JobInstance.objects.filter(pk=instance.pk).update(
        hold_placed_at=NOW, hold_actor="otto", hold_reason_code="LEGAL_HOLD"
    )
    html = operator_client.get(url).content.decode()
    assert _offered(html, instance.pk) == {"release"}
    assert "not applicable: the instance is held already (by otto, LEGAL_HOLD)" in html


@pytest.mark.django_db
def test_choices_for_many_rows_read_their_proposals_together(demo, monkeypatch):
    # One instant for both readings: the texts say "last activity 15s ago".
    frozen = SystemClock().now()
    monkeypatch.setattr(SystemClock, "now", lambda self: frozen)
    monkeypatch.setattr(applicable.timezone, "now", lambda: frozen)
    rows = list(
        models.JobExecution.objects.values("id", "status", "stop_requested_at", "stop_requested_by")
    )
    with CaptureQueriesContext(connection) as captured:
        many = action_choices_many(rows)
    # One read of the evidence (the unit of work is a savepoint inside the test).
    statements = [q["sql"] for q in captured.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert len(statements) == 1
    for row in rows:
        assert [c.why_not for c in many[row["id"]]] == [c.why_not for c in action_choices(row)]


@pytest.mark.django_db
def test_the_dashboards_unresolved_views_are_rows_too(demo):
    """The dashboard lists ``ExecutionView`` values (selectors): the same
    helper tells which action each offers, in one read for all of them."""
    from django.utils import timezone

    from oxide_batch.selectors.unresolved import unresolved_executions

    views = unresolved_executions(now=timezone.now(), inactive_for=STALE_AFTER, limit=20)
    assert views
    many = action_choices_many(views)
    for view in views:
        offered = [c.spec.name for c in many[view.id] if c.applies]
        assert offered[0] == "recover"  # the dashboard's path to recovery applies
        assert ("stop" in offered) == (
            view.status in (S.STARTING, S.STARTED) and not view.stop_requested
        )
