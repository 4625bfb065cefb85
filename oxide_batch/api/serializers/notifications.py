"""Notification rules, their deliveries and job deadlines (issue 41,
docs/notifications.md): the operator API's inputs and answers. The rules'
validation is the service's (``services/notify_rules.new_rule``,
``services/deadlines``): these check the JSON shape only."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from oxide_batch.api.fields import (
    EnumField,
    InstantField,
    NameField,
    StrictCharField,
    document_as,
)
from oxide_batch.api.serializers.base import Input, Output, PageOutput
from oxide_batch.domain.names import NameKind
from oxide_batch.domain.notifications import EventKind
from oxide_batch.services.notify_rules import MAX_ADDRESSES

URL_MAX = 2000
RULE_NAME_SCHEMA: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
}


class MatchingField(serializers.RegexField):
    """A string the whole of which matches ``pattern`` (documented so): no
    trailing newline or control character slips past ``$``."""

    def __init__(self, pattern: str, max_length: int, help_text: str, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", help_text)
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(
            rf"\A(?:{pattern})\Z", max_length=max_length, trim_whitespace=False, **kwargs
        )
        document_as(
            self, {"type": "string", "maxLength": max_length, "pattern": f"^(?:{pattern})$"}
        )


class TextField(StrictCharField):
    """A string of at most ``max_length`` characters, validated by the service."""

    def __init__(self, max_length: int, **kwargs: Any) -> None:
        super().__init__(max_length=max_length, **kwargs)
        document_as(self, {"type": "string", "maxLength": max_length})


@extend_schema_field(RULE_NAME_SCHEMA)
class RuleNameField(StrictCharField):
    """A rule's name (``services/notify_rules.RULE_NAME`` checks it)."""


DURATION = "[0-9]{1,9}(?:ms|s|m|h|d)"


class RuleInput(Input):
    """A rule: one destination — `webhook` (with `format`; a `standard` one
    signed by `secret`, generated when absent and shown once in the answer) or
    `email`."""

    name = RuleNameField(
        max_length=64, help_text="1–64 of A-Z a-z 0-9 . _ -, beginning with a letter or digit."
    )
    jobs = serializers.ListField(
        child=NameField(
            NameKind.JOB,
            help_text="A job-name pattern, written as a job name: `*` any run, `?` one.",
        ),
        min_length=1,
        max_length=32,
        help_text="Job-name patterns (the API token's glob syntax).",
    )
    events = serializers.ListField(
        child=EnumField(EventKind),
        min_length=1,
        max_length=len(EventKind),
        help_text="The event kinds the rule hears.",
    )
    webhook = TextField(
        URL_MAX,
        help_text="An absolute https URL (plain http only to a host named in "
        "OXIDE_BATCH_WEBHOOK_HTTP_HOSTS); stored encrypted, never shown again.",
        required=False,
    )
    format = serializers.ChoiceField(
        choices=["standard", "slack"],
        default="standard",
        help_text="`standard` (Standard Webhooks, signed) or `slack` (a one-line text).",
    )
    secret = TextField(
        200,
        help_text="`whsec_` then base64 of at least 24 bytes (a standard webhook only).",
        required=False,
    )
    email = serializers.ListField(
        child=TextField(254, help_text="An e-mail address."),
        required=False,
        min_length=1,
        max_length=MAX_ADDRESSES,
        help_text=f"1–{MAX_ADDRESSES} addresses (the service's e-mail settings send them).",
    )


class NotificationActionInput(Input):
    """No members: the path names what the action is on (`{}`)."""


class RuleOutput(Output):
    """A rule as it may be shown: its destination by a hint, never its URL,
    secret or addresses."""

    name = serializers.CharField()
    jobs = serializers.ListField(child=serializers.CharField())
    events = serializers.ListField(child=serializers.CharField())
    destination = serializers.CharField(help_text="`webhook`, `slack` or `email`.")
    hint = serializers.CharField(help_text="What may be shown of the destination.")
    enabled = serializers.BooleanField()
    pending = serializers.IntegerField(help_text="Its deliveries not yet delivered nor dead.")
    dead = serializers.IntegerField(help_text="Its dead deliveries.")


class RulesOutput(Output):
    rules = RuleOutput(many=True)


class RuleCreatedOutput(Output):
    id = serializers.IntegerField()
    name = serializers.CharField()
    destination = serializers.CharField()
    hint = serializers.CharField()
    secret = serializers.CharField(
        allow_null=True,
        help_text=(
            "The generated signing secret, shown this once (null when the request "
            "gave one, or for a Slack or e-mail destination): store it now."
        ),
    )


class RuleChangedOutput(Output):
    name = serializers.CharField()
    action = serializers.CharField(help_text="`enable`, `disable` or `remove`.")


class RuleTestOutput(Output):
    name = serializers.CharField()
    outcome = serializers.CharField(help_text="`delivered`, `retry` or `dead`.")
    detail = serializers.CharField()


class DeliveryOutput(Output):
    """One (event, rule) delivery; `webhook_id` is the same on every attempt."""

    id = serializers.IntegerField()
    webhook_id = serializers.CharField()
    rule = serializers.CharField()
    kind = serializers.CharField()
    job_name = serializers.CharField()
    job_execution_id = serializers.IntegerField(allow_null=True)
    state = serializers.CharField(help_text="`pending`, `delivered` or `dead`.")
    attempts = serializers.IntegerField()
    next_attempt_at = InstantField()
    last_error = serializers.CharField()


class DeliveryPageOutput(PageOutput):
    results = DeliveryOutput(many=True)


class DeliveryQuery(Input):
    """The deliveries list's query (its page parameters are the pagination's)."""

    state = serializers.ChoiceField(choices=["pending", "delivered", "dead"], required=False)
    rule = serializers.RegexField(
        r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z", required=False, trim_whitespace=False
    )
    job_execution_id = serializers.RegexField(
        r"\A[0-9]{1,19}\Z", required=False, trim_whitespace=False
    )
    cursor = serializers.CharField(required=False)
    page_size = serializers.CharField(required=False)


class RedeliveredOutput(Output):
    delivery = serializers.IntegerField()
    state = serializers.CharField(help_text="`pending`: attempted again from its first attempt.")


class DeadlineInput(Input):
    """A job's deadlines (at least one of `max_duration`, `expect_every`),
    replacing any it had; its periods restart now. Durations as `90s`, `15m`,
    `2h`, `1d` (at least 1s)."""

    job_name = NameField(NameKind.JOB)
    max_duration = MatchingField(DURATION, 11, "A run active longer raises execution.overdue once.")
    expect_every = MatchingField(
        DURATION, 11, "A COMPLETED run expected every period, else job.missing once a period."
    )
    by = MatchingField("[0-9]{2}:[0-9]{2}", 5, "HH:MM: each period ends at this local time.")
    tz = MatchingField("[A-Za-z0-9_+/-]{1,64}", 64, "The zone of `by` (an IANA name; default UTC).")


class DeadlineClearInput(Input):
    job_name = NameField(NameKind.JOB)


class DeadlineOutput(Output):
    job_name = serializers.CharField()
    max_duration_seconds = serializers.FloatField(allow_null=True)
    expect_every_seconds = serializers.FloatField(allow_null=True)
    by = serializers.CharField(allow_null=True, help_text="HH:MM, or null.")
    tz = serializers.CharField(allow_null=True)
    set_at = InstantField()


class DeadlinesOutput(Output):
    deadlines = DeadlineOutput(many=True)


class DeadlineClearedOutput(Output):
    job_name = serializers.CharField()
    cleared = serializers.BooleanField()
