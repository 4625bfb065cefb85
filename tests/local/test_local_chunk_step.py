"""The chunk-oriented step (retry, skip) under the local runtime: each attempt
is a savepoint of the open chunk, so a failed attempt's rows go and the retry
or the one-at-a-time scan writes them once; the chunk's rows, counts,
checkpoint and skip ledger rows commit in one transaction (issue 42 points
1-3 together)."""

from __future__ import annotations

from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.client import RetryPolicy, SkipLimitExceeded, SkipPolicy
from oxide_batch.local import LocalRuntime
from tests.local.records import Record

pytestmark = pytest.mark.django_db(transaction=True)

QUIET = 3600.0


class Flaky(Exception):
    """A transient error of the job's own (retried)."""


class BadRecord(Exception):
    """A record the writer refuses (skipped)."""


def test_retries_and_skips_leave_every_written_record_once_with_its_ledger_row(
    records: Any, importer: str
) -> None:
    failures = {"flaky": 0}

    def writer(items: list[int]) -> None:
        # Rows first, then the failure: a failed attempt's rows must roll back.
        Record.objects.bulk_create(Record(key=item) for item in items)
        if 7 in items and failures["flaky"] < 2:
            failures["flaky"] += 1
            raise Flaky("deadlock, try again")
        if 13 in items:
            raise BadRecord(f"record 13 of {len(items)} refused")

    runtime = LocalRuntime(user=importer)
    with runtime.job_run("local_import", {"day": "skips"}, poll_interval=QUIET) as run:
        run.run_chunk_step(
            "load",
            reader=lambda offset: range(offset, 20),
            writer=writer,
            chunk_size=5,
            key=str,
            retry=RetryPolicy(exceptions=(Flaky,), max_attempts=3, sleep=lambda _: None),
            skip=SkipPolicy(exceptions=(BadRecord,), limit=2),
        )

    # Every record once, except the one skipped: no row of a failed attempt stayed.
    assert sorted(Record.objects.values_list("key", flat=True)) == [
        key for key in range(20) if key != 13
    ]
    step = models.StepExecution.objects.get(job_execution_id=run.execution.id)
    assert (step.status, step.exit_code) == ("COMPLETED", "COMPLETED_WITH_SKIPS")
    assert (step.read_count, step.written_count, step.write_skip_count) == (20, 19, 1)
    assert step.committed_count == 4
    skipped = list(runtime.skips(execution_id=run.execution.id))
    assert [(s.phase, s.item) for s in skipped] == [("write", "13")]
    assert failures["flaky"] == 2


def test_a_skip_limit_exceeded_rolls_back_the_chunk_and_its_ledger_rows(
    records: Any, importer: str
) -> None:
    def writer(items: list[int]) -> None:
        Record.objects.bulk_create(Record(key=item) for item in items)
        bad = [item for item in items if item >= 6]
        if bad:
            raise BadRecord(f"record {bad[0]} refused")

    runtime = LocalRuntime(user=importer)
    with (
        pytest.raises(SkipLimitExceeded),
        runtime.job_run("local_import", {"day": "limit"}, poll_interval=QUIET) as run,
    ):
        run.run_chunk_step(
            "load",
            reader=lambda offset: range(offset, 10),
            writer=writer,
            chunk_size=5,
            key=str,
            skip=SkipPolicy(exceptions=(BadRecord,), limit=2),
        )

    # The first chunk committed; the second (5 and 6, 7, 8 skipped: over the
    # limit) left neither rows nor ledger rows nor counts.
    assert sorted(Record.objects.values_list("key", flat=True)) == [0, 1, 2, 3, 4]
    step = models.StepExecution.objects.get(job_execution_id=run.execution.id)
    assert step.status == "FAILED"
    assert (step.written_count, step.write_skip_count, step.committed_count) == (5, 0, 1)
    assert list(runtime.skips(execution_id=run.execution.id)) == []
