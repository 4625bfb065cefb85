"""``examples/local_import.py`` end to end, in a process of its own on the test
database (PostgreSQL pass): a failure mid-chunk leaves none of that chunk's
rows, the restart resumes at the checkpoint, and every row is in the model's
table exactly once (contract §4.9)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.db import connection

from oxide_batch import models
from tests.client.test_examples import environment
from tests.live import ROOT

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROWS = 250  # examples/people.csv


@pytest.fixture
def people_table(transactional_db: None) -> Iterator[None]:
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS examples_person")


def local_import(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / "local_import.py"), *args],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def people() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_number FROM examples_person ORDER BY row_number")
        return [row[0] for row in cursor.fetchall()]


def test_the_local_import_writes_every_row_once_across_a_failure(
    people_table: None, importer: str
) -> None:
    failed = local_import("--user", importer, "--chunk-size", "50", "--fail-at", "130")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "row 130 is bad" in failed.stderr
    assert people() == list(range(100))  # rows 100-129 rolled back with their chunk
    step = models.StepExecution.objects.get()
    assert (step.status, step.written_count, step.committed_count) == ("FAILED", 100, 2)

    resumed = local_import("--user", importer, "--chunk-size", "50")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "starting at offset 100" in resumed.stdout
    assert people() == list(range(ROWS))
    final = models.StepExecution.objects.order_by("-id").first()
    assert final is not None
    assert (final.status, final.written_count) == ("COMPLETED", ROWS)

    again = local_import("--user", importer, "--chunk-size", "50")
    assert again.returncode == 4, again.stdout + again.stderr  # the instance COMPLETED
