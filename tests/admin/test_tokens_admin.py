"""API tokens in the console: listed without a secret, revoked behind a
confirmation page, never added, edited or deleted there; Django's model
permissions decide who sees and who revokes."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from oxide_batch import models
from oxide_batch.repository import FixedClock
from oxide_batch.repository.tokens import IssuedToken, issue_api_token
from oxide_batch.roles import RUNTIME
from tests.api.support import url

User = get_user_model()

pytestmark = pytest.mark.django_db
CHANGELIST = reverse("admin:oxide_batch_apitoken_changelist")


@pytest.fixture
def issued() -> list[IssuedToken]:
    runner = User.objects.create_user("runner")
    runner.groups.add(Group.objects.get(name=RUNTIME))
    now = FixedClock().now()
    return [issue_api_token(user=runner, name=name, now=now) for name in ("nightly", "adhoc")]


def secrets_in(text: str, tokens: list[IssuedToken]) -> list[str]:
    found = []
    for item in tokens:
        for secret in (item.token, item.token[13:], item.row.digest):
            if secret in text:
                found.append(secret)
    return found


def staff(*codenames: str) -> Client:
    user = User.objects.create_user("staffer", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="oxide_batch", codename__in=codenames)
    )
    client = Client()
    client.force_login(user)
    return client


def revoke_post(
    client: Client, tokens: list[IssuedToken], *, follow: bool = False, **extra: str
) -> Any:
    return client.post(
        CHANGELIST,
        {"action": "revoke_selected", "_selected_action": [t.row.pk for t in tokens], **extra},
        follow=follow,
    )


def api_status(token: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return int(client.get(url("descriptor")).status_code)


def test_the_list_and_the_detail_show_no_secret(admin_client: Client, issued: Any) -> None:
    listing = admin_client.get(CHANGELIST)
    assert listing.status_code == 200
    text = listing.content.decode()
    for item in issued:
        assert item.row.key_prefix in text
    assert "nightly" in text
    assert "runner" in text
    assert secrets_in(text, issued) == []
    # No "add": the token is shown only to whoever creates it (the command).
    assert reverse("admin:oxide_batch_apitoken_add") not in text
    detail = admin_client.get(
        reverse("admin:oxide_batch_apitoken_change", args=[issued[0].row.pk])
    ).content.decode()
    assert issued[0].row.key_prefix in detail
    assert secrets_in(detail, issued) == []
    assert 'name="_save"' not in detail  # read-only


def test_revoking_asks_first_then_the_tokens_answer_401(admin_client: Client, issued: Any) -> None:
    confirmation = revoke_post(admin_client, issued)
    assert confirmation.status_code == 200
    text = confirmation.content.decode()
    assert "Revoke API tokens?" in text
    assert all(item.row.key_prefix in text for item in issued)
    assert secrets_in(text, issued) == []
    assert models.ApiToken.objects.filter(revoked_at__isnull=True).count() == 2
    assert api_status(issued[0].token) == 200

    done = revoke_post(admin_client, issued[:1], post="yes")
    assert done.status_code == 302
    assert api_status(issued[0].token) == 401
    assert api_status(issued[1].token) == 200
    revoked = models.ApiToken.objects.get(pk=issued[0].row.pk)
    assert revoked.revoked_at is not None  # kept, listed as revoked

    # Only what is live is offered: the revoked one is left as it is.
    again = revoke_post(admin_client, issued).content.decode()
    assert "1 token to revoke" in again
    assert "Of the selected, 1 is revoked already" in again
    first_revocation = revoked.revoked_at
    revoke_post(admin_client, issued, post="yes")
    assert models.ApiToken.objects.get(pk=issued[0].row.pk).revoked_at == first_revocation
    assert api_status(issued[1].token) == 401


def test_revoking_what_is_revoked_already_says_so(admin_client: Client, issued: Any) -> None:
    revoke_post(admin_client, issued, post="yes")
    response = revoke_post(admin_client, issued, follow=True)
    assert "revoked already" in response.content.decode()


def test_the_console_never_deletes_or_adds_a_token(admin_client: Client, issued: Any) -> None:
    pk = issued[0].row.pk
    assert admin_client.get(reverse("admin:oxide_batch_apitoken_add")).status_code == 403
    delete = reverse("admin:oxide_batch_apitoken_delete", args=[pk])
    assert admin_client.get(delete).status_code == 403
    response = admin_client.post(
        CHANGELIST, {"action": "delete_selected", "_selected_action": [pk], "post": "yes"}
    )
    assert response.status_code in {200, 302}
    assert models.ApiToken.objects.filter(pk=pk).exists()


@pytest.mark.parametrize(
    ("codenames", "lists", "revokes"),
    [
        ((), False, False),
        (("view_batch",), False, False),  # a batch role sees no tokens
        (("view_apitoken",), True, False),
        (("view_apitoken", "change_apitoken"), True, True),
    ],
)
def test_django_permissions_decide_who_sees_and_who_revokes(
    issued: Any, codenames: tuple[str, ...], lists: bool, revokes: bool
) -> None:
    client = staff(*codenames)
    listing = client.get(CHANGELIST)
    assert listing.status_code == (200 if lists else 403)
    if lists:
        assert ("revoke_selected" in listing.content.decode()) is revokes
    revoke_post(client, issued, post="yes")
    assert models.ApiToken.objects.filter(revoked_at__isnull=False).exists() is revokes
