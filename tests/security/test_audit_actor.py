"""The audited actor outlives the user: audit rows store the actor's name and
user id as plain values (no foreign key), so deleting the user deletes no audit
row and changes none, and the API's and the console's audit views still show it."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from oxide_batch import models
from oxide_batch.repository import FixedClock
from tests.api.support import Runtime

User = get_user_model()

pytestmark = pytest.mark.django_db

OPERATOR_NAME = "operator-user"  # tests.api.conftest.make_user's name for the role


def act(rt: Runtime, operator: Runtime, clock: FixedClock) -> dict[str, int]:
    """The operator recovers an execution, stops another and holds an instance."""
    silent = rt.started(run="silent")
    clock.advance(timedelta(minutes=16))
    proposal = operator.get(f"executions/{silent['id']}/recovery-proposal")
    operator.post(
        f"executions/{silent['id']}/recover",
        {
            "expected_version": proposal["version"],
            "disposition": "MARK_FAILED",
            "reason_code": "WORKER_LOST",
            "evidence_digest": proposal["evidence_digest"],
            "operation_id": "recover-1",
        },
        200,
    )
    running = rt.started(run="running")
    operator.post(
        f"executions/{running['id']}/stop",
        {"expected_version": running["version"], "operation_id": "stop-1"},
        200,
    )
    operator.put(
        f"instances/{running['job_instance_id']}/hold",
        {"reason_code": "LEGAL_HOLD", "operation_id": "hold-1"},
        200,
    )
    return {"recovered": silent["id"], "stopped": running["id"]}


def test_audit_rows_keep_the_actor_after_the_user_is_deleted(
    rt: Runtime,
    operator: Runtime,
    viewer: Runtime,
    fixed: FixedClock,
    admin_client: Client,
) -> None:
    acted = act(rt, operator, fixed)
    user = User.objects.get(username=OPERATOR_NAME)
    user_id = user.pk
    rows = {
        "operator": list(models.OperatorRequest.objects.order_by("pk").values()),
        "recovery": list(models.RecoveryDecision.objects.order_by("pk").values()),
        "retention": list(models.RetentionRecord.objects.order_by("pk").values()),
    }
    assert [(r["actor"], r["actor_user_id"]) for r in rows["operator"]] == [
        (OPERATOR_NAME, user_id)
    ] * 2
    assert [(r["operator_reference"], r["operator_user_id"]) for r in rows["recovery"]] == [
        (OPERATOR_NAME, user_id)
    ]
    assert [(r["actor"], r["actor_user_id"]) for r in rows["retention"]] == [
        (OPERATOR_NAME, user_id)
    ]

    user.delete()  # its token and group memberships go with it

    assert not User.objects.filter(pk=user_id).exists()
    assert list(models.OperatorRequest.objects.order_by("pk").values()) == rows["operator"]
    assert list(models.RecoveryDecision.objects.order_by("pk").values()) == rows["recovery"]
    assert list(models.RetentionRecord.objects.order_by("pk").values()) == rows["retention"]
    held = models.JobInstance.objects.get(hold_placed_at__isnull=False)
    assert (held.hold_actor, held.hold_user_id) == (OPERATOR_NAME, user_id)
    stopped = models.JobExecution.objects.get(pk=acted["stopped"])
    assert stopped.stop_requested_by == OPERATOR_NAME

    # The API's audit lists, read by a viewer.
    requests = viewer.get("audit/operator-requests")["results"]
    assert {(r["action"], r["actor"]) for r in requests} == {
        ("RECOVER", OPERATOR_NAME),
        ("STOP", OPERATOR_NAME),
    }
    decisions = viewer.get("audit/recovery-decisions")["results"]
    assert [d["actor"] for d in decisions] == [OPERATOR_NAME]
    records = viewer.get("audit/retention-records")["results"]
    assert [(r["action"], r["actor"]) for r in records] == [("HOLD", OPERATOR_NAME)]

    # The console's audit pages: lists and each row's page, with name and id.
    for name, model, id_label in [
        ("operatorrequest", models.OperatorRequest, "Actor user id"),
        ("recoverydecision", models.RecoveryDecision, "Operator user id"),
        ("retentionrecord", models.RetentionRecord, "Actor user id"),
    ]:
        listing = admin_client.get(reverse(f"admin:oxide_batch_{name}_changelist"))
        assert listing.status_code == 200, name
        assert OPERATOR_NAME in listing.content.decode(), name
        for pk in model.objects.values_list("pk", flat=True):
            page = admin_client.get(reverse(f"admin:oxide_batch_{name}_change", args=[pk]))
            assert page.status_code == 200, (name, pk)
            text = page.content.decode()
            assert OPERATOR_NAME in text, (name, pk)
            shown = rf'{id_label}:</label>\s*<div class="readonly">{user_id}</div>'
            assert re.search(shown, text), (name, pk)
    instance = admin_client.get(reverse("admin:oxide_batch_jobinstance_change", args=[held.pk]))
    assert instance.status_code == 200
    assert OPERATOR_NAME in instance.content.decode()
