"""Notification rules, deliveries and job deadlines (issue 41,
docs/notifications.md): the operator API of what ``manage.py
batch_notifications`` and ``batch_deadlines`` do, through the same services
(``services/notify_rules.py``, ``services/deadlines.py``).

Every change is audited by the service in its own append-only table (the rule
changes, the deadline changes) with the authenticated user as the actor. Not
replayed by operation id (decision 281): a rule's name and a job's name make
each change idempotent or a clear refusal — a second create of a name is
``notification_rule_invalid``, a second disable, enable or set changes nothing
more, a second remove or clear is the not-found problem."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Literal

from drf_spectacular.utils import OpenApiParameter, extend_schema_view
from rest_framework.request import Request
from rest_framework.response import Response

from oxide_batch.api import deps
from oxide_batch.api.errors import InvalidInput
from oxide_batch.api.fields import ID_SCHEMA
from oxide_batch.api.schema import endpoint
from oxide_batch.api.serializers import notifications as n
from oxide_batch.api.serializers.base import K, identifier, name
from oxide_batch.api.views.base import PAGE_PARAMETERS, BatchView, actor_of
from oxide_batch.domain.deadlines import DeadlineInvalid, DeadlineRule
from oxide_batch.domain.errors import IdentifierOutOfRange
from oxide_batch.domain.names import MAX_IDENTIFIER, NameKind
from oxide_batch.domain.notifications import NotificationRuleInvalid
from oxide_batch.repository.deadlines import rule_details
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.roles import MANAGE_NOTIFICATIONS
from oxide_batch.selectors.delivery_lists import DELIVERY_STATES, delivery_rows, delivery_view
from oxide_batch.selectors.notifications import rules
from oxide_batch.services.deadlines import Deadlines
from oxide_batch.services.notify_rules import NotificationRules, new_rule

MANAGE = MANAGE_NOTIFICATIONS
TAGS = ["notifications"]
# A name the route's pattern refuses matches no route: the site's 404 ``not_found``.
RULE_ERRORS = {404: ("notification_rule_not_found", "not_found")}
NOT_REPLAYED = (
    "Audited (the rule's change log, the authenticated user as its actor); not "
    "replayed by operation id."
)


@contextmanager
def field_named() -> Iterator[None]:
    """A rule's or deadline's refusal (the service's validation) as the
    ``invalid_request`` entry of the member it names ("destination": the
    rule's one-of ``webhook`` / ``email``)."""
    try:
        yield
    except (NotificationRuleInvalid, DeadlineInvalid) as error:
        raise InvalidInput({error.field: [error]}) from None


def change_by(request: Request) -> ChangeBy:
    actor = actor_of(request)
    return ChangeBy(actor.reference, actor.user_id)


def deadline_json(rule: DeadlineRule) -> dict[str, Any]:
    return {"job_name": rule.job_name, **rule_details(rule), "set_at": rule.set_at}


class NotificationView(BatchView):
    job_scoped = False  # an operator endpoint (contract §4.1)

    @staticmethod
    def rules_service() -> NotificationRules:
        return NotificationRules(clock=deps.clock)

    @staticmethod
    def deadlines_service() -> Deadlines:
        return Deadlines(clock=deps.clock)


class RulesView(NotificationView):
    required_permissions = {"GET": MANAGE, "POST": MANAGE}

    @endpoint(
        operation_id="list_notification_rules",
        summary="Notification rules, by name (never a destination's secret)",
        permission=MANAGE,
        ok={200: n.RulesOutput},
        tags=TAGS,
    )
    def get(self, request: Request) -> Response:
        return Response(n.RulesOutput({"rules": [view.document() for view in rules()]}).data)

    @endpoint(
        operation_id="create_notification_rule",
        summary="Add a notification rule (a generated secret is answered once)",
        description=(
            "Validated as `batch_notifications add` validates it; the destination is "
            "stored encrypted and never shown again. " + NOT_REPLAYED
        ),
        permission=MANAGE,
        request=n.RuleInput,
        ok={201: n.RuleCreatedOutput},
        body=True,
        tags=TAGS,
    )
    def post(self, request: Request) -> Response:
        data = self.read(n.RuleInput, request.data).validated_data
        with field_named():
            rule = new_rule(
                name=data["name"],
                jobs=data["jobs"],
                events=[kind.value for kind in data["events"]],
                webhook=data.get("webhook"),
                secret=data.get("secret"),
                format=data["format"],
                email=data.get("email"),
            )
            rule_id = self.rules_service().add(rule, by=change_by(request))  # a taken name
        answer = {
            "id": rule_id,
            "name": rule.name,
            "destination": rule.destination.value,
            "hint": rule.hint,
            # Shown this once: a generated secret only (a given one the caller has).
            "secret": rule.secret if rule.secret_generated else None,
        }
        return Response(n.RuleCreatedOutput(answer).data, status=201)


class NotificationRuleView(NotificationView):
    required_permissions = {"DELETE": MANAGE}

    @endpoint(
        operation_id="remove_notification_rule",
        summary="Remove a notification rule and its deliveries",
        description=NOT_REPLAYED,
        permission=MANAGE,
        request=n.NotificationActionInput,
        ok={200: n.RuleChangedOutput},
        errors=RULE_ERRORS,
        body=True,
        tags=TAGS,
    )
    def delete(self, request: Request, name: str) -> Response:
        self.read(n.NotificationActionInput, request.data)
        self.rules_service().remove(name, by=change_by(request))
        return Response(n.RuleChangedOutput({"name": name, "action": "remove"}).data)


class RuleSwitchView(NotificationView):
    """Enable or disable a rule: ``action`` names the service's method (and the
    answer's ``action``); each subclass documents its own operation."""

    required_permissions = {"POST": MANAGE}
    action: ClassVar[Literal["enable", "disable"]]

    def post(self, request: Request, name: str) -> Response:
        self.read(n.NotificationActionInput, request.data)
        service = self.rules_service()
        switch = service.enable if self.action == "enable" else service.disable
        switch(name, by=change_by(request))
        return Response(n.RuleChangedOutput({"name": name, "action": self.action}).data)


@extend_schema_view(
    post=endpoint(
        operation_id="enable_notification_rule",
        summary="Enable a notification rule",
        description="Enabled already: audited again, nothing else changes. " + NOT_REPLAYED,
        permission=MANAGE,
        request=n.NotificationActionInput,
        ok={200: n.RuleChangedOutput},
        errors=RULE_ERRORS,
        body=True,
        tags=TAGS,
    )
)
class RuleEnableView(RuleSwitchView):
    action = "enable"


@extend_schema_view(
    post=endpoint(
        operation_id="disable_notification_rule",
        summary="Disable a notification rule (its pending deliveries are still attempted)",
        description="Disabled already: audited again, nothing else changes. " + NOT_REPLAYED,
        permission=MANAGE,
        request=n.NotificationActionInput,
        ok={200: n.RuleChangedOutput},
        errors=RULE_ERRORS,
        body=True,
        tags=TAGS,
    )
)
class RuleDisableView(RuleSwitchView):
    action = "disable"


class RuleTestView(NotificationView):
    required_permissions = {"POST": MANAGE}

    @endpoint(
        operation_id="test_notification_rule",
        summary="Send a test message to the rule's destination now",
        description=(
            "One attempt, within OXIDE_BATCH_NOTIFY_TIMEOUT; its outcome is answered and "
            "audited. " + NOT_REPLAYED
        ),
        permission=MANAGE,
        request=n.NotificationActionInput,
        ok={200: n.RuleTestOutput},
        errors=RULE_ERRORS,
        body=True,
        tags=TAGS,
    )
    def post(self, request: Request, name: str) -> Response:
        self.read(n.NotificationActionInput, request.data)
        attempt = self.rules_service().test(name, by=change_by(request))
        answer = {"name": name, "outcome": attempt.verdict, "detail": attempt.detail}
        return Response(n.RuleTestOutput(answer).data)


class DeliveriesView(NotificationView):
    required_permissions = {"GET": MANAGE}

    @endpoint(
        operation_id="list_notification_deliveries",
        summary="Notification deliveries, newest first",
        description=(
            "`pending` includes those being retried (`attempts` > 0); a `dead` one "
            "shows its last error."
        ),
        permission=MANAGE,
        ok={200: n.DeliveryPageOutput},
        listing=True,
        parameters=[
            OpenApiParameter("state", str, enum=list(DELIVERY_STATES)),
            OpenApiParameter("rule", n.RULE_NAME_SCHEMA, description="Only this rule's."),
            OpenApiParameter(
                "job_execution_id", ID_SCHEMA, description="Only the events of this execution."
            ),
            *PAGE_PARAMETERS,
        ],
        tags=TAGS,
    )
    def get(self, request: Request) -> Response:
        # A plain dict: an empty ``state=`` is a value to refuse, not an absent one.
        query = self.read(n.DeliveryQuery, request.query_params.dict()).validated_data
        execution = query.get("job_execution_id")
        if execution is not None:
            execution = identifier("job_execution_id", K.JOB_EXECUTION, int(execution))
        rows = delivery_rows(
            state=query.get("state"), rule=query.get("rule"), job_execution_id=execution
        )
        return self.page(request, rows, n.DeliveryOutput, delivery_view)


class RedeliverView(NotificationView):
    required_permissions = {"POST": MANAGE}

    @endpoint(
        operation_id="redeliver_notification",
        summary="Deliver a dead delivery again (audited)",
        description=(
            "Pending again from its first attempt, with the same `webhook_id`. Not dead "
            "(or not there): `notification_delivery_not_dead`. " + NOT_REPLAYED
        ),
        permission=MANAGE,
        request=n.NotificationActionInput,
        ok={200: n.RedeliveredOutput},
        errors={404: ("notification_delivery_not_dead",)},
        body=True,
        path_ids=True,
        tags=TAGS,
    )
    def post(self, request: Request, delivery_id: int) -> Response:
        if not 1 <= delivery_id <= MAX_IDENTIFIER:
            raise IdentifierOutOfRange(kind="notification_delivery", value=delivery_id)
        self.read(n.NotificationActionInput, request.data)
        self.rules_service().redeliver(delivery_id, by=change_by(request))
        return Response(n.RedeliveredOutput({"delivery": delivery_id, "state": "pending"}).data)


class DeadlinesView(NotificationView):
    required_permissions = {"GET": MANAGE, "PUT": MANAGE, "DELETE": MANAGE}

    @endpoint(
        operation_id="list_deadlines",
        summary="Every job's run deadlines, by job name",
        permission=MANAGE,
        ok={200: n.DeadlinesOutput},
        tags=TAGS,
    )
    def get(self, request: Request) -> Response:
        found = [deadline_json(rule) for rule in self.deadlines_service().rules()]
        return Response(n.DeadlinesOutput({"deadlines": found}).data)

    @endpoint(
        operation_id="set_deadline",
        summary="Set (replace) a job's run deadlines",
        description=(
            "Validated as `batch_deadlines set` validates it; the job's periods restart "
            "now. The watchdog's pass raises execution.overdue and job.missing. " + NOT_REPLAYED
        ),
        permission=MANAGE,
        request=n.DeadlineInput,
        ok={200: n.DeadlineOutput},
        body=True,
        tags=TAGS,
    )
    def put(self, request: Request) -> Response:
        data = self.read(n.DeadlineInput, request.data).validated_data
        job_name = name("job_name", NameKind.JOB, data["job_name"])
        with field_named():
            rule = self.deadlines_service().set(
                job_name,
                by=change_by(request),
                max_duration=data.get("max_duration"),
                expect_every=data.get("expect_every"),
                at=data.get("by"),
                zone=data.get("tz"),
            )
        return Response(n.DeadlineOutput(deadline_json(rule)).data)

    @endpoint(
        operation_id="clear_deadline",
        summary="Remove a job's run deadlines",
        description=NOT_REPLAYED,
        permission=MANAGE,
        request=n.DeadlineClearInput,
        ok={200: n.DeadlineClearedOutput},
        errors={404: ("deadline_not_found",)},
        body=True,
        tags=TAGS,
    )
    def delete(self, request: Request) -> Response:
        data = self.read(n.DeadlineClearInput, request.data).validated_data
        job_name = name("job_name", NameKind.JOB, data["job_name"])
        self.deadlines_service().clear(job_name, by=change_by(request))
        return Response(n.DeadlineClearedOutput({"job_name": job_name, "cleared": True}).data)
