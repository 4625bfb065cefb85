"""Adding a notification rule in the console (issue 41): a form of what
``batch_notifications add`` takes — name, job globs, event kinds (a box per
known kind), one destination (a webhook URL with its format and optional
secret, or e-mail addresses) — validated by the service's own ``new_rule``
and added by ``NotificationRules.add`` (audited ``ADD``, the logged-in user
as actor): a refusal is an error beside the field it names, nothing written.

The generated secret is shown once: the POST that adds the rule renders the
result page itself (no redirect, no message in the session), answered
``Cache-Control: no-store`` so the browser keeps no copy; the secret is
never in a URL, never re-rendered into a form (a given one included) and
never shown again. Only ``manage_notifications`` adds."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.cache import add_never_cache_headers

from oxide_batch.admin.notify.confirm import change_by, form_page, may_manage
from oxide_batch.domain.notifications import Destination, EventKind, NotificationRuleInvalid
from oxide_batch.services.notify_rules import NotificationRules, new_rule

ADDED_TEMPLATE = "admin/oxide_batch/notify_rule_added.html"
WEBHOOK, EMAIL = Destination.WEBHOOK.value, Destination.EMAIL.value


def _items(text: str) -> list[str]:
    """A comma-separated list, as the command's ``--jobs``/``--email`` take it."""
    return [item.strip() for item in text.split(",") if item.strip()]


class RuleForm(forms.Form):
    """The fields as typed: every rule of what is acceptable is the service's."""

    # Not stripped: the service refuses surrounding whitespace, as the API does.
    name = forms.CharField(
        max_length=64,
        strip=False,
        help_text="1–64 of A–Z a–z 0–9 . _ -, beginning with a letter or digit.",
        widget=forms.TextInput(attrs={"class": "vTextField"}),
    )
    jobs = forms.CharField(
        label="Job names",
        max_length=2000,
        strip=False,
        help_text="Job-name patterns, comma-separated: * any run of characters, ? one.",
        widget=forms.TextInput(attrs={"class": "vLargeTextField"}),
    )
    events = forms.MultipleChoiceField(
        label="Event kinds",
        required=False,  # "name at least one" is the service's refusal
        choices=[(kind.value, kind.value) for kind in EventKind],
        widget=forms.CheckboxSelectMultiple,
    )
    destination = forms.ChoiceField(
        label="Sends to",
        choices=[(WEBHOOK, "a webhook"), (EMAIL, "e-mail addresses")],
        initial=WEBHOOK,
        widget=forms.RadioSelect,
    )
    webhook = forms.CharField(
        label="Webhook URL",
        required=False,
        max_length=2000,
        strip=False,
        help_text="https (plain http only to a host named in OXIDE_BATCH_WEBHOOK_HTTP_HOSTS).",
        widget=forms.TextInput(attrs={"class": "vLargeTextField"}),
    )
    format = forms.ChoiceField(
        choices=[("standard", "standard (signed, Standard Webhooks)"), ("slack", "slack")],
        initial="standard",
        help_text="A Slack-compatible incoming webhook gets one readable line, unsigned.",
    )
    secret = forms.CharField(
        label="Signing secret",
        required=False,
        max_length=200,
        strip=False,
        # Never written back into the page (an error page included).
        widget=forms.PasswordInput(
            render_value=False, attrs={"autocomplete": "off", "class": "vLargeTextField"}
        ),
        help_text="whsec_… — leave empty to have one generated and shown once.",
    )
    email = forms.CharField(
        label="E-mail addresses",
        required=False,
        max_length=2000,
        strip=False,
        help_text="Comma-separated, 1 to 20.",
        widget=forms.TextInput(attrs={"class": "vLargeTextField"}),
    )

    def rule_arguments(self) -> dict[str, Any]:
        """``new_rule``'s arguments, the destination's fields only for the one chosen."""
        data = self.cleaned_data
        webhook = data["destination"] == WEBHOOK
        return {
            "name": data["name"],
            "jobs": _items(data["jobs"]),
            "events": data["events"],
            "webhook": data["webhook"] if webhook else None,
            "secret": (data["secret"] or None) if webhook else None,
            "format": data["format"],
            "email": None if webhook else _items(data["email"]),
        }

    def refuse(self, error: NotificationRuleInvalid) -> None:
        """The service's refusal beside the field it names."""
        field = error.field if error.field in self.fields else None
        self.add_error(field, error.reason)


def add_rule_view(request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
    """GET: the empty form; POST: the rule added and its result page (the
    secret, once), or the form with its errors and nothing written."""
    if not may_manage(request):
        raise PermissionDenied
    form = RuleForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            rule = new_rule(**form.rule_arguments())
            rule_id = NotificationRules().add(rule, by=change_by(request))
        except NotificationRuleInvalid as error:
            form.refuse(error)
        else:
            page = TemplateResponse(
                request,
                ADDED_TEMPLATE,
                {
                    **context,
                    "title": f"Rule {rule.name} added",
                    "rule": rule,
                    "rule_url": reverse(
                        "admin:oxide_batch_notificationrule_change", args=[rule_id]
                    ),
                    # Shown this once: a generated secret only (a given one the operator has).
                    "secret": rule.secret if rule.secret_generated else None,
                },
            )
            add_never_cache_headers(page)
            return page
    page = form_page(
        request,
        context,
        form,
        title="Add a notification rule",
        button="Add the rule",
        intro=(
            "Who hears what: the rule sends each event of the kinds ticked, of a job "
            "whose name matches a pattern, to one destination — validated and stored as "
            "manage.py batch_notifications add does it (the destination encrypted, never "
            "shown again), audited with your name."
        ),
    )
    add_never_cache_headers(page)
    return page
