"""The console shows a lost write on the execution's page (issue 26 point 3):
the fact with its versions, and the marker in the recovery proposal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import F
from django.urls import reverse

from oxide_batch import models
from oxide_batch.demo.workload import Workload
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import VersionAhead
from oxide_batch.repository import DjangoJobRepository

pytestmark = pytest.mark.django_db


def test_a_marked_execution_shows_its_lost_write(admin_client):
    work = Workload(datetime.now(UTC) - timedelta(hours=1))
    execution = work.move(work.launch("nightly_import", business_date="d"), BatchStatus.STARTED)
    models.JobExecution.objects.filter(pk=execution.id).update(version=F("version") - 1)
    repo = DjangoJobRepository()
    with pytest.raises(VersionAhead), repo.begin() as uow:
        uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(BatchStatus.COMPLETED)
        )
    page = admin_client.get(reverse("admin:oxide_batch_jobexecution_change", args=[execution.id]))
    case = page.content.decode().split('class="ob-case"', 1)[1].split("</section>", 1)[0]
    assert "LOST WRITE" in case
    assert f"a write expected version {execution.version}, the stored row is at" in case
    assert "<strong>Lost write</strong>" in case  # the proposal's marker
    assert "<strong>Unknown commit</strong>" in case
