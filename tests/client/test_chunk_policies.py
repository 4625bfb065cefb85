"""The chunk-oriented step's retry and skip policies (oxide_batch/client/chunks.py)
against a recording step: every commit it would send, and an output store whose
attempt scope behaves as the local runtime's savepoint (a failed attempt's writes
roll back), so "every good item exactly once" is checked, not assumed. The same
policies over HTTP against a live server: test_chunk_step_e2e.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from oxide_batch.client.chunks import (
    COMPLETED_WITH_SKIPS,
    ChunkStep,
    ReadFailure,
    RetryPolicy,
    SkipPolicy,
    item_key,
)
from oxide_batch.client.errors import ExecutionFenced, SkipLimitExceeded, StopRequested
from oxide_batch.client.models import Skip, SkipCounts, SkippedItem, Step
from oxide_batch.client.steps import failure_category
from oxide_batch.domain.errors import CommitOutcomeUnknown, StaleVersion, Unavailable
from oxide_batch.domain.skips import validate_item
from oxide_batch.domain.status import FailureCategory


class BadRecord(ValueError):
    pass


@dataclass
class Store:
    """The job's output: rows written inside an attempt scope are kept only
    when the scope ends without an exception (a savepoint's behaviour)."""

    rows: list[Any] = field(default_factory=list)
    pending: list[Any] | None = None
    scopes: list[str] = field(default_factory=list)

    @contextlib.contextmanager
    def attempt_scope(self) -> Iterator[None]:
        self.pending = []
        try:
            yield
        except BaseException:
            self.scopes.append("rolled back")
            raise
        else:
            self.scopes.append("kept")
            self.rows.extend(self.pending)
        finally:
            self.pending = None

    def write(self, items: list[Any]) -> None:
        assert self.pending is not None, "the writer ran outside an attempt scope"
        self.pending.extend(items)


@dataclass
class StepRow:
    skip_counts: SkipCounts = field(default_factory=SkipCounts)


class RecordingStep:
    """What ChunkStep uses of a StepRun: its checkpoint, the taken-over skip
    counts, its exit code, its client's attempt scope, and commit."""

    def __init__(
        self, store: Store, checkpoint: dict[str, Any] | None = None, skipped: int = 0
    ) -> None:
        self.client = store
        self.checkpoint = checkpoint
        self.step = StepRow(SkipCounts(process=skipped))
        self.exit_code: str | None = None
        self.commits: list[dict[str, Any]] = []

    def commit(self, **sent: Any) -> None:
        self.commits.append(sent)
        self.checkpoint = sent["checkpoint"]

    def total(self, name: str) -> int:
        return sum(commit[name] for commit in self.commits)

    def skips(self) -> list[tuple[str, str, FailureCategory]]:
        return [
            (skip.phase, skip.item, skip.category)
            for commit in self.commits
            for skip in commit["skips"]
        ]


@dataclass
class Source:
    """Items 0..n-1 handed out from an offset; records what it was asked for."""

    n: int
    bad_reads: frozenset[int] = frozenset()
    offsets: list[int] = field(default_factory=list)
    handed_out: int = 0

    def __call__(self, offset: int) -> Iterator[Any]:
        self.offsets.append(offset)
        for number in range(offset, self.n):
            self.handed_out += 1
            if number in self.bad_reads:
                yield ReadFailure(BadRecord(f"line {number} is not a record"), key=f"line-{number}")
            else:
                yield number


def run(step: RecordingStep, source: Source, **options: Any) -> ChunkStep:
    store = step.client
    assert isinstance(store, Store)
    options.setdefault("writer", store.write)
    options.setdefault("chunk_size", 5)
    work = ChunkStep(reader=source, **options)
    work.run(step)  # type: ignore[arg-type]
    return work


def no_sleep() -> tuple[list[float], Any]:
    slept: list[float] = []
    return slept, slept.append


def test_transient_write_errors_are_retried_then_succeed_without_a_skip() -> None:
    store, source = Store(), Source(12)
    failing = {"left": 2}
    processed: list[int] = []

    def writer(items: list[int]) -> None:
        store.write(items)
        if 5 in items and failing["left"]:
            failing["left"] -= 1
            raise Unavailable()  # the warehouse answered 503

    def processor(item: int) -> int:
        processed.append(item)
        return item

    slept, sleep = no_sleep()
    step = RecordingStep(store)
    run(
        step,
        source,
        writer=writer,
        processor=processor,
        retry=RetryPolicy(
            categories={FailureCategory.TRANSIENT_INFRASTRUCTURE}, backoff=0.5, sleep=sleep
        ),
        skip=SkipPolicy(exceptions=(Exception,), limit=5),
    )
    assert store.rows == list(range(12))  # every item once: the failed attempts rolled back
    assert store.scopes == ["kept", "rolled back", "rolled back", "kept", "kept"]
    assert slept == [0.5, 1.0]  # the backoff doubles
    assert source.handed_out == 12  # the retries re-processed, never re-read
    assert processed.count(5) == 3
    assert processed.count(0) == 1
    assert [c["rolled_back"] for c in step.commits] == [0, 2, 0]
    assert [c["read"] for c in step.commits] == [5, 5, 2]
    assert [c["processed"] for c in step.commits] == [5, 5, 2]
    assert [c["written"] for c in step.commits] == [5, 5, 2]
    assert [c["checkpoint"] for c in step.commits] == [
        {"offset": 5},
        {"offset": 10},
        {"offset": 12},
    ]
    assert [c["last"] for c in step.commits] == [False, False, True]
    assert step.skips() == []
    assert step.exit_code is None  # COMPLETED, not COMPLETED_WITH_SKIPS


def test_retries_stop_at_max_attempts_and_a_non_skippable_failure_fails_the_step() -> None:
    store, source = Store(), Source(10)
    slept, sleep = no_sleep()

    def writer(items: list[int]) -> None:
        raise Unavailable()

    step = RecordingStep(store)
    with pytest.raises(Unavailable):
        run(
            step,
            source,
            writer=writer,
            retry=RetryPolicy(exceptions=(Unavailable,), max_attempts=3, sleep=sleep),
        )
    assert len(slept) == 2  # three attempts in all
    assert step.commits == []
    assert store.rows == []


def test_bad_records_are_skipped_in_every_phase_up_to_the_limit_with_exact_counts() -> None:
    store, source = Store(), Source(20, bad_reads=frozenset({1}))

    def processor(item: int) -> int | None:
        if item in (3, 8):
            raise BadRecord(f"record {item} has no name")
        return None if item == 9 else item * 10  # 9 is filtered

    def writer(items: list[int]) -> None:
        store.write(items)
        if 120 in items:
            raise BadRecord("the row for 12 violates a constraint")

    step = RecordingStep(store)
    run(
        step,
        source,
        processor=processor,
        writer=writer,
        skip=SkipPolicy(exceptions=(BadRecord,), limit=4),
        key=lambda item: f"record-{item}",
    )
    expected = [n * 10 for n in range(20) if n not in (1, 3, 8, 9, 12)]
    assert sorted(store.rows) == expected  # each once
    assert step.skips() == [
        ("read", "line-1", FailureCategory.USER_COMPONENT),
        ("process", "record-3", FailureCategory.USER_COMPONENT),
        ("process", "record-8", FailureCategory.USER_COMPONENT),
        ("write", "record-12", FailureCategory.USER_COMPONENT),
    ]
    detail = step.commits[0]["skips"][1].detail
    assert (detail.type, detail.message, detail.traceback) == (
        "tests.client.test_chunk_policies.BadRecord",
        "record 3 has no name",
        None,  # type and message only, never a traceback
    )
    # read = processed + process skips; processed = written + filtered + write skips
    assert [c["read"] for c in step.commits] == [4, 5, 5, 5]
    assert [c["processed"] for c in step.commits] == [3, 4, 5, 5]
    assert [c["filtered"] for c in step.commits] == [0, 1, 0, 0]
    assert [c["written"] for c in step.commits] == [3, 3, 4, 5]
    # a skip in processing rolls the attempt back once; the write's failure
    # once, then the scan's one failing item once more
    assert [c["rolled_back"] for c in step.commits] == [1, 1, 2, 0]
    assert step.exit_code == COMPLETED_WITH_SKIPS


def test_one_skip_over_the_limit_fails_the_step_with_the_last_errors_category() -> None:
    store, source = Store(), Source(10)

    def processor(item: int) -> int:
        if item in (2, 6):
            raise BadRecord(f"bad {item}")
        if item == 7:
            raise TimeoutError("the geocoder timed out on 7")
        return item

    step = RecordingStep(store)
    with pytest.raises(SkipLimitExceeded) as raised:
        run(
            step,
            source,
            processor=processor,
            skip=SkipPolicy(exceptions=(BadRecord, TimeoutError), limit=2),
        )
    assert isinstance(raised.value.cause, TimeoutError)
    assert failure_category(raised.value) is FailureCategory.TIMEOUT  # the last error's
    # The first chunk (one skip) committed; the second (one skip, then over) did not.
    assert [len(c["skips"]) for c in step.commits] == [1]
    assert store.rows == [0, 1, 3, 4]


def test_the_limit_counts_the_skips_a_restart_took_over() -> None:
    store, source = Store(), Source(10)

    def processor(item: int) -> int:
        if item == 7:
            raise BadRecord("bad 7")
        return item

    step = RecordingStep(store, checkpoint={"offset": 5}, skipped=2)  # 2 skips committed
    with pytest.raises(SkipLimitExceeded):
        run(step, source, processor=processor, skip=SkipPolicy(exceptions=(BadRecord,), limit=2))
    assert step.commits == []


@pytest.mark.parametrize(
    ("error", "category"),
    [
        (CommitOutcomeUnknown(), FailureCategory.UNKNOWN_COMMIT),
        (ExecutionFenced(1, "FAILED"), None),
        (StopRequested(1), None),
    ],
)
def test_an_ineligible_failure_is_never_retried_or_skipped_even_when_the_policy_names_it(
    error: Exception, category: FailureCategory | None
) -> None:
    store, source = Store(), Source(10)
    slept, sleep = no_sleep()

    def writer(items: list[int]) -> None:
        store.write(items)
        if 6 in items:
            raise error

    step = RecordingStep(store)
    with pytest.raises(type(error)):
        run(
            step,
            source,
            writer=writer,
            retry=RetryPolicy(exceptions=(Exception, type(error)), sleep=sleep),
            skip=SkipPolicy(exceptions=(Exception, type(error)), limit=100),
        )
    if category is not None:
        assert not category.is_policy_eligible
    assert slept == []  # no retry
    assert store.scopes == ["kept", "rolled back"]  # one attempt, no scan
    assert [c["checkpoint"] for c in step.commits] == [{"offset": 5}]  # the failing chunk: none
    assert step.skips() == []


def test_a_policy_naming_an_ineligible_category_is_refused_when_made() -> None:
    for policy in (RetryPolicy, SkipPolicy):
        with pytest.raises(ValueError, match="UNKNOWN_COMMIT"):
            policy(categories={FailureCategory.UNKNOWN_COMMIT})


@pytest.mark.parametrize("category", list(FailureCategory))
def test_every_category_is_retried_and_skipped_exactly_when_it_is_policy_eligible(
    category: FailureCategory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the policies, for each category the reporting could give: the
    seed's FailureCategory.is_policy_eligible decides before any policy."""

    class Categorized(Exception):
        pass

    monkeypatch.setattr(
        "oxide_batch.client.chunks.failure_category",
        lambda error: category if isinstance(error, Categorized) else failure_category(error),
    )
    store, source = Store(), Source(3)
    slept, sleep = no_sleep()
    failing = {"left": 1}

    def processor(item: int) -> int:
        if item == 1 and failing["left"]:
            failing["left"] -= 1
            raise Categorized("once")
        return item

    step = RecordingStep(store)
    retry = RetryPolicy(exceptions=(Categorized,), sleep=sleep)
    if category.is_policy_eligible:
        run(step, source, processor=processor, retry=retry)
        assert slept == [0.1]
        assert store.rows == [0, 1, 2]
    else:
        with pytest.raises(Categorized):
            run(step, source, processor=processor, retry=retry)
        assert slept == []
    failing["left"] = 1
    store, step = Store(), RecordingStep(Store())
    skip = SkipPolicy(exceptions=(Categorized,), limit=5)
    if category.is_policy_eligible:
        run(step, source, processor=processor, skip=skip)
        assert [s[0:2] for s in step.skips()] == [("process", "1")]
    else:
        with pytest.raises(Categorized):
            run(step, source, processor=processor, skip=skip)


def test_a_restart_resumes_at_the_checkpoint_without_reprocessing_or_reskipping() -> None:
    store, source = Store(), Source(15)
    seen: list[int] = []
    broken = {"on": True}

    def processor(item: int) -> int:
        seen.append(item)
        if item == 2:
            raise BadRecord("bad 2")
        if item == 11 and broken["on"]:
            raise RuntimeError("the disk is full")  # not skippable: the step fails
        return item

    skip = SkipPolicy(exceptions=(BadRecord,), limit=1)
    first = RecordingStep(store)
    with pytest.raises(RuntimeError):
        run(first, source, processor=processor, skip=skip)
    assert first.skips() == [("process", "2", FailureCategory.USER_COMPONENT)]
    assert first.checkpoint == {"offset": 10}

    broken["on"] = False
    seen.clear()
    # The server hands the restart the checkpoint and the skip counts.
    second = RecordingStep(store, checkpoint=first.checkpoint, skipped=1)
    run(second, source, processor=processor, skip=skip)
    assert source.offsets == [0, 10]
    assert seen == [10, 11, 12, 13, 14]  # nothing committed is processed again
    assert second.skips() == []  # nor skipped again
    assert sorted(store.rows) == [n for n in range(15) if n != 2]  # each once
    assert second.exit_code == COMPLETED_WITH_SKIPS  # the step execution skipped one
    assert second.total("read") == 5


def test_the_exit_code_can_be_overridden_and_an_empty_source_commits_nothing() -> None:
    store = Store()
    step = RecordingStep(store)
    run(step, Source(0), skip=SkipPolicy(exceptions=(BadRecord,)))
    assert step.commits == []
    assert step.exit_code is None

    step = RecordingStep(store)
    run(step, Source(3, bad_reads=frozenset({0})), skip=SkipPolicy(exceptions=(BadRecord,)))
    assert step.exit_code == COMPLETED_WITH_SKIPS

    step = RecordingStep(store)
    run(
        step,
        Source(3, bad_reads=frozenset({0})),
        skip=SkipPolicy(exceptions=(BadRecord,)),
        exit_code="LOADED_PARTLY",
    )
    assert step.exit_code == "LOADED_PARTLY"


def test_arguments_are_checked_before_any_request() -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        ChunkStep(reader=Source(1), writer=print, chunk_size=0)
    with pytest.raises(ValueError, match="at most 1000"):
        ChunkStep(reader=Source(1), writer=print, chunk_size=5000, skip=SkipPolicy(limit=2000))
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="limit"):
        SkipPolicy(limit=-1)


def test_item_keys_are_bounded_and_visible() -> None:
    assert item_key("row\u202e7\n", 3) == "row\\u202e7\\u000a"
    assert len(item_key("é" * 300, 0).encode()) <= 256
    assert item_key("", 41) == "41"
    for nasty in ("  x\u3000", "\ud800a", "\x00\x85", "\u2028", "a" * 300, "\u00a0", "é" * 200):
        assert validate_item(item_key(nasty, 5))  # the server takes every key the client makes
    skip = Skip("write", "k", FailureCategory.TIMEOUT)
    assert skip.as_json() == {"phase": "write", "item": "k", "failure": {"category": "TIMEOUT"}}
    with pytest.raises(ValueError, match="phase"):
        Skip("load", "k", FailureCategory.TIMEOUT)


def test_an_optimistic_conflict_of_the_jobs_own_data_is_eligible() -> None:
    """The seed's table says OPTIMISTIC_CONFLICT may be retried (the job's own
    rows); the repository's own conflicts never reach a policy: they happen on
    the commit, outside the attempts, and a fencing one is ExecutionFenced."""
    store, source = Store(), Source(2)
    slept, sleep = no_sleep()
    failing = {"left": 1}

    def writer(items: list[int]) -> None:
        store.write(items)
        if failing["left"]:
            failing["left"] -= 1
            raise StaleVersion(3, 4)

    step = RecordingStep(store)
    run(
        step,
        source,
        writer=writer,
        retry=RetryPolicy(categories={FailureCategory.OPTIMISTIC_CONFLICT}, sleep=sleep),
    )
    assert store.rows == [0, 1]
    assert slept == [0.1]


def test_the_client_parses_the_skip_counts_and_ledger_rows() -> None:
    counts = {"read": 5, "processed": 4, "written": 4, "filtered": 0, "committed": 1}
    document = {
        "id": 7,
        "job_instance_id": 1,
        "job_execution_id": 2,
        "step_name": "load",
        "node_id": "load",
        "status": "STARTED",
        "exit_code": "EXECUTING",
        "created_at": "2026-07-29T10:00:00Z",
        "started_at": "2026-07-29T10:00:00Z",
        "ended_at": None,
        "updated_at": "2026-07-29T10:00:01Z",
        "counts": {**counts, "rolled_back": 1, "read_skip": 1, "process_skip": 2, "write_skip": 3},
        "failure": None,
        "version": 3,
    }
    step = Step.from_json(document)
    assert step.skip_counts == SkipCounts(read=1, process=2, write=3)
    assert step.skip_counts.total == 6
    assert step.counts.read == 5
    older = Step.from_json({**document, "counts": {**counts, "rolled_back": 1}})
    assert older.skip_counts == SkipCounts()  # a server without the ledger
    row = SkippedItem.from_json(
        {
            "id": 9,
            "step_execution_id": 7,
            "step_name": "load",
            "job_execution_id": 2,
            "phase": "process",
            "item": "row-4",
            "chunk": 1,
            "category": "USER_COMPONENT",
            "detail": {"type": "ValueError"},  # a viewer's
            "recorded_at": "2026-07-29T10:00:01Z",
        }
    )
    assert (row.item, row.category, row.chunk) == ("row-4", FailureCategory.USER_COMPONENT, 1)
    assert row.detail is not None
    assert (row.detail.type, row.detail.message) == ("ValueError", None)
