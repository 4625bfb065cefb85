"""The skip ledger's values (contract §2.3.3 "Skips"; decisions 400-406).

A chunk commit may carry the items its fault policy skipped: each entry names
the phase it was skipped in, the item (its key or ordinal, as the runtime
chooses, bounded), the failure's category and, optionally, the failure's
detail (type and message, kept as a failure's detail is: sanitised, scrubbed,
cut). The server derives the step's skip counts from the entries: a runtime
never sends skip counts.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from oxide_batch.domain.errors import InvalidSkipItem, SkipNotEligible
from oxide_batch.domain.execution import ExecutionCounts
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.names import has_surrounding_whitespace, is_control, is_invisible
from oxide_batch.domain.status import FailureCategory

#: At most this many entries in one chunk commit (a chunk skips at most its items).
MAX_SKIPS_PER_COMMIT = 1000
#: An item's key or ordinal: 1..256 UTF-8 bytes of visible characters.
ITEM_MAX_BYTES = 256


class SkipPhase(enum.StrEnum):
    """Where in the chunk an item was skipped (Spring Batch's three skip counts)."""

    READ = "read"
    PROCESS = "process"
    WRITE = "write"

    @property
    def count_field(self) -> str:
        """The ``ExecutionCounts`` field this phase's skips add to."""
        return f"{self.value}_skip"


@dataclass(frozen=True)
class SkipEntry:
    """One skipped item as a chunk commit carries it. A category that no fault
    policy may skip is refused here (``SkipNotEligible``, decision 402), so
    every way into the repository enforces the seed's rule."""

    phase: SkipPhase
    item: str
    category: FailureCategory
    detail: FailureDetail | None = None
    index: int = 0  # its place in the commit's list (named by a refusal)

    def __post_init__(self) -> None:
        validate_item(self.item)
        if not self.category.is_policy_eligible:
            raise SkipNotEligible(index=self.index, category=self.category.value)


def validate_item(item: str) -> str:
    """``item`` when it is 1..256 UTF-8 bytes of visible characters without
    surrounding whitespace; ``InvalidSkipItem`` otherwise."""
    try:
        size = len(item.encode("utf-8")) if isinstance(item, str) else 0
    except UnicodeEncodeError:  # a lone surrogate
        size = 0
    if (
        not 1 <= size <= ITEM_MAX_BYTES
        or has_surrounding_whitespace(item)
        or any(is_control(character) or is_invisible(character) for character in item)
    ):
        raise InvalidSkipItem(max_bytes=ITEM_MAX_BYTES)
    return item


def skip_counts(entries: Sequence[SkipEntry]) -> ExecutionCounts:
    """The skip counts ``entries`` add to their step (all other counts 0)."""
    counts = {"read_skip": 0, "process_skip": 0, "write_skip": 0}
    for entry in entries:
        counts[entry.phase.count_field] += 1
    return ExecutionCounts(**counts)


@dataclass(frozen=True)
class SkipRecord:
    """One row of the skip ledger, as the API and the console read it."""

    id: int
    step_execution_id: int
    step_name: str
    job_execution_id: int
    phase: SkipPhase
    item: str
    chunk: int
    category: FailureCategory
    detail: FailureDetail | None
    recorded_at: datetime
