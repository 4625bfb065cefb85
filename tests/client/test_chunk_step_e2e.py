"""The chunk-oriented step's retry and skip policies over HTTP against a live
server (issue 42, wire A): transient errors retried without a skip; bad items
skipped up to the limit, each in the skip ledger (read back through the API)
with exact counts, in the chunk's one commit request; one over the limit fails
the step under the last error's category; an ineligible failure is never
retried or skipped; a restart after a failure neither re-processes nor
re-skips what was committed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.client import (
    COMPLETED_WITH_SKIPS,
    ReadFailure,
    RetryPolicy,
    SkipCounts,
    SkipLimitExceeded,
    SkipPolicy,
    Step,
)
from oxide_batch.domain.errors import CommitOutcomeUnknown
from oxide_batch.domain.status import BatchStatus, FailureCategory
from tests.client.conftest import ScriptedClient

pytestmark = pytest.mark.django_db(transaction=True)

S = BatchStatus
PARAMETERS = {"business_date": "2026-07-29"}


class BadRecord(ValueError):
    pass


def load_step(runtime: ScriptedClient, execution_id: int) -> Step:
    """The execution's ``load`` step as the API answers it."""
    row = models.StepExecution.objects.get(job_execution_id=execution_id, step_name="load")
    return runtime.step(row.id)


def source(n: int, bad_reads: frozenset[int] = frozenset()) -> Any:
    def reader(offset: int) -> Iterator[Any]:
        for number in range(offset, n):
            if number in bad_reads:
                yield ReadFailure(BadRecord(f"line {number} is torn"), key=f"line-{number}")
            else:
                yield number

    return reader


def test_retries_and_skips_are_committed_with_their_chunks_and_read_back_from_the_ledger(
    runtime: ScriptedClient,
) -> None:
    written: list[int] = []
    timeouts = {"left": 1}
    slept: list[float] = []

    def processor(item: int) -> int:
        if item in (4, 13):
            raise BadRecord(f"record {item} has no name")
        return item

    def writer(items: list[int]) -> None:
        if 7 in items and timeouts["left"]:
            timeouts["left"] -= 1
            raise TimeoutError("the warehouse timed out")
        if 17 in items:
            raise BadRecord("record 17 breaks a constraint")
        written.extend(items)

    with runtime.job_run("skipping", PARAMETERS) as run:
        step = run.run_chunk_step(
            "load",
            reader=source(22, bad_reads=frozenset({20})),
            processor=processor,
            writer=writer,
            chunk_size=5,
            key=lambda item: f"record-{item}",
            retry=RetryPolicy(exceptions=(TimeoutError,), sleep=slept.append),
            skip=SkipPolicy(exceptions=(BadRecord,), limit=4),
        )
    assert sorted(written) == [n for n in range(22) if n not in (4, 13, 17, 20)]
    assert slept == [0.1]  # one retry
    row = runtime.step(step.step.id)
    assert (row.status, row.exit_code) == (S.COMPLETED, COMPLETED_WITH_SKIPS)
    assert row.skip_counts == SkipCounts(read=1, process=2, write=1)
    counts = row.counts
    assert (counts.read, counts.processed, counts.written, counts.filtered) == (21, 19, 18, 0)
    # 4 and 13 rolled back one attempt each, 7's timeout one, 17's write and its scan two
    assert (counts.committed, counts.rolled_back) == (5, 5)
    assert runtime.posts("/checkpoint") == 5  # the skips rode with the chunk commits

    ledger = list(runtime.skips(step_id=row.id))
    assert [(s.phase, s.item, s.category) for s in ledger] == [
        ("process", "record-4", FailureCategory.USER_COMPONENT),
        ("process", "record-13", FailureCategory.USER_COMPONENT),
        ("write", "record-17", FailureCategory.USER_COMPONENT),
        ("read", "line-20", FailureCategory.USER_COMPONENT),
    ]
    assert [s.chunk for s in ledger] == [1, 3, 4, 5]
    assert ledger[0].detail is not None
    assert (ledger[0].detail.type, ledger[0].detail.message) == (
        "tests.client.test_chunk_step_e2e.BadRecord",
        "record 4 has no name",
    )
    assert {(s.step_name, s.job_execution_id) for s in ledger} == {("load", run.execution.id)}
    assert list(runtime.skips(execution_id=run.execution.id)) == ledger


def test_one_skip_over_the_limit_fails_the_step_with_the_last_errors_category(
    runtime: ScriptedClient,
) -> None:
    def processor(item: int) -> int:
        if item in (1, 6):
            raise BadRecord(f"bad {item}")
        if item == 8:
            raise TimeoutError("the geocoder timed out")
        return item

    run = runtime.job_run("over_the_limit", PARAMETERS)
    with pytest.raises(SkipLimitExceeded, match="skip limit 2 exceeded"), run:
        run.run_chunk_step(
            "load",
            reader=source(10),
            processor=processor,
            writer=lambda items: None,
            chunk_size=5,
            skip=SkipPolicy(exceptions=(BadRecord, TimeoutError), limit=2),
        )
    step = load_step(runtime, run.execution.id)
    assert step.status is S.FAILED
    assert step.failure is not None
    assert step.failure.category is FailureCategory.TIMEOUT
    assert runtime.execution(run.execution.id).status is S.FAILED
    assert step.skip_counts == SkipCounts(process=1)  # the first chunk's; the second rolled back
    assert [s.item for s in runtime.skips(execution_id=run.execution.id)] == ["1"]


def test_an_unknown_commit_is_never_retried_or_skipped_even_when_the_policies_name_it(
    runtime: ScriptedClient,
) -> None:
    calls: list[list[int]] = []
    slept: list[float] = []

    def writer(items: list[int]) -> None:
        calls.append(items)
        if 6 in items:
            raise CommitOutcomeUnknown()  # e.g. a write to another repository

    run = runtime.job_run("unknown_write", PARAMETERS)
    with pytest.raises(CommitOutcomeUnknown), run:
        run.run_chunk_step(
            "load",
            reader=source(10),
            writer=writer,
            chunk_size=5,
            retry=RetryPolicy(exceptions=(Exception,), sleep=slept.append),
            skip=SkipPolicy(exceptions=(Exception, CommitOutcomeUnknown), limit=10),
        )
    assert calls == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]  # once: no retry, no scan
    assert slept == []
    step = load_step(runtime, run.execution.id)
    assert step.status is S.UNKNOWN
    assert step.failure is not None
    assert step.failure.category is FailureCategory.UNKNOWN_COMMIT
    assert step.skip_counts == SkipCounts()
    assert list(runtime.skips(execution_id=run.execution.id)) == []


def test_a_restart_after_a_failure_neither_reprocesses_nor_reskips_committed_items(
    runtime: ScriptedClient,
) -> None:
    seen: list[int] = []
    disk = {"full": True}

    def processor(item: int) -> int:
        seen.append(item)
        if item == 2:
            raise BadRecord("bad 2")
        if item == 11 and disk["full"]:
            raise OSError("the disk is full")  # not skippable: the step fails
        return item

    def run_once() -> Any:
        with runtime.job_run("restartable", PARAMETERS) as run:
            run.run_chunk_step(
                "load",
                reader=source(15),
                processor=processor,
                writer=lambda items: None,
                chunk_size=5,
                skip=SkipPolicy(exceptions=(BadRecord,), limit=1),
            )
        return run

    with pytest.raises(OSError, match="disk is full"):
        run_once()
    first = next(runtime.executions(job_name="restartable"))
    assert first.status is S.FAILED
    disk["full"] = False
    seen.clear()
    second = run_once().execution
    assert second.attempt == 2
    assert seen == [10, 11, 12, 13, 14]  # from the checkpoint
    assert list(runtime.skips(execution_id=second.id)) == []  # nothing skipped again
    assert [s.item for s in runtime.skips(execution_id=first.id)] == ["2"]
    step = load_step(runtime, second.id)
    # The restart took the skip count over: the step execution skipped one.
    assert (step.status, step.exit_code) == (S.COMPLETED, COMPLETED_WITH_SKIPS)
    assert step.skip_counts == SkipCounts(process=1)
    assert (step.counts.read, step.counts.written) == (15, 14)
