"""examples/skipping_import.py end to end, in its own process over HTTP
against a live server (PostgreSQL pass, as test_examples.py): a flaky output
is retried, bad rows are skipped and listed from the ledger, one over the limit
fails the run, and the replay recipe reprocesses an execution's skipped rows
once the file is fixed."""

from __future__ import annotations

import csv
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.client import RuntimeClient
from oxide_batch.domain.status import BatchStatus
from oxide_batch.roles import RUNTIME
from tests.client.test_examples import environment, example
from tests.live import ROOT, token_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROWS = 30
BROKEN = {4: ["", "Oslo"], 11: ["person-0011"], 23: ["", "Graz"]}  # no name, torn, no name
FILTERED = 17  # a row whose city is "-"


def write_people(path: Path, broken: dict[int, list[str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "city"])
        for n in range(ROWS):
            row = [f"person-{n:04d}", "-" if n == FILTERED else "Oslo"]
            writer.writerow(broken.get(n, row))


def stored(output: Path) -> list[int]:
    with sqlite3.connect(output) as database:
        return sorted(row[0] for row in database.execute("SELECT row_number FROM people"))


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        example("skipping_import.py", *args),
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_skipping_import_retries_skips_lists_and_replays_its_bad_rows(
    live_server: Any, tmp_path: Path
) -> None:
    source, output = tmp_path / "people.csv", tmp_path / "people.sqlite3"
    write_people(source, BROKEN)
    token = token_for("skipper", RUNTIME)
    server = ("--url", live_server.url, "--token", token)
    files = ("--input", str(source), "--output", str(output), "--chunk-size", "5")

    done = run_example(*server, *files, "--skip-limit", "3", "--flaky-every", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert stored(output) == [n for n in range(ROWS) if n not in (*BROKEN, FILTERED)]
    assert "skipped row-4 (process): row 4 has no name" in done.stdout
    assert "skipped row-11 (read): row 11 has 1 fields" in done.stdout
    assert "skipped row-23 (process): row 23 has no name" in done.stdout
    assert "step load: COMPLETED_WITH_SKIPS, read 29, written 26, filtered 1, skipped 3" in (
        done.stdout
    )
    client = RuntimeClient(live_server.url, token)
    first = next(client.executions(job_name="skipping_import"))
    step = models.StepExecution.objects.get(job_execution_id=first.id)
    assert step.rolled_back_count >= 3  # the flaky writes were retried (and the skips rolled back)

    # The rows fixed, the replay recipe reprocesses exactly the skipped ones.
    write_people(source, {})
    replay = run_example(*server, *files, "--replay", str(first.id))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "step load: COMPLETED, read 3, written 3, filtered 0, skipped 0" in replay.stdout
    assert stored(output) == [n for n in range(ROWS) if n != FILTERED]


def test_one_bad_row_over_the_limit_fails_the_run(live_server: Any, tmp_path: Path) -> None:
    source, output = tmp_path / "people.csv", tmp_path / "people.sqlite3"
    write_people(source, BROKEN)
    token = token_for("strict", RUNTIME)
    done = run_example(
        *("--url", live_server.url, "--token", token),
        *("--input", str(source), "--output", str(output), "--chunk-size", "5"),
        *("--skip-limit", "2"),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    latest = next(RuntimeClient(live_server.url, token).executions(job_name="skipping_import"))
    assert latest.status is BatchStatus.FAILED
    assert latest.failure is not None
    assert latest.failure.category.value == "USER_COMPONENT"
    assert "skip limit 2 exceeded" in done.stderr
