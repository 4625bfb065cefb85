"""Exactly-once output in the same database, shown with real processes (issue 42,
"Accepted when"; PostgreSQL pass): the job of :mod:`tests.local.import_job`
writes each record as a row of a table with no unique constraint, is SIGKILLed
at 12 seeded random moments across its chunks and taken over and restarted each
time (:mod:`tests.local.harness`):

- with ``LocalRuntime`` every record is in the table exactly once, and the
  repository's counts and checkpoint agree with the table;
- the same harness with the HTTP client (gunicorn) leaves duplicates — the
  at-least-once case the guide warns about — while the repository's counts stay
  exact: that is how the test tells the two apart.

The 100-kill soak of the same harness is bench/exactly_once.py (docs/reliability.md).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings

from oxide_batch.roles import RUNTIME
from tests.live import database_url, gunicorn, token_for
from tests.local.harness import job_command, job_environment, run_with_kills

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

RECORDS = 600
CHUNK = 8
# Seconds after the step started: a restart resumes a few chunks further on.
WINDOW = (0.02, 0.2)


def test_the_local_runtime_writes_every_record_exactly_once_across_12_kills(
    records: Any, importer: str
) -> None:
    command = job_command(records=RECORDS, chunk=CHUNK, run="local", user=importer)
    outcome = run_with_kills(
        command,
        job_environment(database_url(), settings.SECRET_KEY),
        kills=12,
        seed=42,
        window=WINDOW,
    )
    print(f"\nlocal runtime: {outcome}")
    assert outcome.kills == 12
    assert len(set(outcome.kill_offsets)) > 1  # killed across chunks, not at one place
    assert outcome.duplicates == {}
    assert outcome.rows == outcome.distinct == RECORDS
    assert outcome.status == "COMPLETED"
    # The repository agrees with the table.
    assert outcome.written_count == outcome.read_count == outcome.checkpoint == outcome.rows


def test_the_same_harness_on_the_http_client_writes_duplicates(records: Any) -> None:
    token = token_for("http-importer", RUNTIME)
    with gunicorn(workers=1, threads=4) as url:
        command = job_command(records=RECORDS, chunk=CHUNK, run="http", url=url, token=token)
        outcome = run_with_kills(
            command,
            job_environment(database_url(), settings.SECRET_KEY),
            kills=6,
            seed=42,
            window=WINDOW,
        )
    print(f"\nHTTP client: {outcome}")
    assert outcome.kills == 6
    assert outcome.status == "COMPLETED"
    assert outcome.distinct == RECORDS  # every record made it …
    assert outcome.duplicates  # … and some twice: the chunk a kill cut short
    assert outcome.rows > RECORDS
    # The repository's counts stay exact: it is the output that is at-least-once.
    assert outcome.written_count == outcome.checkpoint == RECORDS
