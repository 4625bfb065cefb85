"""What the confirmation was given and does not show, said (issue 25, smaller
points): ids with no row, texts that are no id, more rows than a page takes,
a query string over Django's field limit (a framed 400, not a bare "Bad
Request"); permission refusals name the permission; an unknown action is a 404."""

from __future__ import annotations

import pytest
from django.contrib.admin.sites import site as default_site
from django.core.exceptions import PermissionDenied
from django.test import RequestFactory
from django.urls import reverse

from oxide_batch import models
from oxide_batch.admin.actions.selection import MAX_ROWS
from tests.admin.test_actions import _url

pytestmark = pytest.mark.django_db


def test_an_unknown_id_is_said_not_just_counted(operator_client, demo):
    stopped = models.JobExecution.objects.filter(status="STOPPED").first()
    url = _url("jobexecution", "abandon", stopped.pk, 999999) + ",abc"
    text = operator_client.get(url).content.decode()
    assert "1 row selected, 1 to abandon" in text
    assert "No execution #999999 (purged or never existed)." in text
    assert "Not execution ids, ignored: “abc”." in text


def test_only_unknown_ids_say_why_nothing_is_listed(operator_client, demo):
    text = operator_client.get(_url("jobexecution", "recover", 999999)).content.decode()
    assert "0 rows selected" in text
    assert "No execution #999999 (purged or never existed)." in text
    assert 'id="confirm"' not in text
    text = operator_client.get(_url("jobinstance", "hold", 999999)).content.decode()
    assert "No instance #999999 (purged or never existed)." in text


def test_repeated_ids_are_read_like_a_comma_list(operator_client, demo):
    ids = list(
        models.JobExecution.objects.filter(status__in=["FAILED", "STOPPED"])
        .order_by("pk")
        .values_list("pk", flat=True)[:2]
    )
    url = reverse("admin:oxide_batch_jobexecution_act", args=["abandon"])
    text = operator_client.get(url, {"ids": [str(pk) for pk in ids]}).content.decode()
    assert "2 rows selected, 2 to abandon" in text


def test_more_rows_than_a_page_takes_are_said(operator_client, demo):
    ids = ",".join(str(n) for n in range(1, MAX_ROWS + 51))
    url = reverse("admin:oxide_batch_jobexecution_act", args=["stop"]) + f"?ids={ids}"
    text = operator_client.get(url).content.decode()
    assert f"At most {MAX_ROWS} rows can be confirmed at once" in text
    # The changelist's own redirect marks a selection it cut.
    url = _url("jobexecution", "stop", 1) + "&more=1"
    assert f"At most {MAX_ROWS} rows can be confirmed at once" in (
        operator_client.get(url).content.decode()
    )


def test_thousands_of_repeated_ids_are_a_framed_400_that_says_the_limit(operator_client, demo):
    url = (
        reverse("admin:oxide_batch_jobexecution_act", args=["recover"])
        + "?"
        + "&".join(f"ids={n}" for n in range(1, 3001))
    )
    response = operator_client.get(url)
    assert response.status_code == 400
    text = response.content.decode()
    assert f"at most {MAX_ROWS} rows can be confirmed at once" in text
    assert 'class="breadcrumbs"' in text  # in the console's frame
    assert "Back to the list" in text
    before = models.OperatorRequest.objects.count()
    assert operator_client.post(url, {"ids": "1"}).status_code in {200, 400}
    assert models.OperatorRequest.objects.count() == before


@pytest.mark.parametrize(
    ("action", "permission"),
    [
        ("recover", "oxide_batch.recover_execution"),
        ("abandon", "oxide_batch.abandon_execution"),
        ("stop", "oxide_batch.stop_execution"),
    ],
)
def test_a_refusal_names_the_permission(viewer_client, demo, action, permission):
    from django.contrib.auth import get_user_model

    request = RequestFactory().get(_url("jobexecution", action, 1))
    request.user = get_user_model().objects.get(username="vera")
    model_admin = default_site._registry[models.JobExecution]
    with pytest.raises(PermissionDenied) as refused:
        model_admin.confirm_view(request, action)
    assert str(refused.value) == permission


def test_an_unknown_action_is_not_found(operator_client, demo):
    url = reverse("admin:oxide_batch_jobexecution_act", args=["explode"]) + "?ids=1"
    assert operator_client.get(url).status_code == 404
