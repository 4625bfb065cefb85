"""A format-2 flow job with a partitioned step: the first attempt fails in one
region, the restart carries the plan and reruns only that partition."""

from __future__ import annotations

import hashlib

from oxide_batch.demo.workload import Workload
from oxide_batch.domain import (
    BatchStatus,
    FailureCategory,
    FailureSummary,
    JobExecution,
    JobInstanceKey,
    JobParameter,
    LifecycleTransition,
    StepExecution,
)
from oxide_batch.domain.definitions import UpgradeEdge
from oxide_batch.domain.flow import (
    FlowDecisionRequest,
    FlowTarget,
    FlowTransitionKind,
    TerminalKind,
)
from oxide_batch.domain.partitions import PartitionPlanEntry
from oxide_batch.domain.state import EnvelopeKind, StateEnvelope

S = BatchStatus
JOB = "warehouse_load"
REGIONS = ("ap-south", "eu-central", "eu-west", "sa-east", "us-east", "us-west")
FAILING_REGION = "sa-east"
MANIFEST = {
    "format": 2,
    "job": JOB,
    "entry": "extract",
    "nodes": [
        {"id": "extract", "kind": "step"},
        {"id": "route", "kind": "decision"},
        {"id": "load", "kind": "partitioned_step", "start_limit": 3},
    ],
    "transitions": [
        {"source": "extract", "pattern": "COMPLETED", "target": {"node": "route"}},
        {"source": "extract", "pattern": "*", "target": {"terminal": "FAIL"}},
        {"source": "route", "pattern": "LOAD", "target": {"node": "load"}},
        {"source": "route", "pattern": "*", "target": {"terminal": "COMPLETE"}},
        {"source": "load", "pattern": "COMPLETED", "target": {"terminal": "COMPLETE"}},
        {"source": "load", "pattern": "*", "target": {"terminal": "FAIL"}},
    ],
}


def _digest(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


class PartitionedFlow:
    def __init__(self, work: Workload) -> None:
        self.work = work
        self.repo = work.repo

    def launch(self, instance_id: int | None, fingerprint: str) -> JobExecution:
        with self.repo.begin() as uow:
            if instance_id is None:
                key = JobInstanceKey.of(JOB, [JobParameter.from_json("run_date", "2026-11-28")])
                instance_id = uow.select_or_create_job_instance(key).instance.id
            execution = uow.create_job_execution(instance_id, definition_digest=fingerprint)
            uow.commit()
        return self.work.move(execution, S.STARTED)

    def flow_step(
        self, execution: JobExecution, node: str, limit: int | None = None
    ) -> StepExecution:
        with self.repo.begin() as uow:
            step = uow.create_flow_step_execution(execution.id, node, node, limit)
            step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
            uow.commit()
        return step

    def finish(self, step: StepExecution, target: BatchStatus, exit_code: str) -> StepExecution:
        failure = (
            FailureSummary(FailureCategory.USER_COMPONENT, next(self.work.failure_ids))
            if target is S.FAILED
            else None
        )
        with self.repo.begin() as uow:
            step = uow.enrich_step_exit_status(step.id, step.version, exit_code)
            step = uow.transition_step_execution(
                step.id, step.version, LifecycleTransition(target, failure=failure)
            )
            uow.commit()
        return step

    def decide(
        self,
        execution: JobExecution,
        fingerprint: str,
        node: str,
        kind: FlowTransitionKind,
        outcome: str,
        target: FlowTarget,
        step: StepExecution | None = None,
        reused_decision_id: int | None = None,
    ) -> None:
        with self.repo.begin() as uow:
            uow.append_flow_decision(
                FlowDecisionRequest(
                    job_execution_id=execution.id,
                    source_node_id=node,
                    kind=kind,
                    observed_outcome=outcome,
                    target=target,
                    plan_fingerprint=fingerprint,
                    input_digest=_digest(node, outcome),
                    source_step_execution_id=step.id if step else None,
                    reused_decision_id=reused_decision_id,
                )
            )
            uow.commit()

    def run_partition(
        self, execution: JobExecution, parent: StepExecution, partition_id: int, key: str
    ) -> None:
        """One worker: assigned, a few chunks, completed; the failing region fails."""
        with self.repo.begin() as uow:
            worker = uow.create_step_execution(execution.id, f"load:{key}", node_id=f"load:{key}")
            worker = uow.transition_step_execution(worker.id, 0, LifecycleTransition(S.STARTED))
            version = next(
                p.version for p in uow.step_partition_plan(parent.id) if p.id == partition_id
            )
            uow.assign_step_partition(partition_id, version, worker.id)
            uow.commit()
        worker = self.work.chunks(worker, count=2 + len(key) % 3, size=250)
        fails = key == FAILING_REGION and execution.attempt == 1
        worker = self.finish(
            worker, S.FAILED if fails else S.COMPLETED, "FAILED" if fails else "COMPLETED"
        )
        with self.repo.begin() as uow:
            partition = next(p for p in uow.step_partition_plan(parent.id) if p.id == partition_id)
            uow.complete_step_partition(partition_id, partition.version, worker.id)
            uow.commit()

    def load(self, execution: JobExecution, source: StepExecution | None) -> StepExecution:
        parent = self.flow_step(execution, "load", 3)
        with self.repo.begin() as uow:
            if source is None:
                entries = [
                    PartitionPlanEntry(
                        region,
                        StateEnvelope.from_json(
                            {
                                "schema": "demo.region",
                                "schema_version": 1,
                                "payload": {"region": region},
                            },
                            kind=EnvelopeKind.PARTITION_CONTEXT,
                        ),
                    )
                    for region in REGIONS
                ]
                plan = uow.create_step_partition_plan(parent.id, entries)
            else:
                plan = uow.restart_step_partition_plan(source.id, parent.id)
            uow.commit()
        for partition in plan:
            if partition.status is not S.COMPLETED:
                self.work.tick(20)
                self.run_partition(execution, parent, partition.id, partition.key)
        with self.repo.begin() as uow:
            parent = uow.aggregate_step_partitions(parent.id, parent.version)
            uow.commit()
        return parent


def run_partitioned_flow(work: Workload) -> None:
    flow = PartitionedFlow(work)
    with work.repo.begin() as uow:
        fingerprint = uow.register_definition(JOB, "2026.11", MANIFEST).definition.digest
        # The next revision, reachable from this one through an upgrade edge.
        successor = uow.register_definition(
            JOB, "2026.12", {**MANIFEST, "entry": "extract", "revision_note": "load v2"}
        ).definition.digest
        uow.register_definition_upgrade(
            UpgradeEdge.of(
                job_name=JOB,
                key="2026.11-to-2026.12",
                from_digest=fingerprint,
                to_digest=successor,
                step_mapping={"extract": "extract", "load": "load"},
            )
        )
        uow.commit()
    source = None
    instance_id = None
    extract = None
    for _attempt in (1, 2):
        execution = flow.launch(instance_id, fingerprint)
        instance_id = execution.job_instance_id
        if extract is None:
            extract = flow.flow_step(execution, "extract")
            extract = work.chunks(extract, count=4, size=500)
            extract = flow.finish(extract, S.COMPLETED, "COMPLETED")
            flow.decide(
                execution,
                fingerprint,
                "extract",
                FlowTransitionKind.STEP_EXIT,
                "COMPLETED",
                FlowTarget(node="route"),
                extract,
            )
        else:
            # The restart reuses the completed extract instead of running it again.
            with work.repo.begin() as uow:
                earlier = uow.find_reusable_flow_decision(
                    instance_id,
                    "extract",
                    fingerprint,
                    _digest("extract", "COMPLETED"),
                    FlowTransitionKind.STEP_EXIT,
                )
            assert earlier is not None
            flow.decide(
                execution,
                fingerprint,
                "extract",
                FlowTransitionKind.COMPLETED_STEP_REUSE,
                "COMPLETED",
                FlowTarget(node="route"),
                extract,
                earlier.id,
            )
        flow.decide(
            execution,
            fingerprint,
            "route",
            FlowTransitionKind.DECIDER,
            "LOAD",
            FlowTarget(node="load"),
        )
        parent = flow.load(execution, source)
        outcome = parent.exit_code
        terminal = TerminalKind.COMPLETE if parent.status is S.COMPLETED else TerminalKind.FAIL
        flow.decide(
            execution,
            fingerprint,
            "load",
            FlowTransitionKind.STEP_EXIT,
            outcome,
            FlowTarget(terminal=terminal),
            parent,
        )
        if parent.status is S.COMPLETED:
            work.move(execution, S.COMPLETED)
        else:
            work.move(execution, S.FAILED, category=FailureCategory.USER_COMPONENT)
            source = parent
        work.tick(1800)
