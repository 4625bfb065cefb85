"""Flow steps and the flow's decisions in the fake (the port's ``Flow``)."""

from __future__ import annotations

from oxide_batch.domain.errors import (
    FlowStateCorrupt,
    InvalidCharacters,
    InvalidStartLimit,
    InvalidState,
    StartLimitExceeded,
)
from oxide_batch.domain.execution import StepExecution
from oxide_batch.domain.flow import (
    DIGEST_HEX,
    MAX_START_LIMIT,
    FlowDecision,
    FlowDecisionRequest,
    FlowTransitionKind,
    check_decision_against_plan,
    effective_start_limit,
)
from oxide_batch.domain.names import IdentifierKind, NameKind, validate_identifier, validate_name
from oxide_batch.domain.worker import WorkerIdentity
from tests.fakes.definitions import flow_plan
from tests.fakes.steps import StepOperations
from tests.fakes.tables import DecisionRow, by_id

JOB_INSTANCE = IdentifierKind.JOB_INSTANCE
JOB_EXECUTION = IdentifierKind.JOB_EXECUTION


def _digest(value: str, what: str) -> str:
    if not isinstance(value, str) or DIGEST_HEX.fullmatch(value) is None:
        raise InvalidCharacters(kind=what, allowed="64 lowercase hex characters")
    return value


class FlowOperations(StepOperations):
    """Flow steps and the flow's decisions in the fake (the port's ``Flow``)."""

    # -- Flow -----------------------------------------------------------------------

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
        validate_name(step_name, NameKind.STEP)
        node = validate_name(node_id, NameKind.NODE)
        if start_limit is not None:
            if isinstance(start_limit, bool) or not isinstance(start_limit, int):
                raise TypeError("start_limit must be an int or None")
            if not 1 <= start_limit <= MAX_START_LIMIT:
                raise InvalidStartLimit(maximum=MAX_START_LIMIT)
        parent = self._step_parent(job_execution_id)
        plan = flow_plan(self._open(), parent)
        declared = None if plan is None else plan.nodes.get(node)
        limit = effective_start_limit(
            None if declared is None else declared.start_limit, start_limit
        )
        rows = [
            s
            for s in self._open().steps.values()
            if s.job_instance_id == parent.job_instance_id and s.node_id == node
        ]
        if limit is not None and len(rows) >= limit:
            raise StartLimitExceeded(instance_id=parent.job_instance_id, node_id=node, limit=limit)
        source = None
        newest = max(rows, key=by_id, default=None)
        # A newest row of this very execution is no earlier state: the node is
        # repeated, which the insert refuses (StepExecutionExists).
        if parent.restart_of_id is not None and newest and newest.job_execution_id != parent.id:
            allow = (
                allow_start_if_complete if declared is None else declared.allow_start_if_complete
            )
            source = self._takeover(step_name, newest, allow)
        return self._insert_step(parent, step_name, node, source, started=started, worker=worker)

    def latest_flow_step(self, job_instance_id: int, node_id: str) -> StepExecution | None:
        pk = validate_identifier(JOB_INSTANCE, job_instance_id)
        node = validate_name(node_id, NameKind.NODE)
        rows = self._open().steps.values()
        return max(
            (s for s in rows if s.job_instance_id == pk and s.node_id == node),
            key=by_id,
            default=None,
        )

    def append_flow_decision(self, request: FlowDecisionRequest) -> FlowDecision:
        pk = validate_identifier(JOB_EXECUTION, request.job_execution_id)
        step_id, reused_id = request.source_step_execution_id, request.reused_decision_id
        if step_id is not None:
            validate_identifier(IdentifierKind.STEP_EXECUTION, step_id)
        if reused_id is not None:
            validate_identifier(IdentifierKind.FLOW_DECISION, reused_id)
        row = self._execution(pk)
        self._check_claimant(row)
        execution, tables = row.execution, self._open()
        if not execution.status.is_active:
            # A finished (or recovered) execution's flow is history: no late decision.
            raise InvalidState(id=pk, status=execution.status)
        plan = flow_plan(tables, execution)
        if plan is None:
            raise FlowStateCorrupt()
        digest = tables.definitions[execution.definition_id].definition.digest
        check_decision_against_plan(plan, digest, request)
        history = [d.decision for d in tables.flow_decisions.values()]
        history = [d for d in history if d.job_execution_id == pk]
        instance_id = execution.job_instance_id
        if (
            max((d.sequence for d in history), default=0) != len(history)
            or any(d.source_node_id == request.source_node_id for d in history)
            or not self._source_step_fits(instance_id, request)
            or not self._reused_fits(instance_id, request)
        ):
            raise FlowStateCorrupt()
        decision = FlowDecision(
            id=self._repository.next_id("flow_decisions"),
            job_execution_id=pk,
            sequence=len(history) + 1,
            source_node_id=request.source_node_id,
            source_step_execution_id=step_id,
            kind=FlowTransitionKind(request.kind),
            observed_outcome=request.observed_outcome,
            target=request.target,
            plan_fingerprint=request.plan_fingerprint,
            input_digest=request.input_digest,
            reused_decision_id=reused_id,
            decided_at=self.now(),
        )
        tables.flow_decisions[decision.id] = DecisionRow(decision, instance_id)
        return decision

    def _source_step_fits(self, instance_id: int, request: FlowDecisionRequest) -> bool:
        if request.source_step_execution_id is None:
            return True
        step = self._open().steps.get(request.source_step_execution_id)
        return (
            step is not None
            and step.job_instance_id == instance_id
            and step.node_id == request.source_node_id
        )

    def _reused_fits(self, instance_id: int, request: FlowDecisionRequest) -> bool:
        if request.reused_decision_id is None:
            return True
        row = self._open().flow_decisions.get(request.reused_decision_id)
        if row is None or row.job_instance_id != instance_id:
            return False
        reused = row.decision
        return (
            reused.source_node_id,
            reused.plan_fingerprint,
            reused.input_digest,
            reused.observed_outcome,
            reused.target,
        ) == (
            request.source_node_id,
            request.plan_fingerprint,
            request.input_digest,
            request.observed_outcome,
            request.target,
        )

    def find_reusable_flow_decision(
        self,
        job_instance_id: int,
        node_id: str,
        plan_fingerprint: str,
        input_digest: str,
        kind: FlowTransitionKind,
    ) -> FlowDecision | None:
        pk = validate_identifier(JOB_INSTANCE, job_instance_id)
        wanted = (
            validate_name(node_id, NameKind.NODE),
            _digest(plan_fingerprint, "plan_fingerprint"),
            _digest(input_digest, "input_digest"),
            FlowTransitionKind(kind),
        )
        found = [
            row.decision
            for row in self._open().flow_decisions.values()
            if row.job_instance_id == pk
            and (
                row.decision.source_node_id,
                row.decision.plan_fingerprint,
                row.decision.input_digest,
                row.decision.kind,
            )
            == wanted
        ]
        return max(found, key=lambda d: (d.job_execution_id, d.sequence), default=None)

    def flow_decisions(self, job_execution_id: int) -> list[FlowDecision]:
        pk = validate_identifier(JOB_EXECUTION, job_execution_id)
        rows = self._open().flow_decisions.values()
        return sorted(
            (r.decision for r in rows if r.decision.job_execution_id == pk),
            key=lambda d: (d.sequence, d.id),
        )
