"""Runtime writes that carry several facts in one row write (contract §4.2 "Fewer
round trips"), and the control state every runtime write answers with.

Each fused write is the separate writes' rules applied one after another to
the row in memory — the lifecycle table decides every move, in the order the
separate requests would meet them — and then written once, with one version
step. What a fused write ends at:

* a launched attempt: created STARTING at version 0, claimed (no version
  step), moved to STARTED (version 1) — inserted as that row, at version 1,
  exactly where the three separate requests leave it;
* a step created STARTED: inserted at version 1, as create + start leave it;
* a finishing chunk: the chunk's counts and state, then STARTED → COMPLETED
  (and the exit code): version + 1, not + 2 (one compare-and-swap);
* a transition with an exit code: version + 1.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import datetime

from oxide_batch.domain.execution import ExecutionCounts, ExecutionMetadata, StepExecution
from oxide_batch.domain.lifecycle import (
    INITIAL_VERSION,
    LifecycleTransition,
    compare_and_enrich,
    compare_and_transition,
)
from oxide_batch.domain.recovery import E, fenced_chunk, fenced_transition
from oxide_batch.domain.status import BatchStatus


def started_on_creation(metadata: ExecutionMetadata, at: datetime) -> tuple[ExecutionMetadata, int]:
    """A new STARTING row (version 0) moved to STARTED at ``at``: the table's
    STARTING → STARTED, ``started_at`` set, version 1."""
    return compare_and_transition(
        metadata,
        INITIAL_VERSION,
        INITIAL_VERSION,
        LifecycleTransition(BatchStatus.STARTED, at=at),
    )


def with_exit_code(
    changed: tuple[ExecutionMetadata, int], exit_code: str | None
) -> tuple[ExecutionMetadata, int]:
    """``changed`` with ``exit_code`` stored too (validated as enrichment
    validates it), at the same version: part of the same write."""
    metadata, version = changed
    if exit_code is None:
        return changed
    enriched, _ = compare_and_enrich(metadata, version, version, exit_code)
    return enriched, version


def fenced_transition_with_exit(
    current: E,
    expected_version: int,
    transition: LifecycleTransition,
    exit_code: str | None,
    *,
    runtime_job: bool = True,
) -> tuple[ExecutionMetadata, int]:
    """A runtime's transition (:func:`~oxide_batch.domain.recovery.fenced_transition`,
    every refusal in its order) that also stores ``exit_code``: version + 1."""
    changed = fenced_transition(current, expected_version, transition, runtime_job=runtime_job)
    return with_exit_code(changed, exit_code)


def fenced_finishing_chunk(
    current: StepExecution,
    expected_version: int,
    counts: ExecutionCounts,
    finish: LifecycleTransition | None,
    exit_code: str | None,
) -> tuple[ExecutionMetadata, int]:
    """A chunk commit (:func:`~oxide_batch.domain.recovery.fenced_chunk`: the
    version, a STARTED step, the counts), then — with ``finish`` — the step's
    move to ``finish.target`` by the table, and ``exit_code``; one version step."""
    changed = fenced_chunk(current, expected_version, counts)
    if finish is None:
        return with_exit_code(changed, exit_code)
    metadata, version = changed
    ended, _ = compare_and_transition(metadata, version, version, finish)
    return with_exit_code((ended, version), exit_code)


@dataclass(frozen=True)
class WriteControl:
    """The execution's control state as a runtime write's answer carries it
    (contract §2.5.2: the chunk boundary's observation of control).

    ``owner_matches`` is ``None`` when the write carried no owner token (it
    says nothing about a token it was not given); ``fenced``: a recovery
    resolved the execution — its worker must stop.
    """

    stop_requested: bool
    owner_matches: bool | None
    fenced: bool

    @classmethod
    def of(
        cls,
        *,
        recorded_token: bytes | None,
        carried_token: bytes | None,
        stop_requested_at: datetime | None,
        recovery_decision_id: int | None,
    ) -> WriteControl:
        matches = None
        if carried_token is not None:
            matches = recorded_token is not None and hmac.compare_digest(
                recorded_token, carried_token
            )
        return cls(
            stop_requested=stop_requested_at is not None,
            owner_matches=matches,
            fenced=recovery_decision_id is not None,
        )
