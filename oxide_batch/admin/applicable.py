"""Which operator action applies to which row, and why not in words.

The console offers an action only where the services could apply it; the rules
are the services' and the domain's, read from their tables, not restated:

- **Recover** — the recovery proposal is eligible: UNKNOWN always, STARTING/
  STARTED/STOPPING once the owner's lease expired, or without an owner when
  inactive longer than the stale threshold
  (:func:`oxide_batch.domain.evidence.propose_recovery`). An active execution
  that is not stale yet is not offered, but the recover page may still take
  it with the operator's explicit override (:func:`recovery_overridable`).
- **Abandon** — the status is in
  :data:`oxide_batch.domain.lifecycle.ABANDONABLE` (the lifecycle table's
  sources of ABANDONED, without UNKNOWN, which only a recovery abandons).
- **Request stop** — a stop records who/when (STARTING, STARTED:
  :data:`~oxide_batch.domain.evidence.STOP_RECORDABLE`) and none is requested yet.
- **Place a hold** — the instance has no hold; **Release the hold** — it has one.

A row is a model instance, a ``values()`` dict, or a domain view with the same
names (``status``, ``stop_requested_at``, ``hold_placed_at`` …). Nothing here
checks permissions: the caller filters by the action's ``permission``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone

from oxide_batch.admin.display import human
from oxide_batch.domain.errors import ExecutionNotStale
from oxide_batch.domain.evidence import STOP_RECORDABLE, RecoveryProposal
from oxide_batch.domain.lifecycle import ABANDONABLE
from oxide_batch.domain.status import UNRESOLVED_STATUSES, BatchStatus
from oxide_batch.roles import (
    ABANDON_EXECUTION,
    HOLD_INSTANCE,
    RECOVER_EXECUTION,
    STOP_EXECUTION,
)
from oxide_batch.services import bootstrap

S = BatchStatus


@dataclass(frozen=True)
class ActionSpec:
    name: str
    label: str
    model: str
    permission: str
    reason: bool = False
    versioned: bool = True


EXECUTION_ACTIONS = {
    "recover": ActionSpec(
        "recover", "Recover (mark failed or abandon)", "jobexecution", RECOVER_EXECUTION, True
    ),
    "abandon": ActionSpec("abandon", "Abandon", "jobexecution", ABANDON_EXECUTION, True),
    "stop": ActionSpec("stop", "Request stop", "jobexecution", STOP_EXECUTION),
}
INSTANCE_ACTIONS = {
    "hold": ActionSpec("hold", "Place a retention hold", "jobinstance", HOLD_INSTANCE, True, False),
    "release": ActionSpec(
        "release", "Release the retention hold", "jobinstance", HOLD_INSTANCE, True, False
    ),
}


@dataclass(frozen=True)
class ActionChoice:
    """One action for one row: whether it applies, and if not, why in words
    (``not eligible: …`` for a recovery proposal, ``not applicable: …`` else)."""

    spec: ActionSpec
    why_not: str | None = None
    proposal: RecoveryProposal | None = None

    @property
    def applies(self) -> bool:
        return self.why_not is None


def _get(row: Any, name: str, default: Any = None) -> Any:
    if isinstance(row, Mapping):
        return row.get(name, default)
    return getattr(row, name, default)


def _pk(row: Any) -> int:
    return int(_get(row, "id") or _get(row, "pk"))


def _status(row: Any) -> BatchStatus:
    return BatchStatus(str(_get(row, "status")))


def is_instance_row(row: Any) -> bool:
    """An instance row has hold columns and no status."""
    absent = object()
    return _get(row, "hold_placed_at", absent) is not absent and _get(row, "status") is None


# -- why not, in words --------------------------------------------------------------


OVERRIDE_HINT = (
    "if its worker is gone, an operator may recover it now with the override (a note is required)"
)


def recovery_overridable(proposal: RecoveryProposal | None) -> bool:
    """Whether only the operator's override stands between the proposal and a
    recovery (contract §2.5.5): an active execution that is not stale yet — its
    owner's lease is held, or it has not been inactive long enough. Any other
    ineligible execution (finished) is never recovered, override or not."""
    return proposal is not None and proposal.reason_code == ExecutionNotStale.code


def recovery_why_not(proposal: RecoveryProposal) -> str | None:
    """``None`` for an eligible proposal, else its reason code as a sentence;
    an execution that is not stale yet says until when (the lease's expiry for
    an owned one, the end of the stale threshold else) and that the override
    may recover it now."""
    if proposal.eligible:
        return None
    status = proposal.evidence.status.value
    if recovery_overridable(proposal):
        # The proposal's clock instant is its evidence's activity + inactivity.
        remaining = proposal.threshold - proposal.inactive_for
        until = (proposal.evidence.activity_at + proposal.threshold).astimezone(UTC)
        at = f"{until:%Y-%m-%d %H:%M:%S} UTC (in {human(remaining)})"
        if proposal.rule == "lease":
            why = (
                f"lease held until {at}, its owner last active "
                f"{human(proposal.inactive_for)} ago (lease {human(proposal.threshold)})"
            )
        else:
            why = (
                f"inactive for only {human(proposal.inactive_for)} of the "
                f"{human(proposal.threshold)} threshold, no owner recorded: stale after {at}"
            )
        return f"not eligible: the execution is still active ({status}) — {why}; {OVERRIDE_HINT}"
    return _not_recoverable(proposal.evidence.status)


def _not_recoverable(status: BatchStatus) -> str:
    return (
        f"not eligible: the execution is {status.value} — recovery applies only to an "
        "active (STARTING, STARTED, STOPPING) or UNKNOWN execution"
    )


def abandon_why_not(status: BatchStatus) -> str | None:
    if status in ABANDONABLE:
        return None
    if status is S.ABANDONED:
        return "not applicable: the execution is ABANDONED already"
    if status is S.UNKNOWN:
        return (
            "not applicable: an UNKNOWN execution is abandoned through Recover "
            "(disposition ABANDON), which records the evidence it was decided on"
        )
    allowed = " or ".join(sorted(s.value for s in ABANDONABLE))
    hint = "; request a stop first" if status.is_active else ""
    return (
        f"not applicable: the execution is {status.value} — only a {allowed} "
        f"execution can be abandoned{hint}"
    )


def stop_why_not(
    status: BatchStatus,
    stop_requested_at: datetime | None,
    stop_requested_by: str | None = None,
    now: datetime | None = None,
) -> str | None:
    if status in STOP_RECORDABLE:
        if stop_requested_at is None:
            return None
        ago = human((now or timezone.now()) - stop_requested_at)
        by = f" by {stop_requested_by}" if stop_requested_by else ""
        return (
            f"not applicable: a stop is already requested{by} {ago} ago — the runtime "
            "stops at its next control observation"
        )
    if status is S.STOPPING:
        return "not applicable: the execution is STOPPING already"
    if status is S.UNKNOWN:
        return (
            "not applicable: the execution is UNKNOWN — no runtime answers a stop; "
            "recover it instead"
        )
    return f"not applicable: the execution has finished ({status.value})"


def hold_why_not(row: Any, *, release: bool) -> str | None:
    held = _get(row, "hold_placed_at") is not None
    if release:
        return None if held else "not applicable: the instance has no hold"
    if not held:
        return None
    return (
        f"not applicable: the instance is held already (by {_get(row, 'hold_actor')}, "
        f"{_get(row, 'hold_reason_code')})"
    )


# -- the choices of a row ---------------------------------------------------------


def execution_choices(
    row: Any,
    *,
    proposal: RecoveryProposal | None = None,
    read_proposal: bool = True,
    now: datetime | None = None,
) -> list[ActionChoice]:
    """Recover, abandon and stop for one execution row. An unresolved row's
    recovery needs its proposal: pass it (see :func:`proposals_for`), else it is
    read here (one unit of work, one statement) unless ``read_proposal`` is false."""
    status = _status(row)
    if status in UNRESOLVED_STATUSES and proposal is None and read_proposal:
        proposal = bootstrap.operator_service().propose(_pk(row))
    if status not in UNRESOLVED_STATUSES:
        recover: str | None = _not_recoverable(status)
    elif proposal is None:
        recover = "not eligible: no recovery proposal could be read (the execution is gone)"
    else:
        recover = recovery_why_not(proposal)
    stop = stop_why_not(status, _get(row, "stop_requested_at"), _get(row, "stop_requested_by"), now)
    return [
        ActionChoice(EXECUTION_ACTIONS["recover"], recover, proposal),
        ActionChoice(EXECUTION_ACTIONS["abandon"], abandon_why_not(status)),
        ActionChoice(EXECUTION_ACTIONS["stop"], stop),
    ]


def instance_choices(row: Any) -> list[ActionChoice]:
    return [
        ActionChoice(INSTANCE_ACTIONS["hold"], hold_why_not(row, release=False)),
        ActionChoice(INSTANCE_ACTIONS["release"], hold_why_not(row, release=True)),
    ]


def action_choices(row: Any, *, proposal: RecoveryProposal | None = None) -> list[ActionChoice]:
    """Every action of the row's kind (instance or execution), each with
    whether it applies and why not."""
    if is_instance_row(row):
        return instance_choices(row)
    return execution_choices(row, proposal=proposal)


def applicable_actions(row: Any, *, proposal: RecoveryProposal | None = None) -> list[ActionSpec]:
    """The actions that apply to ``row`` now, in the console's order."""
    return [choice.spec for choice in action_choices(row, proposal=proposal) if choice.applies]


def proposals_for(rows: Iterable[Any]) -> dict[int, RecoveryProposal]:
    """The recovery proposals of the unresolved execution rows among ``rows``,
    read together (:meth:`OperatorService.propose_many`: one statement)."""
    wanted = [_pk(row) for row in rows if _status(row) in UNRESOLVED_STATUSES]
    if not wanted:
        return {}
    return bootstrap.operator_service().propose_many(wanted)


def action_choices_many(rows: Iterable[Any]) -> dict[int, list[ActionChoice]]:
    """:func:`action_choices` for many rows of one kind in a bounded number of
    queries (a list page, the dashboard), keyed by id."""
    items = list(rows)
    if items and is_instance_row(items[0]):
        return {_pk(row): instance_choices(row) for row in items}
    proposals = proposals_for(items)
    now = timezone.now()
    return {
        _pk(row): execution_choices(
            row, proposal=proposals.get(_pk(row)), read_proposal=False, now=now
        )
        for row in items
    }
