"""A row id that is no row gets the console's 404 page (issue 39), in the
console's frame and saying which id — not Django's redirect to the admin's
start page with a message."""

from __future__ import annotations

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

PAGES = [
    "jobexecution",
    "jobinstance",
    "stepexecution",
    "steppartition",
    "skip",
    "recoverydecision",
    "operatorrequest",
    "jobdefinition",
]


@pytest.mark.parametrize("model", PAGES)
@pytest.mark.parametrize("view", ["change", "history"])
def test_a_nonexistent_id_is_the_consoles_404(admin_client, model, view):
    url = reverse(f"admin:oxide_batch_{model}_{view}", args=[987654])
    response = admin_client.get(url)
    assert response.status_code == 404
    text = response.content.decode()
    assert "#987654: it never existed, or it was purged." in text
    assert "<h1>Not found</h1>" in text
    assert 'id="header"' in text  # the console's frame
    assert reverse("admin:oxide_batch_dashboard") in text


def test_a_viewer_gets_the_same_404(viewer_client):
    url = reverse("admin:oxide_batch_jobexecution_change", args=[987654])
    assert viewer_client.get(url).status_code == 404


def test_an_id_that_is_no_number_is_a_404_too(admin_client):
    url = reverse("admin:oxide_batch_jobexecution_change", args=["not-an-id"])
    response = admin_client.get(url)
    assert response.status_code == 404
    assert "There is no job execution #not-an-id" in response.content.decode()
