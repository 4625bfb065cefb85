"""The executions' actions: recover, abandon and request a stop, each one
service call per row (:class:`~oxide_batch.services.operator.OperatorService`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from oxide_batch.admin.actions.confirmation import ConfirmedActions, choice_for
from oxide_batch.admin.applicable import (
    EXECUTION_ACTIONS,
    ActionSpec,
    action_choices_many,
    execution_choices,
    recovery_overridable,
)
from oxide_batch.admin.display import badge, when
from oxide_batch.admin.forms import ActionForm
from oxide_batch.admin.proposals import proposal_display, recovery_outcome
from oxide_batch.admin.results import Attempt, attempt
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.selectors import console
from oxide_batch.services import bootstrap
from oxide_batch.services.audit import Actor


class ExecutionActions(ConfirmedActions):
    specs = EXECUTION_ACTIONS
    actions: Any = ["recover_action", "abandon_action", "stop_action"]

    @admin.action(description="Recover selected executions…", permissions=["recover"])
    def recover_action(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse:
        return self._redirect(request, EXECUTION_ACTIONS["recover"], queryset)

    @admin.action(description="Abandon selected executions…", permissions=["abandon"])
    def abandon_action(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse:
        return self._redirect(request, EXECUTION_ACTIONS["abandon"], queryset)

    @admin.action(description="Request stop of selected executions…", permissions=["stop"])
    def stop_action(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse:
        return self._redirect(request, EXECUTION_ACTIONS["stop"], queryset)

    def rows(self, spec: ActionSpec, ids: list[int]) -> list[dict[str, Any]]:
        """The selected executions (one query) with the action's applicability;
        for recover also the proposals, read together (one more unit of work)."""
        found = console.execution_action_rows(ids)
        now = timezone.now()
        # Only recover's choice needs the proposals (read together); abandon's
        # and stop's follow from the row itself.
        choices = (
            action_choices_many(found)
            if spec.name == "recover"
            else {row["id"]: execution_choices(row, read_proposal=False, now=now) for row in found}
        )
        # What a recovery resolves: the unfinished steps of the rows it may
        # act on (one query for all of them).
        steps = (
            console.unfinished_steps(
                [
                    pk
                    for pk, row_choices in choices.items()
                    if (proposal := choice_for(row_choices, spec).proposal) is not None
                    and (proposal.eligible or recovery_overridable(proposal))
                ]
            )
            if spec.name == "recover"
            else {}
        )
        rows: list[dict[str, Any]] = []
        for row in found:
            choice = choice_for(choices[row["id"]], spec)
            shown: dict[str, Any] = {
                **row,
                "choice": choice,
                "badge": badge(row["status"]),
                "stop": when(row["stop_requested_at"], now)
                if row["stop_requested_at"] is not None
                else None,
            }
            proposal = choice.proposal
            if spec.name == "recover" and proposal is not None:
                # The version the digest was computed at is the one posted back.
                shown.update(
                    version=proposal.version,
                    digest=proposal.evidence_digest,
                    unknown_commit=proposal.unknown_commit,
                    overridable=recovery_overridable(proposal),
                    proposal=proposal_display(proposal),
                    proposal_object=proposal,
                    outcome=recovery_outcome(row["id"], proposal, *steps.get(row["id"], ([], 0))),
                )
            rows.append(shown)
        return rows

    def apply(self, request: HttpRequest, spec: ActionSpec, form: ActionForm) -> list[Attempt]:
        """One service call per row to act on, in order; each row's result or
        refusal is kept for the page to say."""
        service = bootstrap.operator_service()
        actor = Actor.for_user(request.user)
        attempts = []
        for row in form.row_inputs():
            version = int(row.version or 0)
            run: Callable[[], Any]
            if spec.name == "stop":
                run = partial(
                    service.stop,
                    row.id,
                    expected_version=version,
                    actor=actor,
                    operation_id=row.operation_id,
                )
            elif spec.name == "abandon":
                run = partial(
                    service.abandon,
                    row.id,
                    expected_version=version,
                    reason_code=form.reason_code,
                    actor=actor,
                    operation_id=row.operation_id,
                )
            else:
                run = partial(
                    service.recover,
                    row.id,
                    expected_version=version,
                    disposition=form.disposition,
                    reason_code=form.reason_code,
                    evidence_digest=row.evidence_digest or "",
                    actor=actor,
                    operation_id=row.operation_id,
                    failure_category=form.failure_category
                    if form.disposition is RecoveryDisposition.MARK_FAILED
                    else None,
                    override_note=row.override_note,
                )
            attempts.append(attempt(row.id, f"execution #{row.id}", run))
        return attempts
