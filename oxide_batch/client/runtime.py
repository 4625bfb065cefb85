"""``RuntimeClient``: the runtime's side of the API over ``urllib`` (stdlib only).

Every call is one HTTP request; errors as :mod:`oxide_batch.client.transport`
describes (typed errors, ``Unavailable``, ``CommitOutcomeUnknown``). After
``CommitOutcomeUnknown`` the ``reconcile_*`` methods re-read and tell whether the
write applied (:mod:`oxide_batch.client.reconcile` states the rule);
``reconcile=True`` on a transition or a chunk commit applies the rule itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar
from urllib import parse

from oxide_batch.client.errors import ApiError
from oxide_batch.client.identity import worker_identity
from oxide_batch.client.jobs import JobRuns
from oxide_batch.client.models import (
    Control,
    Definition,
    Execution,
    FlowDecision,
    Instance,
    Partition,
    Skip,
    SkippedItem,
    Step,
    StepState,
)
from oxide_batch.client.reconcile import (
    Reconciliation,
    ReconcilingReads,
    claim_outcome,
    exit_code_outcome,
    reread,
    settle,
    settle_create,
)
from oxide_batch.client.transport import ApiTransport
from oxide_batch.client.workers import (
    DEFAULT_CLAIM_INTERVAL,
    DEFAULT_WORKER_POLL,
    ClaimAnswer,
    PlanSummary,
    WorkerReport,
    claim_from_json,
    partition_worker,
)
from oxide_batch.domain.execution import ExecutionCounts, FailureSummary
from oxide_batch.domain.flow import FlowTarget, FlowTransitionKind
from oxide_batch.domain.partitions import PartitionPlanEntry
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.status import BatchStatus

Ref = int | Execution | Step
R = TypeVar("R", Execution, Step)
T = TypeVar("T")

#: Seconds a runtime's request answered ``Unavailable`` is sent again (at most
#: half the lease TTL once a claim announced it): a failover of the database
#: takes seconds, and every write is a compare-and-swap (docs/runtime-guide.md).
DEFAULT_RETRY_BUDGET = 30.0


def _id(ref: Ref) -> int:
    return ref if isinstance(ref, int) else ref.id


def _counts(counts: ExecutionCounts | Mapping[str, int] | None) -> dict[str, int]:
    if counts is None:
        return {}
    if isinstance(counts, ExecutionCounts):
        return counts.as_dict()
    return dict(counts)


def _envelope(value: StateEnvelope | Mapping[str, Any] | None) -> Any:
    if isinstance(value, StateEnvelope):
        return value.as_json()
    return None if value is None else dict(value)


def _carrying(body: dict[str, Any], owner_token: bytes | None) -> dict[str, Any]:
    """``body`` with the owner token a partition or flow write carries, if any."""
    return body if owner_token is None else {**body, "owner_token": owner_token.hex()}


def _failure(failure: FailureSummary | None) -> dict[str, Any] | None:
    if failure is None:
        return None
    sent: dict[str, Any] = {"category": failure.category.value, "failure_id": failure.failure_id}
    if failure.detail is not None:
        sent["detail"] = failure.detail.as_json()
    return sent


class RuntimeClient(JobRuns, ReconcilingReads, ApiTransport):
    """The runtime API of one server, authenticated with a token (of a user in
    the ``batch-runtime`` group). ``job_run`` is the high-level API
    (:mod:`oxide_batch.client.jobs`); the other methods are one request each,
    sent again while ``Unavailable`` within ``retry_budget`` seconds
    (:mod:`oxide_batch.client.transport`; ``retry_budget=0`` sends once)."""

    default_retry_budget = DEFAULT_RETRY_BUDGET

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        worker_name: str | None = None,
        worker_host: str | None = None,
        send_identity: bool = True,
        **transport: Any,
    ) -> None:
        """``worker_name``: a name for this worker (``loader-2``), shown beside
        its executions and searchable in the console; ``worker_host``: the host
        to show instead of ``socket.gethostname()`` (a pod's or container's
        name); ``send_identity=False`` sends none (decision 315). The rest is
        the transport's (``timeout``, ``retry_budget`` …)."""
        super().__init__(base_url, token, **transport)
        self.worker_name = worker_name
        self.worker_host = worker_host
        self.send_identity = send_identity

    def identity(self) -> dict[str, Any] | None:
        """The ``worker`` member sent with a launch, a claim and a step's
        creation (:func:`~oxide_batch.client.identity.worker_identity`)."""
        if not self.send_identity:
            return None
        return worker_identity(host=self.worker_host, name=self.worker_name)

    # -- repository ------------------------------------------------------------------

    def descriptor(self) -> dict[str, Any]:
        document: dict[str, Any] = self._get("descriptor")
        return document

    def register_definition(self, job_name: str, revision: str, manifest: Any) -> Definition:
        _, document = self._post(
            "definitions", {"job_name": job_name, "revision": revision, "manifest": manifest}
        )
        return Definition.from_json(document)

    def register_upgrade(
        self,
        job_name: str,
        key: str,
        from_digest: str,
        to_digest: str,
        step_mapping: Mapping[str, str],
    ) -> bool:
        """``True`` when the edge is new."""
        status, _ = self._post(
            "definitions/upgrades",
            {
                "job_name": job_name,
                "key": key,
                "from_digest": from_digest,
                "to_digest": to_digest,
                "step_mapping": dict(step_mapping),
            },
        )
        return status == 201

    # -- instances and executions ----------------------------------------------------

    def select_or_create_instance(
        self,
        job_name: str,
        parameters: Mapping[str, Any] | None = None,
        *,
        non_identifying: Mapping[str, Any] | None = None,
    ) -> tuple[Instance, bool]:
        """The instance of the key, and whether this call created it."""
        body = {
            "job_name": job_name,
            "identifying_parameters": dict(parameters or {}),
            "non_identifying_parameters": (
                None if non_identifying is None else dict(non_identifying)
            ),
        }

        def send() -> tuple[Instance, bool]:
            status, document = self._post("instances", body)
            return Instance.from_json(document), status == 201

        # Select-or-create is idempotent: an unknown outcome is sent again.
        return settle_create(send, None)

    def create_execution(
        self, instance_id: int, *, definition_digest: str | None = None, reconcile: bool = False
    ) -> Execution:
        """A new attempt (launch or restart). ``reconcile`` settles a
        ``CommitOutcomeUnknown``: the instance's newest attempt, when it is
        STARTING and unclaimed, is taken as this one (whoever claims it runs
        it); otherwise the request is sent once more."""

        def send() -> Execution:
            _, document = self._post(
                f"instances/{instance_id}/executions", {"definition_digest": definition_digest}
            )
            return Execution.from_json(document)

        def find() -> Execution | None:
            newest = self._newest_attempt(instance_id)
            if newest and newest.status is BatchStatus.STARTING and not newest.owner_recorded:
                return newest
            return None

        return settle_create(send, find) if reconcile else send()

    def launch(
        self,
        job_name: str,
        parameters: Mapping[str, Any] | None = None,
        *,
        definition_digest: str | None = None,
    ) -> tuple[Instance, Execution]:
        """Select or create the instance, then create its next attempt (STARTING)."""
        instance, _ = self.select_or_create_instance(job_name, parameters)
        return instance, self.create_execution(instance.id, definition_digest=definition_digest)

    def launch_run(
        self,
        job_name: str,
        parameters: Mapping[str, Any] | None = None,
        *,
        owner_token: bytes,
        non_identifying: Mapping[str, Any] | None = None,
        definition_digest: str | None = None,
        reconcile: bool = False,
    ) -> tuple[Instance, Execution]:
        """``POST launches``: select or create the instance, create its next
        attempt, claim it for ``owner_token`` and start it — one request, one
        transaction (contract §4.2); the execution answered carries its lease
        (which bounds the retry budget from then on) and control state.
        ``reconcile`` settles a ``CommitOutcomeUnknown``: the instance's newest
        attempt, when it is STARTED and observing control with ``owner_token``
        says the token is its owner's, is this launch; otherwise it is sent once
        more (a launch that did apply then answers ``execution_already_active``)."""
        body = {
            "job_name": job_name,
            "identifying_parameters": dict(parameters or {}),
            "non_identifying_parameters": (
                None if non_identifying is None else dict(non_identifying)
            ),
            "owner_token": owner_token.hex(),
            "definition_digest": definition_digest,
            "worker": self.identity(),
        }

        def send() -> tuple[Instance, Execution]:
            _, document = self._post("launches", body)
            return Instance.from_json(document["instance"]), Execution.from_json(
                document["execution"]
            )

        def find() -> tuple[Instance, Execution] | None:
            instance, _ = self.select_or_create_instance(job_name, parameters)
            newest = self._newest_attempt(instance.id)
            if newest is None or newest.status is not BatchStatus.STARTED:
                return None
            if not self.observe_control(newest, owner_token).owner_matches:
                return None
            return instance, newest

        launched = settle_create(send, find) if reconcile else send()
        if launched[1].lease is not None:
            self.lease_ttl = float(launched[1].lease.ttl_seconds)
        return launched

    def execution(self, execution_id: int) -> Execution:
        return Execution.from_json(self._get(f"executions/{execution_id}"))

    def instance(self, instance_id: int) -> Instance:
        return Instance.from_json(self._get(f"instances/{instance_id}"))

    def executions(self, **filters: Any) -> Iterator[Execution]:
        """Every execution matching ``filters`` (``status``, ``job_name``, …), newest first."""
        return self._pages("executions", Execution.from_json, **filters)

    def _newest_attempt(self, instance_id: int) -> Execution | None:
        """The instance's newest attempt, if any (one read)."""
        page = self._get(f"instances/{instance_id}/executions", page_size=1)
        return next((Execution.from_json(item) for item in page["results"]), None)

    def _step_named(self, execution: Ref, step_name: str) -> Step | None:
        """The execution's step of that name (a name is created once per execution)."""
        steps = self._pages(f"executions/{_id(execution)}/steps", Step.from_json)
        return next((step for step in steps if step.step_name == step_name), None)

    def _pages(self, path: str, parse_row: Callable[[Any], T], **filters: Any) -> Iterator[T]:
        """Every row of a list, following its ``next`` cursor."""
        query: dict[str, Any] = dict(filters)
        while True:
            page = self._get(path, **query)
            yield from (parse_row(item) for item in page["results"])
            if not page["next"]:
                return
            query["cursor"] = parse.parse_qs(parse.urlsplit(page["next"]).query)["cursor"][0]

    def transition(
        self,
        execution: Ref,
        expected_version: int,
        status: BatchStatus | str,
        *,
        failure: FailureSummary | None = None,
        terminal_rollback: bool = False,
        exit_code: str | None = None,
        owner_token: bytes | None = None,
        reconcile: bool = False,
    ) -> Execution:
        """CAS transition (with its ``exit_code`` in the same write, when given).
        ``reconcile`` settles a ``CommitOutcomeUnknown`` by
        :meth:`reconcile_transition` (see :func:`~oxide_batch.client.reconcile.settle`)."""
        return self._transition(
            f"executions/{_id(execution)}/transition",
            Execution.from_json,
            lambda: self.reconcile_transition(
                _id(execution), expected_version, status, failure=failure, exit_code=exit_code
            ),
            expected_version,
            status,
            failure=failure,
            terminal_rollback=terminal_rollback,
            exit_code=exit_code,
            owner_token=owner_token,
            reconcile=reconcile,
        )

    def _transition(
        self,
        path: str,
        parse_row: Callable[[Any], R],
        reread: Callable[[], Reconciliation[R]],
        expected_version: int,
        status: BatchStatus | str,
        *,
        failure: FailureSummary | None,
        terminal_rollback: bool,
        reconcile: bool,
        exit_code: str | None = None,
        owner_token: bytes | None = None,
    ) -> R:
        """The CAS transition of an execution or a step, settled by ``reread``
        when ``reconcile``."""

        def send() -> R:
            _, document = self._post(
                path,
                {
                    "expected_version": expected_version,
                    "status": BatchStatus(status).value,
                    "failure": _failure(failure),
                    "terminal_rollback": terminal_rollback,
                    "exit_code": exit_code,
                    **_carrying({}, owner_token),
                },
            )
            return parse_row(document)

        return settle(send, expected_version, reread if reconcile else None)

    def start(self, execution: Execution) -> Execution:
        """STARTING → STARTED at the version the runtime holds."""
        return self.transition(execution, execution.version, BatchStatus.STARTED)

    def exit_status(
        self, execution: Ref, expected_version: int, exit_code: str, *, reconcile: bool = False
    ) -> Execution:
        """CAS of an execution's exit code. ``reconcile`` settles a
        ``CommitOutcomeUnknown``: applied at ``expected_version + 1`` with the code."""
        return self._exit_status(
            f"executions/{_id(execution)}/exit-status",
            Execution.from_json,
            lambda: self.execution(_id(execution)),
            expected_version,
            exit_code,
            reconcile,
        )

    def claim(
        self, execution: Ref, expected_version: int, owner_token: bytes, *, reconcile: bool = False
    ) -> Execution:
        """Record ownership evidence (16 bytes) on a STARTING execution. The
        answer's lease TTL bounds the retry budget from then on. ``reconcile``
        settles a ``CommitOutcomeUnknown`` by re-reading the execution: applied
        when it is STARTING at ``expected_version + 1`` with an owner recorded."""

        def send() -> Execution:
            _, document = self._post(
                f"executions/{_id(execution)}/claim",
                {
                    "expected_version": expected_version,
                    "owner_token": owner_token.hex(),
                    "worker": self.identity(),
                },
            )
            return Execution.from_json(document)

        def reconcile_claim() -> Reconciliation[Execution]:
            current = reread(lambda: self.execution(_id(execution)), attempts=self.reread_attempts)
            return Reconciliation(claim_outcome(current, expected_version), current)

        claimed = settle(send, expected_version, reconcile_claim if reconcile else None)
        if claimed.lease is not None:
            self.lease_ttl = float(claimed.lease.ttl_seconds)
        return claimed

    def observe_control(self, execution: Ref, owner_token: bytes) -> Control:
        """At every chunk boundary: is a stop pending (then the execution is
        STOPPING)? An observation is idempotent: an unknown outcome is sent again."""

        def send() -> Control:
            _, document = self._post(
                f"executions/{_id(execution)}/control", {"owner_token": owner_token.hex()}
            )
            return Control.from_json(document)

        return settle_create(send, None)

    # -- steps -----------------------------------------------------------------------

    def create_step(
        self,
        execution: Ref,
        step_name: str,
        *,
        node_id: str | None = None,
        start_limit: int | None = None,
        allow_start_if_complete: bool = False,
        reconcile: bool = False,
        owner_token: bytes | None = None,
    ) -> Step:
        """A new step (STARTING). In a restart attempt it takes over its earlier
        FAILED or STOPPED row; an earlier COMPLETED one is ``NotRestartable``
        (a restart skips it) unless ``allow_start_if_complete`` (it starts
        fresh); ABANDONED and UNKNOWN ones are ``NotRestartable`` (contract §2.3.2).
        ``reconcile`` settles a ``CommitOutcomeUnknown``: the execution's step of
        that name, when there is one, is this one; else the request is sent again."""
        body = {
            "step_name": step_name,
            "node_id": node_id,
            "start_limit": start_limit,
            "allow_start_if_complete": True if allow_start_if_complete else None,
            "worker": self.identity(),
            **_carrying({}, owner_token),
        }

        def send() -> Step:
            _, document = self._post(f"executions/{_id(execution)}/steps", body)
            return Step.from_json(document)

        def find() -> Step | None:
            return self._step_named(execution, step_name)

        return settle_create(send, find) if reconcile else send()

    def start_step(
        self,
        execution: Ref,
        step_name: str,
        *,
        owner_token: bytes | None = None,
        node_id: str | None = None,
        start_limit: int | None = None,
        allow_start_if_complete: bool = False,
        reconcile: bool = False,
    ) -> StepState:
        """A step created STARTED in one write (contract §4.2), with what it took
        over on a restart (checkpoint, context) — the rules of
        :meth:`create_step`. ``reconcile`` settles a ``CommitOutcomeUnknown``:
        the execution's step of that name, when there is one, is this one (read
        with its state); otherwise the request is sent once more."""
        body = {
            "step_name": step_name,
            "node_id": node_id,
            "start_limit": start_limit,
            "allow_start_if_complete": True if allow_start_if_complete else None,
            "status": BatchStatus.STARTED.value,
            "worker": self.identity(),
            **_carrying({}, owner_token),
        }

        def send() -> StepState:
            _, document = self._post(f"executions/{_id(execution)}/steps", body)
            return StepState.from_started_step(document)

        def find() -> StepState | None:
            found = self._step_named(execution, step_name)
            return None if found is None else self.checkpoint(found)

        return settle_create(send, find) if reconcile else send()

    def step(self, step_id: int) -> Step:
        return Step.from_json(self._get(f"steps/{step_id}"))

    def transition_step(
        self,
        step: Ref,
        expected_version: int,
        status: BatchStatus | str,
        *,
        failure: FailureSummary | None = None,
        terminal_rollback: bool = False,
        exit_code: str | None = None,
        owner_token: bytes | None = None,
        reconcile: bool = False,
    ) -> Step:
        """CAS transition of a step; ``exit_code``, ``owner_token`` and
        ``reconcile`` as for :meth:`transition`."""
        return self._transition(
            f"steps/{_id(step)}/transition",
            Step.from_json,
            lambda: self.reconcile_step_transition(
                _id(step), expected_version, status, failure=failure, exit_code=exit_code
            ),
            expected_version,
            status,
            failure=failure,
            terminal_rollback=terminal_rollback,
            exit_code=exit_code,
            owner_token=owner_token,
            reconcile=reconcile,
        )

    def step_exit_status(
        self, step: Ref, expected_version: int, exit_code: str, *, reconcile: bool = False
    ) -> Step:
        """CAS of a step's exit code; ``reconcile`` as for :meth:`exit_status`."""
        return self._exit_status(
            f"steps/{_id(step)}/exit-status",
            Step.from_json,
            lambda: self.step(_id(step)),
            expected_version,
            exit_code,
            reconcile,
        )

    def _exit_status(
        self,
        path: str,
        parse_row: Callable[[Any], R],
        read: Callable[[], R],
        expected_version: int,
        exit_code: str,
        reconcile: bool,
    ) -> R:
        def send() -> R:
            _, document = self._post(
                path, {"expected_version": expected_version, "exit_code": exit_code}
            )
            return parse_row(document)

        def reconcile_exit_code() -> Reconciliation[R]:
            current = reread(read, attempts=self.reread_attempts)
            return Reconciliation(exit_code_outcome(current, expected_version, exit_code), current)

        return settle(send, expected_version, reconcile_exit_code if reconcile else None)

    def commit_chunk(
        self,
        step: Ref,
        expected_version: int,
        counts: ExecutionCounts | Mapping[str, int] | None = None,
        checkpoint: StateEnvelope | Mapping[str, Any] | None = None,
        context: StateEnvelope | Mapping[str, Any] | None = None,
        *,
        finish: BatchStatus | str | None = None,
        exit_code: str | None = None,
        owner_token: bytes | None = None,
        reconcile: bool = False,
        skips: Sequence[Skip] | None = None,
    ) -> Step:
        """One chunk: ``counts`` are its deltas; the step returned carries the totals.

        ``skips``: the items the chunk left out, recorded in the skip ledger by
        the same commit (the server derives the skip counts from them; none:
        the request carries no ``skips`` member).

        ``finish="COMPLETED"`` ends the step with this chunk (its ``exit_code``
        too) in the same compare-and-swap; ``owner_token`` makes the answer
        carry the execution's control state (``Step.control``). ``reconcile``
        settles a ``CommitOutcomeUnknown`` by :meth:`reconcile_chunk` (as for
        :meth:`transition`); it needs ``step`` as the ``Step`` last received, at
        ``expected_version``: the counts the deltas advance."""
        if reconcile and not (isinstance(step, Step) and step.version == expected_version):
            raise ValueError("reconcile=True needs the Step at expected_version")
        ending = None if finish is None else BatchStatus(finish)

        def send() -> Step:
            _, document = self._post(
                f"steps/{_id(step)}/checkpoint",
                {
                    "expected_version": expected_version,
                    "counts": _counts(counts),
                    "checkpoint": _envelope(checkpoint),
                    "context": _envelope(context),
                    "finish": None if ending is None else ending.value,
                    "exit_code": exit_code,
                    **_carrying({}, owner_token),
                    **({"skips": [skip.as_json() for skip in skips]} if skips else {}),
                },
            )
            return Step.from_json(document)

        def reread() -> Reconciliation[Step]:
            assert isinstance(step, Step)
            found = self.reconcile_chunk(
                step, counts, checkpoint, context, finish=ending, exit_code=exit_code
            )
            return Reconciliation(found.outcome, found.current.step)

        return settle(send, expected_version, reread if reconcile else None)

    def checkpoint(self, step: Ref) -> StepState:
        """The step with its latest checkpoint and context."""
        return StepState.from_json(self._get(f"steps/{_id(step)}/checkpoint"))

    def attempt_scope(self) -> contextlib.AbstractContextManager[Any]:
        """What one processing/writing attempt of a chunk-oriented step runs in
        (:mod:`oxide_batch.client.chunks`): nothing over HTTP; a runtime that
        shares the job's database makes it a savepoint, so a failed attempt's
        writes roll back and the chunk's transaction stays usable."""
        return contextlib.nullcontext()

    def skips(
        self, *, execution_id: int | None = None, step_id: int | None = None
    ) -> Iterator[SkippedItem]:
        """Every item of the skip ledger of one execution or one step, in
        recording order, following the keyset pages — e.g. to reprocess an
        execution's skipped items in a new run (docs/runtime-guide.md)."""
        if (execution_id is None) == (step_id is None):
            raise ValueError("give execution_id or step_id")
        path = f"executions/{execution_id}/skips" if step_id is None else f"steps/{step_id}/skips"
        return self._pages(path, SkippedItem.from_json)

    # -- partitions ------------------------------------------------------------------

    def plan_partitions(
        self,
        step: Ref,
        entries: Sequence[PartitionPlanEntry | tuple[str, Any] | str],
        *,
        owner_token: bytes | None = None,
    ) -> list[Partition]:
        """Create the step's plan; entries are keys, ``(key, context)`` or plan
        entries. With ``owner_token`` (as every partition write below) a write
        to an execution that recorded another token is refused
        (``ExecutionOwned``) and nothing is written."""
        body = []
        for entry in entries:
            if isinstance(entry, PartitionPlanEntry):
                key, context = entry.key, entry.context
            elif isinstance(entry, tuple):
                key, context = entry
            else:
                key, context = entry, None
            item: dict[str, Any] = {"key": key}
            if context is not None:
                item["context"] = _envelope(context)
            body.append(item)
        _, document = self._post(
            f"steps/{_id(step)}/partitions", _carrying({"entries": body}, owner_token)
        )
        return [Partition.from_json(item) for item in document["partitions"]]

    def partitions(self, step: Ref) -> list[Partition]:
        document = self._get(f"steps/{_id(step)}/partitions")
        return [Partition.from_json(item) for item in document["partitions"]]

    def restart_partitions(
        self, target_step: Ref, source_step: Ref | None = None, *, owner_token: bytes | None = None
    ) -> list[Partition]:
        """Carry an earlier attempt's plan into ``target_step``; without
        ``source_step`` the server takes the step ``target_step`` took over from
        (the newest of the same node in an earlier attempt)."""
        body = {} if source_step is None else {"source_step_execution_id": _id(source_step)}
        _, document = self._post(
            f"steps/{_id(target_step)}/partitions/restart", _carrying(body, owner_token)
        )
        return [Partition.from_json(item) for item in document["partitions"]]

    def assign_partition(
        self,
        partition: int | Partition,
        expected_version: int,
        worker: Ref,
        *,
        owner_token: bytes | None = None,
    ) -> Partition:
        pk = partition if isinstance(partition, int) else partition.id
        body = {"expected_version": expected_version, "worker_step_execution_id": _id(worker)}
        _, document = self._post(f"partitions/{pk}/assign", _carrying(body, owner_token))
        return Partition.from_json(document)

    def complete_partition(
        self,
        partition: int | Partition,
        expected_version: int,
        worker: Ref,
        *,
        owner_token: bytes | None = None,
    ) -> Partition:
        pk = partition if isinstance(partition, int) else partition.id
        body = {"expected_version": expected_version, "worker_step_execution_id": _id(worker)}
        _, document = self._post(f"partitions/{pk}/complete", _carrying(body, owner_token))
        return Partition.from_json(document)

    def aggregate(
        self, step: Ref, expected_version: int, *, owner_token: bytes | None = None
    ) -> Step:
        _, document = self._post(
            f"steps/{_id(step)}/aggregate",
            _carrying({"expected_version": expected_version}, owner_token),
        )
        return Step.from_json(document)

    # -- flow ------------------------------------------------------------------------

    def latest_flow_step(self, instance_id: int, node_id: str) -> Step | None:
        try:
            document = self._get(f"instances/{instance_id}/flow-steps/{parse.quote(node_id)}")
        except ApiError as error:
            if error.code == "flow_step_not_found":
                return None
            raise
        return Step.from_json(document)

    def append_flow_decision(
        self,
        execution: Ref,
        *,
        source_node_id: str,
        kind: FlowTransitionKind | str,
        observed_outcome: str,
        target: FlowTarget,
        plan_fingerprint: str,
        input_digest: str,
        source_step: Ref | None = None,
        reused_decision_id: int | None = None,
        owner_token: bytes | None = None,
    ) -> FlowDecision:
        _, document = self._post(
            f"executions/{_id(execution)}/flow-decisions",
            {
                **_carrying({}, owner_token),
                "source_node_id": source_node_id,
                "source_step_execution_id": None if source_step is None else _id(source_step),
                "kind": FlowTransitionKind(kind).value,
                "observed_outcome": observed_outcome,
                "target": target.as_json(),
                "plan_fingerprint": plan_fingerprint,
                "input_digest": input_digest,
                "reused_decision_id": reused_decision_id,
            },
        )
        return FlowDecision.from_json(document)

    def flow_decisions(self, execution: Ref) -> list[FlowDecision]:
        document = self._get(f"executions/{_id(execution)}/flow-decisions")
        return [FlowDecision.from_json(item) for item in document["results"]]

    def find_reusable_flow_decision(
        self,
        instance_id: int,
        node_id: str,
        plan_fingerprint: str,
        input_digest: str,
        kind: FlowTransitionKind | str,
    ) -> FlowDecision | None:
        document = self._get(
            f"instances/{instance_id}/flow-decisions/reusable",
            node_id=node_id,
            plan_fingerprint=plan_fingerprint,
            input_digest=input_digest,
            kind=FlowTransitionKind(kind).value,
        )
        decision = document["decision"]
        return None if decision is None else FlowDecision.from_json(decision)

    # -- remote partitions -----------------------------------------------------------

    def partition_plan(self, step: Ref) -> tuple[list[Partition], PlanSummary | None]:
        """``GET steps/{id}/partitions``: the plan and its summary (``None``
        from a server older than remote partitions) — a manager's one read per interval."""
        document = self._get(f"steps/{_id(step)}/partitions")
        partitions = [Partition.from_json(item) for item in document["partitions"]]
        return partitions, PlanSummary.from_json(document.get("summary"))

    def claim_partition(
        self, parent_step: Ref, owner_token: bytes, *, worker: Mapping[str, Any] | None = None
    ) -> ClaimAnswer:
        """``POST steps/{parent}/partitions/claim``: the next claimable partition
        of a running partitioned step, assigned to a new worker step STARTED and
        owned by ``owner_token`` (:class:`~oxide_batch.client.workers.PartitionClaim`),
        or why there is none (:class:`~oxide_batch.client.workers.NothingClaimed`:
        ``finished``, ``all_assigned``, ``stopping``). ``worker`` defaults to
        :meth:`identity`. Sent once: after ``CommitOutcomeUnknown`` claim again
        with a new token (a lost claim's partition comes back when its lease expires)."""
        body = {
            "owner_token": owner_token.hex(),
            "worker": self.identity() if worker is None else dict(worker),
        }
        _, document = self._post(f"steps/{_id(parent_step)}/partitions/claim", body)
        return claim_from_json(document)

    def partition_worker(
        self,
        parent: int | Step | Execution,
        work: Callable[[Any, Partition], None],
        *,
        step_name: str | None = None,
        interval: float = DEFAULT_CLAIM_INTERVAL,
        poll_interval: float = DEFAULT_WORKER_POLL,
        max_partitions: int | None = None,
    ) -> WorkerReport:
        """Claim and run partitions until the step is finished or stopping
        (:func:`oxide_batch.client.workers.partition_worker`)."""
        return partition_worker(
            self,
            parent,
            work,
            step_name=step_name,
            interval=interval,
            poll_interval=poll_interval,
            max_partitions=max_partitions,
        )
