"""The examples end to end over HTTP against a live server (PostgreSQL pass):
the worker process is killed with SIGKILL mid-run, an operator recovers its
execution with the real commands (``batch_show``, ``batch_recover``) in their
own processes, the rerun resumes from the checkpoint, and the output holds
every record exactly once.

Waiting out the stale threshold (15 min by default, at least 1 min: contract §2.5.3)
would make the test slow, so the dead worker's recorded activity is moved 30
minutes into the past — what the database would hold had the operator come
back 30 minutes later."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db.models import F

from oxide_batch import models
from oxide_batch.client import RuntimeClient
from oxide_batch.domain.status import BatchStatus
from oxide_batch.roles import RUNTIME
from tests.live import ROOT, database_url, token_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROWS = 120
DEADLINE = 30.0


def environment() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DATABASE_URL": database_url(),
        "SECRET_KEY": settings.SECRET_KEY,
    }


def example(name: str, *args: str) -> list[str]:
    return [sys.executable, str(ROOT / "examples" / name), *args]


def operator_command(*args: str) -> dict[str, Any]:
    """A real operator command in its own process; its one JSON object."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args, "--json"],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def wait_for(predicate: Any, what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def settled(execution_id: int, quiet: float = 0.6) -> None:
    """Wait until nothing of the execution changes for ``quiet`` seconds: a
    request the killed process sent just before the SIGKILL may still be
    committed by the server (it does not know its client died)."""

    def fingerprint() -> tuple[Any, ...]:
        execution = models.JobExecution.objects.filter(pk=execution_id).values_list(
            "version", "last_activity_at"
        )
        steps = models.StepExecution.objects.filter(job_execution_id=execution_id).values_list(
            "id", "version", "updated_at"
        )
        return (tuple(execution), tuple(steps.order_by("id")))

    deadline = time.monotonic() + DEADLINE
    seen, since = fingerprint(), time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "the execution kept changing after the kill"
        time.sleep(0.1)
        now = fingerprint()
        if now != seen:
            seen, since = now, time.monotonic()


def backdate(execution_id: int, by: timedelta) -> None:
    """Move every instant of the execution and its steps ``by`` into the past,
    once the server has finished what the killed process had sent."""
    settled(execution_id)
    moved = {
        name: F(name) - by
        for name in ("created_at", "started_at", "updated_at", "last_observed_at")
    }
    models.JobExecution.objects.filter(pk=execution_id).update(
        **moved, last_activity_at=F("last_activity_at") - by
    )
    models.StepExecution.objects.filter(job_execution_id=execution_id).update(
        **{
            name: F(name) - by
            for name in ("created_at", "started_at", "updated_at", "last_activity_at")
        }
    )


def write_people(tmp_path: Path, rows: int = ROWS) -> tuple[Path, Path]:
    """``people.csv`` with ``rows`` people in Oslo, and where the job writes them."""
    source, output = tmp_path / "people.csv", tmp_path / "people.sqlite3"
    with source.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "city"])
        writer.writerows([f"person-{n:04d}", "Oslo"] for n in range(rows))
    return source, output


def recover_with_the_commands(execution_id: int) -> dict[str, Any]:
    shown = operator_command("batch_show", str(execution_id))
    assert shown["proposal"]["eligible"], shown["proposal"]
    recovered = operator_command(
        "batch_recover",
        str(execution_id),
        "--expected-version",
        str(shown["execution"]["version"]),
        "--disposition",
        "MARK_FAILED",
        "--reason",
        "WORKER_LOST",
        "--evidence-digest",
        shown["proposal"]["evidence_digest"],
        "--actor",
        "olga.ops",
        "--operation-id",
        f"recover-{execution_id}",
        "--yes",
    )
    assert recovered["execution"]["status"] == "FAILED", recovered
    return recovered


def kill_after_checkpoint(process: subprocess.Popen[str], job_name: str, offset: int) -> int:
    """SIGKILL ``process`` once its step has committed past ``offset``; the
    execution it was running."""

    def committed() -> int | None:
        step = (
            models.StepExecution.objects.filter(
                job_execution__job_name=job_name, read_count__gte=offset
            )
            .order_by("-id")
            .first()
        )
        return None if step is None else step.job_execution_id

    execution_id: int = wait_for(committed, f"a checkpoint past offset {offset}")
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    assert process.returncode == -signal.SIGKILL
    return execution_id


def test_the_csv_import_survives_a_sigkill_a_recovery_and_resumes_exactly_once(
    live_server: Any, tmp_path: Path
) -> None:
    source, output = write_people(tmp_path)
    token = token_for("importer", RUNTIME)
    command = example(
        "csv_import.py",
        *("--url", live_server.url, "--token", token),
        *("--input", str(source), "--output", str(output), "--chunk-size", "10"),
    )
    first = subprocess.Popen([*command, "--pause", "0.2"], cwd=ROOT, env=environment(), text=True)
    killed = kill_after_checkpoint(first, "csv_import", 30)
    client = RuntimeClient(live_server.url, token)
    assert client.execution(killed).status is BatchStatus.STARTED  # nobody ended it

    backdate(killed, timedelta(minutes=30))
    recover_with_the_commands(killed)

    rerun = subprocess.run(
        command, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=60
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    resumed_at = int(rerun.stdout.split("starting at offset ")[1].split()[0])
    assert resumed_at >= 30  # from the checkpoint, not from the start
    latest = next(client.executions(job_name="csv_import"))
    assert (latest.attempt, latest.status) == (2, BatchStatus.COMPLETED)

    with sqlite3.connect(output) as database:
        numbers = [row[0] for row in database.execute("SELECT row_number FROM people")]
    assert sorted(numbers) == list(range(ROWS))  # every record, exactly once


def test_the_partitioned_import_reruns_only_what_did_not_complete_after_a_sigkill(
    live_server: Any, tmp_path: Path
) -> None:
    source, output = tmp_path / "people.csv", tmp_path / "people.sqlite3"
    towns = ("Graz", "Lyon", "Oslo")
    with source.open("w", newline="", encoding="utf-8") as handle:
        rows = csv.writer(handle)
        rows.writerow(["name", "city"])
        rows.writerows([f"person-{n:04d}", towns[n % 3]] for n in range(ROWS))
    token = token_for("splitter", RUNTIME)
    command = example(
        "partitioned_import.py",
        *("--url", live_server.url, "--token", token, "--workers", "1"),
        *("--input", str(source), "--output", str(output), "--chunk-size", "5"),
    )
    first = subprocess.Popen([*command, "--pause", "0.1"], cwd=ROOT, env=environment())

    def second_partition_under_way() -> int | None:
        worker = models.StepExecution.objects.filter(step_name="load:2", read_count__gte=10)
        done = models.StepPartition.objects.filter(ordinal=1, status="COMPLETED")
        found = worker.first()
        return found.job_execution_id if found is not None and done.exists() else None

    killed: int = wait_for(second_partition_under_way, "partition 2 under way")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    backdate(killed, timedelta(minutes=30))
    recover_with_the_commands(killed)

    rerun = subprocess.run(
        [*command, "--processes"],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    client = RuntimeClient(live_server.url, token)
    latest = next(client.executions(job_name="partitioned_import"))
    assert (latest.attempt, latest.status) == (2, BatchStatus.COMPLETED)
    steps = dict(
        models.StepExecution.objects.filter(job_execution_id=latest.id).values_list(
            "step_name", "status"
        )
    )
    # The COMPLETED partition was carried, not rerun; the others ran again.
    assert steps == {"load": "COMPLETED", "load:2": "COMPLETED", "load:3": "COMPLETED"}
    parent = models.StepExecution.objects.get(job_execution_id=latest.id, step_name="load")
    assert parent.read_count == ROWS  # aggregated: every partition's rows once
    with sqlite3.connect(output) as database:
        numbers = [row[0] for row in database.execute("SELECT row_number FROM people")]
    assert sorted(numbers) == list(range(ROWS))
