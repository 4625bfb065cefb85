"""The local runtime in a host project (its own user model, the app's URLs under
``batch/``): the views are found under the host's prefix, the runtime user is
the host's, and a chunk's rows commit with it or not at all."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from oxide_batch import models
from oxide_batch.client import StepRun
from oxide_batch.local import LocalRuntime
from oxide_batch.roles import RUNTIME, ensure_roles
from tests.local.records import Record, table

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def records(transactional_db: None) -> Any:
    with table() as model:
        yield model


def test_the_local_runtime_runs_under_the_hosts_prefix_as_its_user(records: Any) -> None:
    ensure_roles()
    member = get_user_model().objects.create_user("host-importer")
    member.groups.add(Group.objects.get(name=RUNTIME))
    runtime = LocalRuntime(user="host-importer")

    def load(step: StepRun) -> None:
        Record.objects.bulk_create(Record(key=key) for key in range(3))
        step.commit(read=3, written=3, checkpoint={"offset": 3})
        Record.objects.bulk_create(Record(key=key) for key in range(3, 5))
        raise ValueError("bad record 5")

    with (
        pytest.raises(ValueError, match="bad record"),
        runtime.job_run("host_import", {}, poll_interval=3600) as run,
    ):
        run.run_step("load", load)
    assert sorted(Record.objects.values_list("key", flat=True)) == [0, 1, 2]
    execution = models.JobExecution.objects.get(pk=run.execution.id)
    assert (execution.status, execution.owner_user_id) == ("FAILED", member.pk)
    # Every page of a list is found under the host's prefix too.
    assert [found.id for found in runtime.executions(job_name="host_import")] == [execution.id]
