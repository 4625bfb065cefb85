"""Flow steps and flow decisions (format-2/3 plans) in the Django adapter.

contract §2.3.4, §2.3.5. Locks follow the repository order: instance,
then job execution. Every operation issues a fixed number of statements:

- ``create_flow_step_execution``: lock instance, lock job execution, one read
  of the node's start count (and, in a restart attempt, the newest row of the
  node), one insert — 4; over a COMPLETED earlier row the node does not allow
  to start again, one more read (its partitions), and no insert when refused;
- ``append_flow_decision``: lock job execution with its definition, one read of
  the execution's decision history (count, last sequence, source already used,
  source step and reused decision checks), one insert — 3;
- ``latest_flow_step``, ``find_reusable_flow_decision``, ``flow_decisions``: 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import Count, Exists, IntegerField, Max, OuterRef, Q, Subquery, Value
from django.db.models.expressions import BaseExpression, Window
from django.db.models.functions import Coalesce

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain import events
from oxide_batch.domain.definitions import FLOW_FORMATS
from oxide_batch.domain.errors import (
    ConcurrentModification,
    DomainError,
    FlowStateCorrupt,
    InvalidCharacters,
    InvalidStartLimit,
    InvalidState,
    JobExecutionNotFound,
)
from oxide_batch.domain.execution import StepExecution
from oxide_batch.domain.flow import (
    DIGEST_HEX,
    MAX_START_LIMIT,
    FlowDecision,
    FlowDecisionRequest,
    FlowTarget,
    FlowTransitionKind,
    TerminalKind,
    check_decision_against_plan,
    hold_to_start_limit,
)
from oxide_batch.domain.names import IdentifierKind, NameKind, validate_name, validate_new_name
from oxide_batch.domain.status import BatchStatus
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.repository.plans import (
    node_allows_start_if_complete,
    node_start_limit,
    stored_plan,
)
from oxide_batch.repository.records import STEP_EXECUTION_COLUMNS, step_execution_from_row
from oxide_batch.repository.steps import TAKEOVER_COLUMNS, StepOperations
from oxide_batch.repository.unit_of_work import operation

JOB_INSTANCE = IdentifierKind.JOB_INSTANCE
JOB_EXECUTION = IdentifierKind.JOB_EXECUTION
STEP_EXECUTION = IdentifierKind.STEP_EXECUTION
FLOW_DECISION = IdentifierKind.FLOW_DECISION
FLOW_DECISION_COLUMNS = (
    "id",
    "job_execution_id",
    "sequence",
    "source_node_id",
    "source_step_execution_id",
    "kind",
    "observed_outcome",
    "target_node_id",
    "terminal",
    "plan_fingerprint",
    "input_digest",
    "reused_decision_id",
    "decided_at",
)


def _digest(value: str, what: str) -> str:
    if not isinstance(value, str) or DIGEST_HEX.fullmatch(value) is None:
        raise InvalidCharacters(kind=what, allowed="64 lowercase hex characters")
    return value


def _target_filter(target: FlowTarget) -> Q:
    """Rows whose stored target is exactly ``target``."""
    if target.node is not None:
        return Q(target_node_id=target.node, terminal__isnull=True)
    assert target.terminal is not None
    return Q(terminal=TerminalKind(target.terminal).value, target_node_id__isnull=True)


def flow_decision_from_row(row: Mapping[str, Any]) -> FlowDecision:
    """A stored decision, checked: a non-positive sequence, a bad node id or exit
    code, an unknown kind or terminal, both or neither target, or a digest that is
    not 64 hex characters → ``FlowStateCorrupt`` (fail closed, never guess)."""
    try:
        sequence = row["sequence"]
        if not isinstance(sequence, int) or sequence < 1:
            raise FlowStateCorrupt()
        node, terminal = row["target_node_id"], row["terminal"]
        if (node is None) == (terminal is None):
            raise FlowStateCorrupt()
        target = (
            FlowTarget(node=validate_name(node, NameKind.NODE))
            if node is not None
            else FlowTarget(terminal=TerminalKind(terminal))
        )
        for column in ("plan_fingerprint", "input_digest"):
            if not isinstance(row[column], str) or DIGEST_HEX.fullmatch(row[column]) is None:
                raise FlowStateCorrupt()
        return FlowDecision(
            id=row["id"],
            job_execution_id=row["job_execution_id"],
            sequence=sequence,
            source_node_id=validate_name(row["source_node_id"], NameKind.NODE),
            source_step_execution_id=row["source_step_execution_id"],
            kind=FlowTransitionKind(row["kind"]),
            observed_outcome=validate_name(row["observed_outcome"], NameKind.EXIT_CODE),
            target=target,
            plan_fingerprint=row["plan_fingerprint"],
            input_digest=row["input_digest"],
            reused_decision_id=row["reused_decision_id"],
            decided_at=row["decided_at"],
        )
    except (DomainError, ValueError, TypeError):
        raise FlowStateCorrupt() from None


class FlowOperations(StepOperations):
    """Flow step starts (start limits, takeover on restart) and the append-only
    flow decision log of format-2/3 executions."""

    @operation
    def create_flow_step_execution(
        self,
        job_execution_id: int,
        step_name: str,
        node_id: str,
        start_limit: int | None = None,
        *,
        allow_start_if_complete: bool = False,
        started: bool = False,
        worker: WorkerIdentity | None = None,
    ) -> StepExecution:
        """A STARTING step (version 0) for plan node ``node_id``, under its start limit;
        ``started``: STARTED at once (version 1, :meth:`create_step_execution`).

        Locks the instance row (``FOR NO KEY UPDATE``, found through the
        execution; none → ``JobExecutionNotFound``), then the job execution
        (``InvalidState`` unless STARTING/STARTED). Counts every step row of
        ``node_id`` across all executions of the instance; a count at or above
        the limit → ``StartLimitExceeded`` (creating a STARTING row consumes
        one start). The limit is the manifest node's ``start_limit`` when the
        execution's definition is a flow plan naming the node; ``start_limit``
        may only lower it (``None`` on both sides = unlimited). In a restart
        attempt the step takes over counts, checkpoint and context of the
        newest row of the node anywhere in the instance (unless that row is
        this execution's own: a repeated node) when that row is restartable, else it starts fresh
        (``create_step_execution``'s rules: a COMPLETED row is ``NotRestartable``
        unless the node allows a start if complete — the manifest node's own
        ``allow_start_if_complete`` when the execution's definition is a flow
        plan with that node, else ``allow_start_if_complete``); a checkpoint or
        context to take over that does not verify → ``FaultStateCorrupt`` (no row). A repeated step
        name or node in the execution → ``StepExecutionExists``; a lock or
        serialization conflict → ``ConcurrentModification``. ``start_limit`` must
        be a positive integer (``TypeError``/``ValueError`` otherwise: the caller
        validates the plan).
        """
        validate_new_name(step_name, NameKind.STEP)
        node = validate_new_name(node_id, NameKind.NODE)
        if start_limit is not None:
            if isinstance(start_limit, bool) or not isinstance(start_limit, int):
                raise TypeError("start_limit must be an int or None")
            if not 1 <= start_limit <= MAX_START_LIMIT:
                raise InvalidStartLimit(maximum=MAX_START_LIMIT)
        parent_id = self._id(JOB_EXECUTION, job_execution_id)
        instance_id = self._lock_instance_of(parent_id)
        parent = self._lock_step_parent(parent_id)
        restart = parent["restart_of_id"] is not None
        start_limit = node_start_limit(parent, node, start_limit)
        # One read: the node's start count over the instance (a window over all
        # rows, so the LIMIT does not cut it) and, on restart, the newest row.
        newest = list(
            models.StepExecution.objects.using(self._using)
            .filter(job_instance_id=instance_id, node_id=node)
            .annotate(starts=Window(Count("id")))
            .order_by("-id")
            .values(
                "starts",
                *(("id", "job_execution_id", "status", *TAKEOVER_COLUMNS) if restart else ()),
            )[:1]
        )
        starts = newest[0]["starts"] if newest else 0
        hold_to_start_limit(instance_id=instance_id, node_id=node, limit=start_limit, starts=starts)
        source = None
        # A newest row of this very execution is no earlier state: the node is
        # repeated, which the insert refuses (StepExecutionExists).
        if restart and newest and newest[0]["job_execution_id"] != parent_id:
            allow = node_allows_start_if_complete(parent, node, allow_start_if_complete)
            source = self._takeover(step_name, newest[0], allow)
        return self._insert_step(
            parent_id, parent, step_name, node, source, started=started, worker=worker
        )

    def _lock_instance_of(self, job_execution_id: int) -> int:
        """Lock the instance of a job execution (``FOR NO KEY UPDATE``); its id."""
        execution = models.JobExecution.objects.using(self._using).filter(pk=job_execution_id)
        instance_id: int | None = (
            models.JobInstance.objects.using(self._using)
            .select_for_update(no_key=True)
            .filter(pk=Subquery(execution.values("job_instance_id")[:1]))
            .values_list("id", flat=True)
            .first()
        )
        if instance_id is None:
            raise JobExecutionNotFound(id=job_execution_id)
        return instance_id

    @operation
    def latest_flow_step(self, job_instance_id: int, node_id: str) -> StepExecution | None:
        """The newest step row of ``node_id`` in the instance (any execution), if any."""
        pk = self._id(JOB_INSTANCE, job_instance_id)
        node = validate_name(node_id, NameKind.NODE)
        row = (
            models.StepExecution.objects.using(self._using)
            .filter(job_instance_id=pk, node_id=node)
            .order_by("-id")
            .values(*STEP_EXECUTION_COLUMNS)
            .first()
        )
        return None if row is None else step_execution_from_row(row)

    @operation
    def append_flow_decision(self, request: FlowDecisionRequest) -> FlowDecision:
        """Append the next decision of a job execution; the server assigns the sequence.

        Locks the job execution (``FOR NO KEY UPDATE``, read with its definition;
        none → ``JobExecutionNotFound``), so sequence = existing count + 1 is
        gap-free. ``ExecutionOwned`` when another runtime user claimed it;
        ``InvalidState`` unless it is STARTING, STARTED or STOPPING (a
        finished or recovered execution takes no late decision).
        ``FlowStateCorrupt`` when: the definition is not a format-2/3 plan; the
        decision disagrees with it (fingerprint ≠ manifest digest,
        source node missing or of a kind that does not fit, the most specific
        matching transition leads elsewhere, a step-sourced kind without a source
        step); the source step is of another instance or node; the reused
        decision is of another instance or differs in source node, fingerprint,
        input digest, observed outcome or target; the source node already decided
        in this execution; or the stored history has a gap. A lost insert race →
        ``ConcurrentModification``.
        """
        pk = self._id(JOB_EXECUTION, request.job_execution_id)
        step_id = request.source_step_execution_id
        reused_id = request.reused_decision_id
        if step_id is not None:
            self._id(STEP_EXECUTION, step_id)
        if reused_id is not None:
            self._id(FLOW_DECISION, reused_id)
        execution = (
            models.JobExecution.objects.using(self._using)
            .select_for_update(no_key=True, of=("self",))
            .filter(pk=pk)
            .values(
                "job_instance_id",
                "status",
                "owner_user_id",
                "owner_token",
                "stop_requested_at",
                "recovery_decision_id",
                "definition__manifest",
                "definition__manifest_digest",
                "definition__manifest_format",
            )
            .first()
        )
        if execution is None:
            raise JobExecutionNotFound(id=pk)
        self._claimed_by(pk, execution)
        status = BatchStatus(execution["status"])
        if not status.is_active:
            # A finished (or recovered) execution's flow is history: no late decision.
            raise InvalidState(id=pk, status=status)
        if execution["definition__manifest_format"] not in FLOW_FORMATS:
            raise FlowStateCorrupt()
        plan = stored_plan(execution["definition__manifest"])
        check_decision_against_plan(plan, execution["definition__manifest_digest"], request)
        history = self._decision_history(pk, request)
        if (
            history["last_sequence"] != history["decision_count"]
            or history["source_used"]
            or not history["source_step_fits"]
            or not history["reused_fits"]
        ):
            raise FlowStateCorrupt()
        sequence = history["decision_count"] + 1
        decided_at = self.now()
        target = request.target
        terminal = None if target.terminal is None else TerminalKind(target.terminal).value
        new_id = self._insert_unless_conflict(
            models.FlowDecision,
            {
                "job_instance": execution["job_instance_id"],
                "job_execution": pk,
                "sequence": sequence,
                "source_node_id": request.source_node_id,
                "source_step_execution": step_id,
                "kind": FlowTransitionKind(request.kind).value,
                "observed_outcome": request.observed_outcome,
                "target_node_id": target.node,
                "terminal": terminal,
                "plan_fingerprint": request.plan_fingerprint,
                "input_digest": request.input_digest,
                "reused_decision": reused_id,
                "decided_at": decided_at,
            },
        )
        if new_id is None:
            raise ConcurrentModification()
        decision = FlowDecision(
            id=new_id,
            job_execution_id=pk,
            sequence=sequence,
            source_node_id=request.source_node_id,
            source_step_execution_id=step_id,
            kind=FlowTransitionKind(request.kind),
            observed_outcome=request.observed_outcome,
            target=target,
            plan_fingerprint=request.plan_fingerprint,
            input_digest=request.input_digest,
            reused_decision_id=reused_id,
            decided_at=decided_at,
        )
        self._record(events.FlowDecisionAppended(decision=decision, actor=self._actor))
        return decision

    def _decision_history(self, execution_id: int, request: FlowDecisionRequest) -> dict[str, Any]:
        """One read, after the execution lock (so it sees every committed decision):
        the decision count and last sequence, whether the source node already
        decided, and whether the source step and the reused decision fit."""
        using = self._using
        decisions = (
            models.FlowDecision.objects.using(using)
            .filter(job_execution_id=OuterRef("pk"))
            .order_by()
            .values("job_execution_id")
        )
        step_id, reused_id = request.source_step_execution_id, request.reused_decision_id
        fits: dict[str, BaseExpression] = {
            "source_step_fits": Value(True),
            "reused_fits": Value(True),
        }
        if step_id is not None:
            fits["source_step_fits"] = Exists(
                models.StepExecution.objects.using(using).filter(
                    pk=step_id,
                    job_instance_id=OuterRef("job_instance_id"),
                    node_id=request.source_node_id,
                )
            )
        if reused_id is not None:
            fits["reused_fits"] = Exists(
                models.FlowDecision.objects.using(using).filter(
                    _target_filter(request.target),
                    pk=reused_id,
                    job_instance_id=OuterRef("job_instance_id"),
                    source_node_id=request.source_node_id,
                    plan_fingerprint=request.plan_fingerprint,
                    input_digest=request.input_digest,
                    observed_outcome=request.observed_outcome,
                )
            )
        row: dict[str, Any] | None = (
            models.JobExecution.objects.using(using)
            .filter(pk=execution_id)
            .annotate(
                decision_count=Coalesce(
                    Subquery(decisions.annotate(n=Count("id")).values("n")),
                    Value(0),
                    output_field=IntegerField(),
                ),
                last_sequence=Coalesce(
                    Subquery(decisions.annotate(m=Max("sequence")).values("m")),
                    Value(0),
                    output_field=IntegerField(),
                ),
                source_used=Exists(
                    models.FlowDecision.objects.using(using).filter(
                        job_execution_id=OuterRef("pk"), source_node_id=request.source_node_id
                    )
                ),
                **fits,
            )
            .values("decision_count", "last_sequence", "source_used", *fits)
            .first()
        )
        assert row is not None, "the locked execution must be visible"
        return row

    @operation
    def find_reusable_flow_decision(
        self,
        job_instance_id: int,
        node_id: str,
        plan_fingerprint: str,
        input_digest: str,
        kind: FlowTransitionKind,
    ) -> FlowDecision | None:
        """The newest decision of the instance with this source node, fingerprint,
        input digest and kind (newest execution first, then highest sequence)."""
        pk = self._id(JOB_INSTANCE, job_instance_id)
        node = validate_name(node_id, NameKind.NODE)
        row = (
            models.FlowDecision.objects.using(self._using)
            .filter(
                job_instance_id=pk,
                source_node_id=node,
                plan_fingerprint=_digest(plan_fingerprint, "plan_fingerprint"),
                input_digest=_digest(input_digest, "input_digest"),
                kind=FlowTransitionKind(kind).value,
            )
            .order_by("-job_execution_id", "-sequence")
            .values(*FLOW_DECISION_COLUMNS)
            .first()
        )
        return None if row is None else flow_decision_from_row(row)

    @operation
    def flow_decisions(self, job_execution_id: int) -> list[FlowDecision]:
        """The execution's decisions in sequence order (``FlowStateCorrupt`` for an
        unreadable row)."""
        pk = self._id(JOB_EXECUTION, job_execution_id)
        rows = (
            models.FlowDecision.objects.using(self._using)
            .filter(job_execution_id=pk)
            .order_by("sequence", "id")
            .values(*FLOW_DECISION_COLUMNS)
        )
        return [flow_decision_from_row(row) for row in rows]
