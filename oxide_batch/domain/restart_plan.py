"""What a restart will do (issue 40, contract §2.3.6): for a FAILED or STOPPED
execution, step by step, what the instance's next attempt would do with the
newest earlier row of each step — decided by the rules the launch and step
creation apply, called here, not restated:

- the whole plan: :func:`~oxide_batch.domain.launch.plan_new_attempt` (the
  attempt's status, then the lost-write gate);
- each step: :func:`~oxide_batch.domain.flow.hold_to_start_limit` (the node's
  declared start limit, checked first, as step creation does), then
  :func:`~oxide_batch.domain.launch.step_takes_over` (the earlier row's status,
  the node's ``allow_start_if_complete``, a partition's rerun).

The plan assumes the next attempt keeps the execution's definition (a launch
without a digest does): a launch naming another definition would apply its
upgrade edge's mapping, which is not known before that launch (decision 322).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from oxide_batch.domain.errors import (
    LostWriteUnresolved,
    NotRestartable,
    OxideBatchError,
    StartLimitExceeded,
)
from oxide_batch.domain.execution import ExecutionCounts, JobExecution
from oxide_batch.domain.flow import (
    FlowNode,
    FlowPlan,
    NodeKind,
    allows_start_if_complete,
    effective_start_limit,
    hold_to_start_limit,
)
from oxide_batch.domain.launch import plan_new_attempt, step_takes_over
from oxide_batch.domain.status import BatchStatus

STEP_KINDS = frozenset({NodeKind.STEP, NodeKind.PARTITIONED_STEP})
#: The refusal of a plan asked for an attempt that is not its instance's latest.
SUPERSEDED = "superseded"


class PlanAction(enum.StrEnum):
    SKIP = "skip"
    RERUN = "rerun"
    RESUME = "resume"
    REFUSE = "refuse"
    RUN = "run"


@dataclass(frozen=True)
class EarlierStep:
    """The newest row of one step across the instance's attempts (what
    ``create_step_execution`` would take over), without its payloads.
    ``partition_rerun``: it is the worker of a partition that never completed."""

    id: int
    job_execution_id: int
    attempt: int
    step_name: str
    node_id: str
    status: BatchStatus
    counts: ExecutionCounts
    has_checkpoint: bool
    partition_rerun: bool = False


@dataclass(frozen=True)
class PlanRefusal:
    """Why no restart happens: the code the launch (or the step) would answer."""

    code: str
    detail: str


@dataclass(frozen=True)
class PlannedStep:
    """What the next attempt does with one step. ``source`` is the earlier row
    (``None`` for a node not reached); ``refusal`` the step's 409 when
    ``action`` is ``refuse``; ``checkpoint`` and ``counts`` what is taken over
    (``False`` / ``None`` unless it resumes)."""

    step_name: str
    node_id: str
    action: PlanAction
    reason: str
    source: EarlierStep | None = None
    refusal: PlanRefusal | None = None
    checkpoint: bool = False
    counts: ExecutionCounts | None = None


@dataclass(frozen=True)
class RestartPlan:
    execution_id: int
    refusal: PlanRefusal | None
    steps: tuple[PlannedStep, ...]
    unreached: tuple[PlannedStep, ...]

    @property
    def restartable(self) -> bool:
        return self.refusal is None


def _refusal(error: OxideBatchError) -> PlanRefusal:
    return PlanRefusal(code=error.code, detail=error.message)


def restart_plan(
    *,
    execution: JobExecution,
    latest: JobExecution,
    lost_write_of: int | None,
    earlier: Sequence[EarlierStep],
    flow: FlowPlan | None,
    starts: Mapping[str, int],
) -> RestartPlan:
    """The plan of ``execution``'s restart. ``latest`` is its instance's latest
    attempt; ``lost_write_of`` an execution of the instance with an unresolved
    marker; ``earlier`` the newest row per step name across the attempts;
    ``flow`` the execution's flow plan (``None`` without one); ``starts`` the
    step rows per node id across the instance. The launch is judged at the
    latest attempt's end, the earliest instant a restart may be made (a plan
    does not depend on the clock of whoever asks).

    Not the latest attempt → refused (``superseded``), no steps. A refusal of
    :func:`plan_new_attempt` other than the lost-write gate (COMPLETED,
    ABANDONED, active or UNKNOWN) → refused with its code, no steps. A
    lost-write marker refuses the whole plan but the steps are still listed:
    they are what the restart does once an operator resolved it.
    """
    if execution.id != latest.id:
        detail = (
            f"attempt {latest.attempt} (execution {latest.id}) is the instance's latest: "
            "a restart continues from it — ask its plan"
        )
        return RestartPlan(execution.id, PlanRefusal(SUPERSEDED, detail), (), ())
    refusal = None
    try:
        at = latest.ended_at or latest.created_at
        plan_new_attempt(execution.job_instance_id, latest, at, lost_write_of=lost_write_of)
    except LostWriteUnresolved as gate:
        refusal = _refusal(gate)
    except OxideBatchError as refused:
        return RestartPlan(execution.id, _refusal(refused), (), ())
    nodes = {} if flow is None else flow.nodes
    steps = tuple(
        planned_step(
            row,
            instance_id=execution.job_instance_id,
            node=nodes.get(row.node_id),
            starts=starts.get(row.node_id, 0),
        )
        for row in earlier
    )
    reached = {row.node_id for row in earlier}
    unreached = tuple(
        PlannedStep(node.step, node.id, PlanAction.RUN, "not reached: it runs from the start")
        for node in nodes.values()
        if node.kind in STEP_KINDS and node.id not in reached
    )
    return RestartPlan(execution.id, refusal, steps, unreached)


def planned_step(
    row: EarlierStep, *, instance_id: int, node: FlowNode | None, starts: int
) -> PlannedStep:
    """What a step created with ``row``'s name and node does in the next
    attempt, by step creation's order: the node's declared start limit, then
    the earlier row's status (:func:`step_takes_over`)."""
    limit = effective_start_limit(None if node is None else node.start_limit, None)
    plain = PlannedStep(row.step_name, row.node_id, PlanAction.SKIP, "", row)
    try:
        hold_to_start_limit(
            instance_id=instance_id, node_id=row.node_id, limit=limit, starts=starts
        )
        allow = allows_start_if_complete(node, False)
        takes_over = step_takes_over(
            row.status,
            step_name=row.step_name,
            earlier_id=row.id,
            allow_start_if_complete=allow,
            partition_rerun=row.partition_rerun,
        )
    except StartLimitExceeded as exhausted:
        reason = f"start limit reached: node {row.node_id} started {starts} of {limit} times"
        return _with(plain, PlanAction.REFUSE, reason, _refusal(exhausted))
    except NotRestartable as refused:
        if row.status is BatchStatus.UNKNOWN:
            reason = "UNKNOWN in an earlier attempt: refused until an operator resolves it"
            return _with(plain, PlanAction.REFUSE, reason, _refusal(refused))
        return _with(plain, PlanAction.SKIP, _skip_reason(row))
    if not takes_over:
        return _with(plain, PlanAction.RERUN, _rerun_reason(row, allow))
    return PlannedStep(
        row.step_name,
        row.node_id,
        PlanAction.RESUME,
        _resume_reason(row),
        row,
        checkpoint=row.has_checkpoint,
        counts=row.counts,
    )


def _with(
    plain: PlannedStep, action: PlanAction, reason: str, refusal: PlanRefusal | None = None
) -> PlannedStep:
    return PlannedStep(plain.step_name, plain.node_id, action, reason, plain.source, refusal)


def _skip_reason(row: EarlierStep) -> str:
    if row.status is BatchStatus.ABANDONED:
        return f"abandoned in attempt {row.attempt}: a restart skips it"
    return f"completed in attempt {row.attempt}: a restart skips it"


def _rerun_reason(row: EarlierStep, allow: bool) -> str:
    if allow:
        return (
            f"completed in attempt {row.attempt}, but its node allows a start if complete: "
            "it runs again from the start, nothing taken over"
        )
    return (
        f"the worker of a partition that never completed (attempt {row.attempt}): "
        "it runs again from the start, nothing taken over"
    )


def _resume_reason(row: EarlierStep) -> str:
    if row.status in (BatchStatus.FAILED, BatchStatus.STOPPED):
        left = row.status.value.lower()
    else:
        left = f"left {row.status.value} by an attempt that ended"
    source = "from its checkpoint" if row.has_checkpoint else "from the start (no checkpoint)"
    return (
        f"{left} in attempt {row.attempt}: it resumes {source}, "
        f"{row.counts.read} read and {row.counts.written} written carried"
    )
