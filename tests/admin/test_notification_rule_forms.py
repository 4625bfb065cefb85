"""The console manages rules as the command and the API do (issue 41): an
operator with ``manage_notifications`` adds a rule — validated by the
service's own ``new_rule``, refusals shown beside their field with nothing
written, a generated secret shown once on the page the POST renders
(``Cache-Control: no-store``, never in a URL, a session message or a later
page) —, removes one behind a confirmation that counts the deliveries going
with it, and sends a test; each change audited with the operator as actor.
Viewers, operators without the permission and anonymous visitors are
refused; a forged POST without its CSRF token is refused; a rule removed
meanwhile is said, never a 500."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core import mail
from django.test import Client
from django.urls import reverse

from oxide_batch import models
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.roles import APP_LABEL, OPERATOR_PERMISSIONS, VIEW_BATCH, VIEWER, ensure_roles
from oxide_batch.services import notify_keys
from oxide_batch.services.notify_rules import NotificationRules
from tests.admin.test_notifications_console import act_url, make_delivery, make_rule, observed

pytestmark = pytest.mark.django_db
NEW = "admin:oxide_batch_notificationrule_new"
SECRET_SHAPE = re.compile(r"whsec_[A-Za-z0-9+/=]{32}")


def new_url() -> str:
    return reverse(NEW)


def webhook_form(**changes: Any) -> dict[str, Any]:
    form = {
        "name": "oncall",
        "jobs": "nightly_*, customer_sync",
        "events": ["execution.failed", "job.missing"],
        "destination": "webhook",
        "webhook": "https://hooks.example.com/oxide",
        "format": "standard",
        "secret": "",
        "email": "",
    }
    form.update(changes)
    return form


def written() -> tuple[int, int]:
    return models.NotificationRule.objects.count(), models.NotificationRuleChange.objects.count()


def operator_without_notifications() -> Client:
    """A staff member with every operator action's permission but not
    ``manage_notifications``."""
    ensure_roles()
    user = get_user_model().objects.create_user("olga", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label=APP_LABEL,
            codename__in=[VIEW_BATCH, *OPERATOR_PERMISSIONS],
        )
    )
    client = Client()
    client.force_login(user)
    return client


# -- adding ----------------------------------------------------------------------------------


def test_an_operator_adds_a_webhook_rule_and_sees_its_generated_secret_once(operator_client):
    listing = operator_client.get(reverse("admin:oxide_batch_notificationrule_changelist"))
    assert new_url() in listing.content.decode()
    form_page = operator_client.get(new_url())
    assert form_page.status_code == 200
    text = form_page.content.decode()
    for kind in ("execution.failed", "execution.overdue", "job.missing", "purge.failed"):
        assert f'value="{kind}"' in text  # a box per known kind
    added = operator_client.post(new_url(), webhook_form())
    assert added.status_code == 200  # rendered by the POST itself: no redirect
    assert "no-store" in added["Cache-Control"]
    page = added.content.decode()
    secrets = SECRET_SHAPE.findall(page)
    assert len(set(secrets)) == 1, page
    secret = secrets[0]
    assert "shown this once" in page
    rule = models.NotificationRule.objects.get(name="oncall")
    assert (rule.job_patterns, rule.kinds) == (
        ["nightly_*", "customer_sync"],
        ["execution.failed", "job.missing"],
    )
    assert (rule.destination, rule.destination_hint) == ("webhook", "https://hooks.example.com/…")
    # Encrypted at rest, and it is the secret shown.
    assert secret not in rule.destination_sealed
    assert notify_keys.unseal(rule.destination_sealed) == {
        "url": "https://hooks.example.com/oxide",
        "secret": secret,
    }
    audit = models.NotificationRuleChange.objects.get(rule_id=rule.pk)
    assert (audit.action, audit.actor, audit.actor_user_id) == ("ADD", "otto", rule_user("otto"))
    assert secret not in str(audit.details)
    # Never again: not on the rule's page, the list, nor in a message kept for the next page.
    for later in (
        reverse("admin:oxide_batch_notificationrule_change", args=[rule.pk]),
        reverse("admin:oxide_batch_notificationrule_changelist"),
    ):
        assert secret not in operator_client.get(later).content.decode()


def rule_user(username: str) -> int:
    return int(get_user_model().objects.get(username=username).pk)


@pytest.mark.parametrize(
    ("changes", "destination", "hint"),
    [
        ({"format": "slack"}, "slack", "https://hooks.example.com/…"),
        (
            {"destination": "email", "webhook": "", "email": "a@example.com, b@example.com"},
            "email",
            "2 addresses",
        ),
    ],
    ids=["slack", "email"],
)
def test_a_slack_or_email_rule_has_no_secret_to_show(operator_client, changes, destination, hint):
    page = operator_client.post(new_url(), webhook_form(**changes))
    assert page.status_code == 200
    assert not SECRET_SHAPE.search(page.content.decode())
    rule = models.NotificationRule.objects.get(name="oncall")
    assert (rule.destination, rule.destination_hint) == (destination, hint)


def test_a_given_secret_is_kept_and_never_written_back(operator_client):
    given = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    page = operator_client.post(new_url(), webhook_form(secret=given)).content.decode()
    assert given not in page
    rule = models.NotificationRule.objects.get(name="oncall")
    assert notify_keys.unseal(rule.destination_sealed)["secret"] == given
    # On a refused form the secret typed is not written back into the page either.
    again = operator_client.post(new_url(), webhook_form(name="bad name", secret=given))
    assert given not in again.content.decode()


REFUSALS = [
    ("name", {"name": "bad name"}, "1-64 of"),
    ("name", {"name": " oncall"}, "1-64 of"),
    ("jobs", {"jobs": ""}, "This field is required"),
    ("jobs", {"jobs": "x" * 129}, "128"),
    ("jobs", {"jobs": "job\u200b*"}, "invisible"),
    ("events", {"events": []}, "name at least one event kind"),
    ("events", {"events": ["execution.exploded"]}, "Select a valid choice"),
    ("webhook", {"webhook": "http://hooks.example.com/x"}, "https required"),
    ("webhook", {"webhook": "ftp://hooks.example.com/x"}, "an absolute http(s) URL"),
    ("webhook", {"webhook": ""}, "an absolute http(s) URL"),
    ("secret", {"secret": "not-a-secret"}, "must begin with whsec_"),
    ("secret", {"format": "slack", "secret": "whsec_" + "A" * 32}, "not signed"),
    ("format", {"format": "xml"}, "Select a valid choice"),
    ("email", {"destination": "email", "email": "not-an-address"}, "not an address"),
    ("email", {"destination": "email", "email": ""}, "1 to 20 addresses"),
    ("destination", {"destination": "pigeon"}, "Select a valid choice"),
]


@pytest.mark.parametrize(
    ("field", "changes", "said"), REFUSALS, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(REFUSALS)]
)
def test_a_refused_field_is_an_error_beside_it_and_nothing_is_written(
    operator_client, field, changes, said
):
    before = written()
    page = operator_client.post(new_url(), webhook_form(**changes))
    assert page.status_code == 200
    text = page.content.decode()
    assert "Nothing was written" in text
    errors = page.context["form"].errors
    assert field in errors, errors
    assert said in " ".join(errors[field]), errors
    assert written() == before


def test_a_plain_http_host_named_in_the_setting_is_accepted(operator_client, settings):
    settings.OXIDE_BATCH_WEBHOOK_HTTP_HOSTS = ["127.0.0.1"]
    page = operator_client.post(new_url(), webhook_form(webhook="http://127.0.0.1:9/hook"))
    assert page.status_code == 200
    assert models.NotificationRule.objects.filter(name="oncall").exists()


def test_a_name_taken_meanwhile_is_a_form_error(operator_client):
    make_rule("oncall")  # added by someone else while the form was open
    before = written()
    page = operator_client.post(new_url(), webhook_form())
    assert "a rule named 'oncall' exists" in " ".join(page.context["form"].errors["name"])
    assert written() == before


# -- who may -----------------------------------------------------------------------------------


def test_who_may_not_manage_sees_no_button_and_is_refused(viewer_client):
    make_rule("existing")
    rule = models.NotificationRule.objects.get()
    before = written()
    listing = reverse("admin:oxide_batch_notificationrule_changelist")
    detail = reverse("admin:oxide_batch_notificationrule_change", args=[rule.pk])
    for client in (viewer_client, operator_without_notifications()):
        assert new_url() not in client.get(listing).content.decode()
        page = client.get(detail).content.decode()
        assert "/act/" not in page
        assert client.get(new_url()).status_code == 403
        assert client.post(new_url(), webhook_form()).status_code == 403
        for action in ("remove", "test"):
            assert client.get(act_url(rule, action)).status_code == 403
            assert client.post(act_url(rule, action), {"observed": "x"}).status_code == 403
    anonymous = Client()
    assert anonymous.post(new_url(), webhook_form()).status_code == 302  # to the login page
    assert anonymous.post(act_url(rule, "remove"), {"observed": "x"}).status_code == 302
    assert written() == before


def test_a_forged_post_without_its_csrf_token_is_refused(operator_client):
    make_rule("existing")
    rule = models.NotificationRule.objects.get()
    strict = Client(enforce_csrf_checks=True)
    strict.cookies = operator_client.cookies
    before = written()
    assert strict.post(new_url(), webhook_form()).status_code == 403
    seen = observed(operator_client.get(act_url(rule, "remove")).content.decode())
    assert strict.post(act_url(rule, "remove"), {"observed": seen}).status_code == 403
    assert written() == before


def test_a_viewer_group_member_granted_the_permission_may_add(viewer_client):
    """The permission decides, not the group: a viewer granted
    ``manage_notifications`` adds a rule."""
    user = get_user_model().objects.get(username="vera")
    user.user_permissions.add(Permission.objects.get(codename="manage_notifications"))
    assert Group.objects.get(name=VIEWER) in user.groups.all()
    assert viewer_client.post(new_url(), webhook_form()).status_code == 200
    assert models.NotificationRule.objects.filter(name="oncall").exists()


# -- removing and testing ----------------------------------------------------------------------


def test_removing_a_rule_says_what_goes_and_does_what_the_command_does(operator_client):
    rule = make_rule()
    make_delivery(rule, state="pending", attempts=0, error="")
    make_delivery(rule, state="pending", attempts=2)
    make_delivery(rule, state="dead")
    make_delivery(rule, state="delivered", attempts=1, error="")
    other = make_rule("other")
    kept = make_delivery(other, state="pending", attempts=0, error="")
    detail = reverse("admin:oxide_batch_notificationrule_change", args=[rule.pk])
    assert act_url(rule, "remove") in operator_client.get(detail).content.decode()
    page = operator_client.get(act_url(rule, "remove")).content.decode()
    assert "2 pending (1 of them retrying) are never attempted again" in page
    assert "1 dead and 1 delivered are forgotten" in page
    done = operator_client.post(act_url(rule, "remove"), {"observed": observed(page)}, follow=True)
    assert done.redirect_chain[-1][0] == reverse("admin:oxide_batch_notificationrule_changelist")
    assert "removed with its deliveries (audited)" in done.content.decode()
    assert not models.NotificationRule.objects.filter(pk=rule.pk).exists()
    assert not models.NotificationDelivery.objects.filter(rule_id=rule.pk).exists()
    assert models.NotificationDelivery.objects.filter(pk=kept.pk).exists()
    assert models.NotificationEvent.objects.count() == 5  # the events stay
    removal = models.NotificationRuleChange.objects.get(rule_name="oncall", action="REMOVE")
    assert removal.actor == "otto"
    assert removal.details["hint"] == "https://hooks.example.com/…"


def test_a_rule_removed_meanwhile_is_said_never_a_500(operator_client):
    rule = make_rule()
    seen = observed(operator_client.get(act_url(rule, "remove")).content.decode())
    NotificationRules().remove("oncall", by=ChangeBy("other"))
    for action in ("remove", "disable", "test"):
        page = operator_client.post(act_url(rule, action), {"observed": seen}, follow=True)
        assert page.status_code == 200
        assert f"rule #{rule.pk} is no longer there" in page.content.decode()
        assert operator_client.get(act_url(rule, action)).status_code == 404
    assert models.NotificationRuleChange.objects.filter(action="REMOVE").count() == 1


def test_a_stale_removal_is_refused(operator_client):
    rule = make_rule()
    seen = observed(operator_client.get(act_url(rule, "remove")).content.decode())
    NotificationRules().disable("oncall", by=ChangeBy("other"))
    page = operator_client.post(act_url(rule, "remove"), {"observed": seen}, follow=True)
    assert "Refused (stale)" in page.content.decode()
    assert models.NotificationRule.objects.filter(pk=rule.pk).exists()


def test_a_test_message_goes_through_the_service_and_is_audited(operator_client, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    operator_client.post(
        new_url(),
        webhook_form(destination="email", webhook="", email="oncall@example.com"),
    )
    rule = models.NotificationRule.objects.get(name="oncall")
    page = operator_client.get(act_url(rule, "test")).content.decode()
    assert "notification.test" in page
    done = operator_client.post(act_url(rule, "test"), {"observed": observed(page)}, follow=True)
    assert "Test of rule &#x27;oncall&#x27;: delivered" in done.content.decode()
    assert [m.to for m in mail.outbox] == [["oncall@example.com"]]
    test = models.NotificationRuleChange.objects.get(rule_id=rule.pk, action="TEST")
    assert test.actor == "otto"
    assert test.details["outcome"].startswith("delivered")


def test_a_refused_test_message_is_a_warning_not_a_success(operator_client, settings):
    settings.OXIDE_BATCH_WEBHOOK_HTTP_HOSTS = ["127.0.0.1"]
    operator_client.post(new_url(), webhook_form(webhook="http://127.0.0.1:9/closed"))
    rule = models.NotificationRule.objects.get(name="oncall")
    seen = observed(operator_client.get(act_url(rule, "test")).content.decode())
    done = operator_client.post(act_url(rule, "test"), {"observed": seen}, follow=True)
    shown = [(m.level_tag, m.message) for m in done.context["messages"]]
    assert len(shown) == 1
    assert shown[0][0] == "warning"
    assert "Test of rule 'oncall': retry" in shown[0][1]


# -- queries -----------------------------------------------------------------------------------


def _posted(client: Client, url: str, data: dict[str, Any]) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        assert client.post(url, data).status_code in {200, 302}
    return len(captured.captured_queries)


def test_adding_removing_and_testing_a_rule_cost_the_same_queries_whatever_exists(
    operator_client, settings
):
    """Each POST's statements do not grow with the rules, deliveries and
    audit rows already there (the add and its audit; the removal of a rule
    with 1 or 7 deliveries; a test's read, attempt and audit)."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"

    def rounds(name: str, deliveries: int) -> tuple[int, int, int]:
        added = _posted(operator_client, new_url(), webhook_form(name=name))
        rule = models.NotificationRule.objects.get(name=name)
        for _ in range(deliveries):
            make_delivery(rule, state="pending", attempts=1)
        models.NotificationRule.objects.filter(pk=rule.pk).update(destination="email")
        sealed = notify_keys.seal({"addresses": ["oncall@example.com"]})
        models.NotificationRule.objects.filter(pk=rule.pk).update(destination_sealed=sealed)
        rule.refresh_from_db()
        seen = observed(operator_client.get(act_url(rule, "test")).content.decode())
        tested = _posted(operator_client, act_url(rule, "test"), {"observed": seen})
        rule.refresh_from_db()
        seen = observed(operator_client.get(act_url(rule, "remove")).content.decode())
        removed = _posted(operator_client, act_url(rule, "remove"), {"observed": seen})
        return added, tested, removed

    first = rounds("first", 1)
    for index in range(6):
        make_rule(f"more{index}")
    assert rounds("second", 7) == first
