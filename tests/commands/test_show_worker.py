"""``batch_show`` says who ran an execution and links its logs (decisions 310,
316): the text has an ``owner:`` and a ``logs:`` line, ``--json`` the
execution's ``worker`` and its failure's ``logs_url``."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import override_settings

from oxide_batch.domain import BatchStatus
from oxide_batch.domain.failures import rfc3339
from oxide_batch.domain.worker import WorkerIdentity
from tests.commands.test_operator_commands import run, system_repo  # noqa: F401 (a fixture)
from tests.helpers import key, move

pytestmark = pytest.mark.django_db
S = BatchStatus
WORKER = WorkerIdentity(host="worker 3", pid=4122, name="loader-2", client="oxide-batch 0.6.0")
TEMPLATE = "https://logs.example/?q={failure_id}&host={host}&from={started_at}&to={ended_at}"


@pytest.fixture
def failed(system_repo, clock):  # noqa: F811 (the fixture above)
    user = get_user_model().objects.create_user("nightly-runtime")
    with system_repo.begin(runtime_user_id=user.pk) as uow:
        launched = uow.launch_job_execution(key(), bytes(16), worker=WORKER).execution
        uow.commit()
    return move(system_repo, launched, S.FAILED, clock=clock)


def test_show_names_the_owner_and_links_the_logs(failed):
    with override_settings(OXIDE_BATCH_FAILURE_URL_TEMPLATE=TEMPLATE):
        shown = run("batch_show", str(failed.id))
        out = io.StringIO()
        call_command("batch_show", str(failed.id), stdout=out)
    assert shown["execution"]["worker"] == {
        "host": "worker 3",
        "pid": 4122,
        "name": "loader-2",
        "client": "oxide-batch 0.6.0",
        "user": "nightly-runtime",
    }
    started = rfc3339(failed.started_at).replace(":", "%3A")
    ended = rfc3339(failed.ended_at).replace(":", "%3A")
    url = f"https://logs.example/?q=99&host=worker%203&from={started}&to={ended}"
    assert shown["execution"]["failure"]["logs_url"] == url
    text = out.getvalue()
    assert (
        "owner: nightly-runtime on worker 3, pid 4122, oxide-batch 0.6.0 (worker loader-2)\n"
    ) in text
    assert "failure: USER_COMPONENT (failure id 99)\n" in text
    assert f"logs: {url}\n" in text


def test_show_without_a_template_or_an_identity_says_neither(system_repo, clock):  # noqa: F811
    with system_repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key()).instance
        execution = uow.create_job_execution(instance.id)
        uow.commit()
    execution = move(system_repo, execution, S.STARTED, S.FAILED, clock=clock)
    shown = run("batch_show", str(execution.id))
    assert shown["execution"]["worker"] is None
    assert shown["execution"]["failure"]["logs_url"] is None
    out = io.StringIO()
    call_command("batch_show", str(execution.id), stdout=out)
    assert "owner:" not in out.getvalue()
    assert "logs:" not in out.getvalue()
