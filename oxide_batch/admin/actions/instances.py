"""The instances' actions: place and release a retention hold, each one
service call per row (:class:`~oxide_batch.services.retention.RetentionService`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from oxide_batch.admin.actions.confirmation import ConfirmedActions, choice_for
from oxide_batch.admin.applicable import (
    INSTANCE_ACTIONS,
    ActionSpec,
    action_choices,
)
from oxide_batch.admin.display import when
from oxide_batch.admin.forms import ActionForm
from oxide_batch.admin.results import Attempt, attempt
from oxide_batch.selectors import console
from oxide_batch.services import bootstrap
from oxide_batch.services.audit import Actor


class InstanceActions(ConfirmedActions):
    specs = INSTANCE_ACTIONS
    actions: Any = ["hold_action", "release_action"]

    @admin.action(description="Place a retention hold on selected instances…", permissions=["hold"])
    def hold_action(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse:
        return self._redirect(request, INSTANCE_ACTIONS["hold"], queryset)

    @admin.action(description="Release the hold of selected instances…", permissions=["hold"])
    def release_action(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse:
        return self._redirect(request, INSTANCE_ACTIONS["release"], queryset)

    def rows(self, spec: ActionSpec, ids: list[int]) -> list[dict[str, Any]]:
        found = console.instance_action_rows(ids)
        now = timezone.now()
        return [
            {
                **row,
                "choice": choice_for(action_choices(row), spec),
                "held_since": when(row["hold_placed_at"], now),
            }
            for row in found
        ]

    def apply(self, request: HttpRequest, spec: ActionSpec, form: ActionForm) -> list[Attempt]:
        service = bootstrap.retention_service()
        actor = Actor.for_user(request.user)
        act = service.place_hold if spec.name == "hold" else service.release_hold
        return [
            attempt(
                row.id,
                f"instance #{row.id}",
                partial(
                    act,
                    row.id,
                    actor=actor,
                    reason_code=form.reason_code,
                    operation_id=row.operation_id,
                ),
            )
            for row in form.row_inputs()
        ]
