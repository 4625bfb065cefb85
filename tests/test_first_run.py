"""A quiet, clear first run (issue 15 point 4): the demo's event lines go to a
file, ``migrate`` does not warn that the schema needs ``migrate``, and the
runtime token the examples read works (issue 16: a new one each run).

``scripts/run`` itself installs the project, so it is not run here; these are
its pieces (the address helper, the demo's ``--events-log``, ``migrate``, the
``batch_token`` line that writes ``var/runtime-token``)."""

from __future__ import annotations

import io
import json
import logging
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from oxide_batch import checks as schema_checks
from oxide_batch import models
from oxide_batch.observability.events import EVENT_LOGGER

ROOT = Path(__file__).resolve().parents[1]


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.django_db(transaction=True)  # events are emitted after commit
def test_the_demo_writes_its_event_lines_to_the_file_it_is_given(tmp_path):
    console = Collect()
    logger = logging.getLogger(EVENT_LOGGER)
    logger.addHandler(console)
    try:
        out = io.StringIO()
        log = tmp_path / "var" / "demo-events.log"
        call_command("demo_workload", "--events-log", str(log), stdout=out)
        assert console.records == []  # nothing on the console's handlers
        lines = log.read_text().splitlines()
        assert len(lines) > 20
        assert {json.loads(line)["event"] for line in lines} >= {"execution.launched"}
        assert f"events in {log}" in out.getvalue()
        assert models.JobExecution.objects.exists()
        # The configured handlers are back afterwards.
        logger.info("after", extra={"oxide_event": {}})
        assert [r.getMessage() for r in console.records] == ["after"]
    finally:
        logger.removeHandler(console)


@pytest.mark.django_db
def test_migrate_does_not_tell_the_user_to_run_migrate(monkeypatch):
    monkeypatch.setattr(schema_checks, "read_schema_version", lambda: None)
    # Elsewhere the check still says it.
    assert [m.id for m in schema_checks.schema_version_check()] == ["oxide_batch.W001"]
    out, err = io.StringIO(), io.StringIO()
    # call_command skips the checks unless asked; manage.py migrate runs them.
    call_command("migrate", "--noinput", verbosity=0, skip_checks=False, stdout=out, stderr=err)
    assert "W001" not in out.getvalue() + err.getvalue()
    assert "run manage.py migrate" not in out.getvalue() + err.getvalue()
    monkeypatch.setattr(schema_checks, "read_schema_version", lambda: 10**6)
    with pytest.raises(Exception, match="E001"):  # a newer schema still stops it
        call_command("migrate", "--noinput", verbosity=0, skip_checks=False, stdout=out, stderr=err)


def test_the_address_helper_waits_for_the_server_scripts_run_starts():
    helper = [sys.executable, str(ROOT / "scripts" / "wait-for-address")]
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        for address in (f"127.0.0.1:{port}", f"0.0.0.0:{port}", str(port)):
            assert subprocess.run([*helper, address], timeout=10, check=False).returncode == 0


def _runtime_token_step() -> list[str]:
    """The ``manage.py`` arguments of scripts/run's ``> var/runtime-token`` line."""
    script = (ROOT / "scripts" / "run").read_text().replace("\\\n", " ")
    match = re.search(r"manage\.py (batch_token [^>]*)> var/runtime-token", script)
    assert match is not None
    return shlex.split(match[1])


@pytest.mark.django_db
def test_each_run_writes_a_working_runtime_token_and_revokes_the_last():
    def run_step() -> str:
        out, err = io.StringIO(), io.StringIO()
        call_command(*_runtime_token_step(), stdout=out, stderr=err)
        assert err.getvalue() == ""  # scripts/run's terminal stays quiet
        (token,) = out.getvalue().splitlines()
        return token

    def status(token: str) -> int:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        return client.get("/api/v1/executions").status_code

    first = run_step()
    assert status(first) == 200  # a batch-runtime user reads executions
    second = run_step()
    assert (status(first), status(second)) == (401, 200)


@pytest.mark.django_db
def test_the_demo_makes_the_parameter_the_search_hint_names_visible(admin_client, settings):
    """Issue 25: the console's search hint suggests ``business_date=…``; the demo
    served by scripts/run shows and searches that parameter (its default of
    ``OXIDE_BATCH_VISIBLE_PARAMETERS``), so following the hint finds its runs."""
    script = (ROOT / "scripts" / "run").read_text()
    [default] = re.findall(
        r"OXIDE_BATCH_VISIBLE_PARAMETERS=\$\{OXIDE_BATCH_VISIBLE_PARAMETERS-(\w+)\}", script
    )
    settings.OXIDE_BATCH_VISIBLE_PARAMETERS = default
    call_command("demo_workload", stdout=io.StringIO())
    day = models.JobInstance.objects.order_by("-id").values_list(
        "identifying_parameters", flat=True
    )[0]
    value = next(p["value"] for p in day if p["name"] == default)
    page = admin_client.get("/admin/oxide_batch/jobinstance/", {"q": f"{default}={value}"})
    assert page.status_code == 200
    assert f"{default}={value}" in page.content.decode()
    assert "business_date=" in page.content.decode()  # the hint's own example
    assert page.context["cl"].result_count >= 1
