"""``OperatorClient``: an operator's side of the API (token of a user in the
``batch-operator`` group): recovery proposals and audited recovery, stop and
abandon requests, holds, and the audit lists.

Every action carries an operation id; sending the same request again answers
the recorded outcome (``replayed``), so a lost answer is retried safely with the
same operation id. Refusals raise the repository's typed errors (a replayed
refusal carries ``replayed = True``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib import parse

from oxide_batch.client.models import (
    Execution,
    HoldOutcome,
    OperatorOutcome,
    RecoveryProposal,
)
from oxide_batch.client.transport import ApiTransport
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.domain.status import FailureCategory

ExecutionRef = int | Execution


def _id(ref: ExecutionRef) -> int:
    return ref if isinstance(ref, int) else ref.id


class OperatorClient(ApiTransport):
    """The operator API of one server, authenticated with a token."""

    def execution(self, execution_id: int) -> Execution:
        return Execution.from_json(self._get(f"executions/{execution_id}"))

    def proposal(self, execution: ExecutionRef) -> RecoveryProposal:
        """The recovery proposal (even when not eligible: see ``eligible``)."""
        return RecoveryProposal.from_json(
            self._get(f"executions/{_id(execution)}/recovery-proposal")
        )

    def recover(
        self,
        proposal: RecoveryProposal,
        *,
        disposition: RecoveryDisposition | str,
        reason_code: str,
        operation_id: str,
        failure_category: FailureCategory | str | None = None,
        failure_id: int | None = None,
        override_note: str | None = None,
    ) -> OperatorOutcome:
        """Resolve the execution the proposal describes, at the version and with the
        evidence digest it showed. ``override_note``: the operator knows the worker
        is gone — recover an active execution before it is stale (contract §2.5.5), the
        note recorded on the decision."""
        _, document = self._post(
            f"executions/{proposal.job_execution_id}/recover",
            {
                "expected_version": proposal.version,
                "disposition": RecoveryDisposition(disposition).value,
                "reason_code": reason_code,
                "evidence_digest": proposal.evidence_digest,
                "failure_category": None
                if failure_category is None
                else FailureCategory(failure_category).value,
                "failure_id": failure_id,
                "operation_id": operation_id,
                "override": None if override_note is None else {"note": override_note},
            },
        )
        return OperatorOutcome.from_json(document)

    def stop(
        self, execution: ExecutionRef, expected_version: int, *, operation_id: str
    ) -> OperatorOutcome:
        _, document = self._post(
            f"executions/{_id(execution)}/stop",
            {"expected_version": expected_version, "operation_id": operation_id},
        )
        return OperatorOutcome.from_json(document)

    def abandon(
        self, execution: ExecutionRef, expected_version: int, *, reason_code: str, operation_id: str
    ) -> OperatorOutcome:
        _, document = self._post(
            f"executions/{_id(execution)}/abandon",
            {
                "expected_version": expected_version,
                "reason_code": reason_code,
                "operation_id": operation_id,
            },
        )
        return OperatorOutcome.from_json(document)

    def hold(self, instance_id: int, *, reason_code: str, operation_id: str) -> HoldOutcome:
        """Place (or replace) the instance's retention hold."""
        _, document = self._put(
            f"instances/{instance_id}/hold",
            {"reason_code": reason_code, "operation_id": operation_id},
        )
        return HoldOutcome.from_json(document)

    def release(self, instance_id: int, *, reason_code: str, operation_id: str) -> HoldOutcome:
        """Release the hold (``changed`` is false when none was held)."""
        _, document = self._delete(
            f"instances/{instance_id}/hold",
            {"reason_code": reason_code, "operation_id": operation_id},
        )
        return HoldOutcome.from_json(document)

    def audit(self, kind: str, **filters: Any) -> Iterator[dict[str, Any]]:
        """Rows of ``audit/<kind>`` (``recovery-decisions``, ``operator-requests``,
        ``retention-records``), newest first, every page."""
        query: dict[str, Any] = dict(filters)
        while True:
            page = self._get(f"audit/{kind}", **query)
            yield from page["results"]
            if not page["next"]:
                return
            query["cursor"] = parse.parse_qs(parse.urlsplit(page["next"]).query)["cursor"][0]
