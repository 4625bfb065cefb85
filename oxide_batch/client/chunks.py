"""A chunk-oriented step with retry and skip policies (Spring Batch's
fault-tolerant step; stdlib only)::

    run.run_chunk_step(
        "load",
        reader=lambda offset: rows_from(source, start=offset),   # resumes at the offset
        processor=parse,                 # item → item, or None: filtered
        writer=save_all,                 # a list of items
        chunk_size=100,
        retry=RetryPolicy(categories={FailureCategory.TRANSIENT_INFRASTRUCTURE}),
        skip=SkipPolicy(exceptions=(BadRecord,), limit=10),
    )

The **reader** is called once per step run with the offset to resume at (the
number of source entries the committed chunks consumed; 0 when fresh) and
returns an iterable. Each entry is an item, or a :class:`ReadFailure` — the
reader's report of an entry it could not turn into an item (skippable, phase
``read``). An exception raised by the iterable itself fails the step (it
cannot go on). An item's key in the skip ledger is ``key(item)`` (default:
its ordinal, the entry's position in the source).

Each chunk reads ``chunk_size`` entries once, then processes and writes its
items in an **attempt**, inside ``client.attempt_scope()`` (a savepoint for a
runtime sharing the job's database). A failed attempt rolls back
(``rolled_back`` + 1) and the chunk is tried again — processing and writing,
never reading:

- an exception whose category (:func:`~oxide_batch.client.steps.failure_category`)
  is not policy-eligible (``FailureCategory.is_policy_eligible``), and the
  runtime's own signals (a stop, fencing, ``BaseException``), propagate at once:
  never retried, never skipped, whatever the policies name;
- else, while the retry policy names it and its attempts are not used up, the
  attempt runs again after the policy's backoff (counted per item for a
  processing failure, per chunk for a writing failure);
- else, when the skip policy names it: a processing failure skips its item
  (phase ``process``); a writing failure makes the chunk **scan** its items one
  at a time (each in its own attempt) and skip those whose processing or
  writing fails (phase ``process`` / ``write``);
- else it fails the step.

A skip beyond the skip policy's ``limit`` — counted over the step execution,
the skips a restart took over included — raises :class:`SkipLimitExceeded`,
which fails the step under its last failure's category. The chunk's commit
carries its counts, the checkpoint ``{"offset": N}`` and its skips in one
request; the step ends COMPLETED with exit code ``COMPLETED_WITH_SKIPS`` when
its step execution skipped anything (``exit_code=`` overrides). Counts per
chunk: ``read`` = items read; ``processed`` = items the processor passed or
filtered; ``filtered`` = those it filtered; ``written`` = items written;
``rolled_back`` = failed attempts; so ``read`` = ``processed`` + process skips
and ``processed`` = ``written`` + ``filtered`` + write skips.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oxide_batch.client.errors import (
    ExecutionFenced,
    SkipLimitExceeded,
    StepFailed,
    StepSkipped,
    StopRequested,
)
from oxide_batch.client.models import MAX_SKIPS_PER_COMMIT, Skip
from oxide_batch.client.steps import exception_type, failure_category
from oxide_batch.domain.failure_detail import FailureDetail, bounded_for_sending
from oxide_batch.domain.names import UNICODE_WHITESPACE, is_control, is_invisible
from oxide_batch.domain.status import FailureCategory

if TYPE_CHECKING:
    from oxide_batch.client.steps import StepRun

#: The exit code of a step that skipped anything (Spring Batch's).
COMPLETED_WITH_SKIPS = "COMPLETED_WITH_SKIPS"
#: The longest item key the ledger keeps, in UTF-8 bytes.
MAX_ITEM_BYTES = 256

# The runtime's own signals: never a policy's business.
_SIGNALS = (StopRequested, ExecutionFenced, StepSkipped, StepFailed, SkipLimitExceeded)

Reader = Callable[[int], Iterable[Any]]
Processor = Callable[[Any], Any]
Writer = Callable[[list[Any]], None]


@dataclass(frozen=True)
class ReadFailure:
    """What a reader yields for a source entry it could not read: the error,
    and the entry's key (default: its ordinal)."""

    error: Exception
    key: str | None = None


def _ineligible(categories: Collection[FailureCategory]) -> None:
    refused = sorted(FailureCategory(c).value for c in categories if not c.is_policy_eligible)
    if refused:
        raise ValueError(
            f"not policy-eligible, never retried or skipped: {', '.join(refused)} "
            "(FailureCategory.is_policy_eligible)"
        )


@dataclass(frozen=True)
class _Names:
    exceptions: tuple[type[BaseException], ...] = ()
    categories: frozenset[FailureCategory] = frozenset()

    def names(self, error: BaseException) -> bool:
        return isinstance(error, self.exceptions) or failure_category(error) in self.categories


def policy_applies(error: BaseException) -> bool:
    """Whether any policy may act on ``error``: an ``Exception`` that is not
    one of the runtime's signals and whose category is policy-eligible."""
    if not isinstance(error, Exception) or isinstance(error, _SIGNALS):
        return False
    return failure_category(error).is_policy_eligible


@dataclass(frozen=True)
class RetryPolicy:
    """Retry a chunk's failed attempt when the failure is an instance of one of
    ``exceptions`` or falls under one of ``categories`` (policy-eligible ones
    only: naming another is a ``ValueError``), up to ``max_attempts`` attempts
    in all, waiting ``backoff`` seconds after the first failure, doubled after
    each next one, at most ``backoff_max``; ``sleep`` waits (a test's fake)."""

    exceptions: tuple[type[BaseException], ...] = ()
    categories: Collection[FailureCategory] = frozenset()
    max_attempts: int = 3
    backoff: float = 0.1
    backoff_max: float = 10.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def __post_init__(self) -> None:
        _ineligible(self.categories)
        if type(self.max_attempts) is not int or self.max_attempts < 1:
            raise ValueError("max_attempts must be an int of at least 1")
        if not 0 <= self.backoff <= self.backoff_max:
            raise ValueError("backoff must be between 0 and backoff_max")

    def retries(self, error: BaseException, failures: int) -> bool:
        """Whether to try again after the ``failures``-th failure of one site."""
        names = _Names(tuple(self.exceptions), frozenset(self.categories))
        return policy_applies(error) and names.names(error) and failures < self.max_attempts

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure (1, 2, …)."""
        return float(min(self.backoff_max, self.backoff * 2 ** (failures - 1)))


@dataclass(frozen=True)
class SkipPolicy:
    """Skip an item whose failure is an instance of one of ``exceptions`` or
    falls under one of ``categories`` (policy-eligible ones only), at most
    ``limit`` items per step execution."""

    exceptions: tuple[type[BaseException], ...] = ()
    categories: Collection[FailureCategory] = frozenset()
    limit: int = 10

    def __post_init__(self) -> None:
        _ineligible(self.categories)
        if type(self.limit) is not int or self.limit < 0:
            raise ValueError("limit must be a non-negative int")

    def skips(self, error: BaseException) -> bool:
        names = _Names(tuple(self.exceptions), frozenset(self.categories))
        return policy_applies(error) and names.names(error)


_NO_RETRY = RetryPolicy(max_attempts=1)
_NO_SKIP = SkipPolicy(limit=0)


def _visible(character: str) -> str:
    if not (is_control(character) or is_invisible(character) or "\ud800" <= character <= "\udfff"):
        return character
    code = ord(character)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def item_key(text: str, ordinal: int) -> str:
    """``text`` as the ledger takes a key (``validate_item``): control and
    invisible characters written as their escapes (``\\u202e``), cut to 256
    UTF-8 bytes at a character boundary, without surrounding whitespace; the
    ordinal when nothing is left."""
    visible = "".join(_visible(character) for character in text)
    cut = visible.encode("utf-8")[:MAX_ITEM_BYTES].decode("utf-8", "ignore")
    return cut.strip("".join(UNICODE_WHITESPACE)) or str(ordinal)


def _detail(error: BaseException) -> FailureDetail:
    return bounded_for_sending(FailureDetail(exception_type(error), str(error)))


@dataclass
class _Entry:
    ordinal: int
    key: str
    value: Any = None
    failure: ReadFailure | None = None


@dataclass
class _Chunk:
    """One chunk's outcome: the counts and skips its commit carries."""

    read: int = 0
    processed: int = 0
    written: int = 0
    filtered: int = 0
    rolled_back: int = 0
    skips: list[Skip] = field(default_factory=list)


@dataclass(frozen=True)
class _Failed:
    """An attempt's failure a policy may act on, with where it happened (an
    item's processing, or the write: ``entry`` None)."""

    error: Exception
    entry: _Entry | None


class ChunkStep:
    """The work of a chunk-oriented step (``run.run_chunk_step``; or
    ``run.run_step(name, ChunkStep(...).run)``). Validates its arguments when
    made, before any request."""

    def __init__(
        self,
        *,
        reader: Reader,
        writer: Writer,
        processor: Processor | None = None,
        chunk_size: int = 100,
        retry: RetryPolicy | None = None,
        skip: SkipPolicy | None = None,
        key: Callable[[Any], str] | None = None,
        exit_code: str | None = None,
    ) -> None:
        if type(chunk_size) is not int or chunk_size < 1:
            raise ValueError("chunk_size must be an int of at least 1")
        self.skip = skip or _NO_SKIP
        if min(chunk_size, self.skip.limit) > MAX_SKIPS_PER_COMMIT:
            raise ValueError(
                f"a chunk may skip at most {MAX_SKIPS_PER_COMMIT} items: "
                "lower chunk_size or the skip limit"
            )
        self.reader = reader
        self.writer = writer
        self.processor = processor
        self.chunk_size = chunk_size
        self.retry = retry or _NO_RETRY
        self.key = key
        self.exit_code = exit_code
        self.skipped = 0  # the step execution's skips so far

    # -- the step --------------------------------------------------------------------

    def run(self, step: StepRun) -> None:
        offset = self._offset(step)
        self.skipped = step.step.skip_counts.total  # taken over on a restart
        entries = self._entries(step, offset)
        following = next(entries, None)
        while following is not None:
            chunk: list[_Entry] = []
            while following is not None and len(chunk) < self.chunk_size:
                chunk.append(following)
                following = next(entries, None)
            outcome = self._chunk(step, chunk)
            offset += len(chunk)
            last = following is None
            if last:
                self._set_exit_code(step)
            step.commit(
                read=outcome.read,
                processed=outcome.processed,
                written=outcome.written,
                filtered=outcome.filtered,
                rolled_back=outcome.rolled_back,
                checkpoint={"offset": offset},
                skips=outcome.skips,
                last=last,
            )
        self._set_exit_code(step)  # no chunk at all: the step's end carries it

    def _set_exit_code(self, step: StepRun) -> None:
        if step.exit_code is None:
            if self.exit_code is not None:
                step.exit_code = self.exit_code
            elif self.skipped:
                step.exit_code = COMPLETED_WITH_SKIPS

    @staticmethod
    def _offset(step: StepRun) -> int:
        offset = (step.checkpoint or {}).get("offset", 0)
        if type(offset) is not int or offset < 0:
            raise ValueError(f"the checkpoint's offset is not a non-negative int: {offset!r}")
        return offset

    def _entries(self, step: StepRun, offset: int) -> Iterator[_Entry]:
        for ordinal, value in enumerate(self.reader(offset), start=offset):
            if isinstance(value, ReadFailure):
                key = item_key(value.key or "", ordinal)
                yield _Entry(ordinal, key, failure=value)
            else:
                key = item_key(self.key(value) if self.key else "", ordinal)
                yield _Entry(ordinal, key, value)

    # -- one chunk -------------------------------------------------------------------

    def _chunk(self, step: StepRun, entries: list[_Entry]) -> _Chunk:
        outcome = _Chunk()
        items: list[_Entry] = []
        for entry in entries:
            if entry.failure is None:
                items.append(entry)
                continue
            error = entry.failure.error
            if not self.skip.skips(error):
                raise error
            self._skip(outcome, "read", entry, error)
        outcome.read = len(items)
        failures: dict[int | None, int] = {}
        while (failed := self._attempt(step, items, outcome)) is not None:
            error, where = failed.error, failed.entry
            outcome.rolled_back += 1
            site = None if where is None else where.ordinal
            failures[site] = failures.get(site, 0) + 1
            if self.retry.retries(error, failures[site]):
                self.retry.sleep(self.retry.delay(failures[site]))
            elif not self.skip.skips(error):
                raise error
            elif where is not None:
                self._skip(outcome, "process", where, error)
                items = [item for item in items if item is not where]
            else:
                self._scan(step, items, outcome)
                break
        return outcome

    def _attempt(self, step: StepRun, items: list[_Entry], outcome: _Chunk) -> _Failed | None:
        """Process and write ``items`` in one attempt: the counts when it
        succeeded; its failure when a policy may act on it (the scope ended:
        rolled back); any other exception propagates."""
        entry: _Entry | None = None
        out: list[Any] = []
        filtered = 0
        try:
            with step.client.attempt_scope():
                for entry in items:
                    result = self._process(entry)
                    if result is None:
                        filtered += 1
                    else:
                        out.append(result)
                entry = None
                if out:
                    self.writer(out)
        except Exception as error:
            if not policy_applies(error):
                raise
            return _Failed(error, entry)
        outcome.processed += len(items)
        outcome.filtered += filtered
        outcome.written += len(out)
        return None

    def _scan(self, step: StepRun, items: list[_Entry], outcome: _Chunk) -> None:
        """After a skippable writing failure: each item alone, in its own
        attempt; the failing ones skipped (no retry while scanning)."""
        for item in items:
            failed = self._attempt(step, [item], outcome)
            if failed is None:
                continue
            outcome.rolled_back += 1
            if not self.skip.skips(failed.error):
                raise failed.error
            if failed.entry is None:
                outcome.processed += 1  # it passed the processor; its write failed
                self._skip(outcome, "write", item, failed.error)
            else:
                self._skip(outcome, "process", item, failed.error)

    def _process(self, entry: _Entry) -> Any:
        return entry.value if self.processor is None else self.processor(entry.value)

    def _skip(self, outcome: _Chunk, phase: str, entry: _Entry, error: Exception) -> None:
        if self.skipped >= self.skip.limit:
            raise SkipLimitExceeded(self.skip.limit, phase, entry.key, error) from error
        self.skipped += 1
        outcome.skips.append(Skip(phase, entry.key, failure_category(error), _detail(error)))
