"""A failure's detail end to end, with real processes (issue 40, accepted when):
a job in its own Python process, its host set to ``worker-3``, raises
``ValueError("bad row 17: password=hunter2")`` against a gunicorn server;
``GET executions/{id}`` shows an operator the type ``ValueError``, the
message with the password scrubbed and the traceback (with ``traceback``
kept), a viewer the type alone; the console's case file says the same to
each, with who ran it (the host, the job process's pid, the client's
version) and "Open the logs" built from the template; with ``off`` nothing
is stored;
after ``purge_batch_metadata`` (its own process) no detail row remains.
PostgreSQL pass (the server and the commands share the test database)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db.models import F
from django.test import Client, override_settings
from django.urls import reverse

from oxide_batch import models
from oxide_batch.roles import OPERATOR, RUNTIME, VIEWER
from tests.live import ROOT, database_url, gunicorn, token_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

LOGS = "https://logs.example.com/explore?execution={execution_id}&host={host}&failure={failure_id}"

JOB = """
import os
import sys
from oxide_batch.client import RuntimeClient

client = RuntimeClient(sys.argv[1], sys.argv[2], timeout=10, worker_host="worker-3")
with client.job_run("detail_e2e", {"business_date": sys.argv[3]}) as run:
    print(run.execution.id, os.getpid(), flush=True)
    with run.step("load") as step:
        step.commit(read=16, written=16, checkpoint={"row": 16})
        raise ValueError("bad row 17: password=hunter2")
"""


def environment() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DATABASE_URL": database_url(),
        "SECRET_KEY": settings.SECRET_KEY,
    }


def run_job(url: str, token: str, run: str) -> tuple[int, int]:
    """The job in its own process: it fails, so it exits 1; its execution id
    and its process id."""
    done = subprocess.run(
        [sys.executable, "-c", JOB, url, token, run],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ValueError: bad row 17" in done.stderr  # the client's own log line stays
    execution_id, pid = done.stdout.split()[:2]
    return int(execution_id), int(pid)


def get(url: str, token: str) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Token {token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def console_client(username: str, group: str) -> Client:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user = get_user_model().objects.create_user(username, password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return client


def case_file(client: Client, execution_id: int) -> str:
    url = reverse("admin:oxide_batch_jobexecution_change", args=[execution_id])
    response = client.get(url)
    assert response.status_code == 200
    return str(response.content.decode()).split('<section class="ob-case"', 1)[1]


def test_a_failing_job_s_detail_is_scrubbed_shown_by_role_and_purged() -> None:
    runtime = token_for("e2e-runtime", RUNTIME)
    operator = token_for("e2e-operator", OPERATOR)
    viewer = token_for("e2e-viewer", VIEWER)
    logs = {"OXIDE_BATCH_FAILURE_URL_TEMPLATE": LOGS}
    with gunicorn(
        workers=1, threads=2, environment={"OXIDE_BATCH_FAILURE_DETAIL": "traceback", **logs}
    ) as url:
        kept, pid = run_job(url, runtime, "2026-07-29")
        answer = get(f"{url}/api/v1/executions/{kept}", operator)
        seen = get(f"{url}/api/v1/executions/{kept}", viewer)["failure"]
    shown = answer["failure"]
    detail = shown["detail"]
    # Who ran it: the host the job set, its own process, the client's version.
    worker = answer["worker"]
    assert (worker["host"], worker["pid"], worker["user"]) == ("worker-3", pid, "e2e-runtime")
    assert worker["client"].startswith("oxide-batch ")
    assert shown["logs_url"] == (
        f"https://logs.example.com/explore?execution={kept}&host=worker-3"
        f"&failure={shown['failure_id']}"
    )
    assert shown["category"] == "USER_COMPONENT"
    assert detail["type"] == "ValueError"
    assert detail["message"] == "bad row 17: password=[redacted]"
    assert "Traceback (most recent call last)" in detail["traceback"]
    assert "ValueError: bad row 17: password=[redacted]" in detail["traceback"]
    assert "hunter2" not in json.dumps(shown)
    assert seen["detail"] == {"type": "ValueError"}
    stored = models.FailureDetail.objects.filter(job_execution_id=kept)
    assert stored.count() == 2  # the step's failure and the job's
    assert not any("hunter2" in (row.message or "") + (row.traceback or "") for row in stored)

    with override_settings(OXIDE_BATCH_FAILURE_URL_TEMPLATE=LOGS):
        operator_page = case_file(console_client("olga", OPERATOR), kept)
    assert "<code>ValueError</code>" in operator_page
    assert "worker-3" in operator_page
    assert f"pid <strong>{pid}</strong>" in operator_page
    assert worker["client"] in operator_page
    assert (
        f'href="https://logs.example.com/explore?execution={kept}&amp;host=worker-3&amp;'
        in operator_page
    )
    assert "Open the logs" in operator_page
    assert "bad row 17: password=[redacted]" in operator_page
    assert '<details class="ob-traceback">' in operator_page
    viewer_page = case_file(console_client("vera", VIEWER), kept)
    assert "<code>ValueError</code>" in viewer_page
    assert "bad row 17" not in viewer_page
    assert "hunter2" not in operator_page + viewer_page

    with gunicorn(workers=1, threads=2, environment={"OXIDE_BATCH_FAILURE_DETAIL": "off"}) as url:
        off, _ = run_job(url, runtime, "2026-07-30")
        assert get(f"{url}/api/v1/executions/{off}", operator)["failure"]["detail"] is None
    assert not models.FailureDetail.objects.filter(job_execution_id=off).exists()
    assert models.JobExecution.objects.get(pk=off).status == "FAILED"

    # Purge: as if every execution had ended two days ago, the real command in its own process.
    two_days = timedelta(days=2)
    models.JobExecution.objects.update(
        created_at=F("created_at") - two_days,
        started_at=F("started_at") - two_days,
        ended_at=F("ended_at") - two_days,
    )
    done = subprocess.run(
        [
            *(sys.executable, str(ROOT / "manage.py"), "purge_batch_metadata"),
            *("--older-than", "1d", "--operation-id", "e2e-purge", "--yes", "--json"),
        ],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not models.JobExecution.objects.filter(pk__in=[kept, off]).exists()
    assert not models.FailureDetail.objects.exists()
