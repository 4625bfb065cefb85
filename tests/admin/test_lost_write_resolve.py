"""A lost write waits for a person, in the console (issue 38 point 5, contract
§2.5.14): the executions' list marks an unresolved marker; the case file of a
FAILED execution carrying one offers the resolution to who may recover (not to
a viewer); its POST records the audited resolution once, however often sent."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.repository import DjangoJobRepository
from tests.commands.test_lost_write_command import lose_a_write
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus


@pytest.fixture
def marked_failed(clock):
    repo = DjangoJobRepository(clock)
    started = move(repo, launch(repo, key(run="console")), S.STARTED, clock=clock)
    return move(repo, lose_a_write(repo, started), S.FAILED, clock=clock)


def case_file(client, pk: int) -> str:
    page = client.get(reverse("admin:oxide_batch_jobexecution_change", args=[pk]))
    assert page.status_code == 200
    text: str = page.content.decode()
    return text.split('class="ob-case"', 1)[1].split("</section>", 1)[0]


def test_the_list_marks_an_unresolved_lost_write(marked_failed, viewer_client) -> None:
    page = viewer_client.get(reverse("admin:oxide_batch_jobexecution_changelist"))
    row = page.content.decode().split(f"/jobexecution/{marked_failed.id}/change/", 1)[1]
    assert "LOST WRITE" in row.split("</tr>", 1)[0]


def test_an_operator_resolves_it_from_the_case_file_once(marked_failed, operator_client):
    case = case_file(operator_client, marked_failed.id)
    assert "LOST WRITE" in case
    assert "no launch or restart of its instance runs" in case
    operation_id = re.search(r'name="operation_id" value="([^"]+)"', case).group(1)
    url = reverse("admin:oxide_batch_jobexecution_resolve_lost_write", args=[marked_failed.id])
    form = {"reason_code": "TARGET_CHECKED", "note": "ledger re-read", "operation_id": operation_id}
    for _ in range(2):  # a double submit records one resolution
        answer = operator_client.post(url, form)
        assert answer.status_code == 302
    (record,) = models.OperatorRequest.objects.filter(action="RESOLVE_LOST_WRITE")
    assert (record.operation_id, record.actor, record.changed) == (operation_id, "otto", True)
    resolution = models.JobExecution.objects.get(pk=marked_failed.id).lost_write_resolution
    assert resolution["note"] == "ledger re-read"
    after = case_file(operator_client, marked_failed.id)
    assert "Resolved" in after
    assert "ledger re-read" in after
    assert 'name="operation_id"' not in after  # nothing left to resolve
    listed = operator_client.get(reverse("admin:oxide_batch_jobexecution_changelist"))
    row = listed.content.decode().split(f"/jobexecution/{marked_failed.id}/change/", 1)[1]
    assert "LOST WRITE" not in row.split("</tr>", 1)[0]


def test_a_viewer_gets_no_form_and_may_not_post(marked_failed, viewer_client) -> None:
    assert 'name="operation_id"' not in case_file(viewer_client, marked_failed.id)
    url = reverse("admin:oxide_batch_jobexecution_resolve_lost_write", args=[marked_failed.id])
    answer = viewer_client.post(url, {"reason_code": "X", "note": "n", "operation_id": "o-1"})
    assert answer.status_code == 403
    assert not models.OperatorRequest.objects.exists()


def test_a_bad_note_is_a_message_not_a_500(marked_failed, operator_client) -> None:
    url = reverse("admin:oxide_batch_jobexecution_resolve_lost_write", args=[marked_failed.id])
    form = {"reason_code": "TARGET_CHECKED", "note": " padded", "operation_id": "o-2"}
    answer = operator_client.post(url, form, follow=True)
    assert answer.status_code == 200
    assert "Not resolved" in answer.content.decode()
    assert models.JobExecution.objects.get(pk=marked_failed.id).lost_write_resolution is None
