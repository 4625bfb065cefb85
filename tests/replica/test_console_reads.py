"""Which reads go to the replica: the console's list, detail and dashboard
pages; and which never do: the confirmation pages, the actions, the page right
after an action (pinned), the API, the runtime's repository reads.

The proof is a real hot standby whose replay is paused: a row written on the
primary after the pause is missing on a page read from the replica and present
on a page read from the primary."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from django.db import connection, connections, router
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.test import APIClient

from oxide_batch import models
from oxide_batch.conf import REPLICA_MIDDLEWARE, replica_wiring_check
from oxide_batch.db.middleware import PIN_COOKIE
from oxide_batch.db.replica import PageReads, page_reads
from oxide_batch.domain import BatchStatus
from oxide_batch.repository import DjangoJobRepository
from tests.helpers import api_token, key, launch, move
from tests.replica.conftest import (
    ALIAS,
    ON_BOTH,
    act_url,
    change_url,
    list_url,
    unreplayed,
)
from tests.replication import Server

pytestmark = [pytest.mark.postgres, ON_BOTH]


def batch_reads(captured: CaptureQueriesContext) -> list[str]:
    """The statements on the app's tables (``ob_…``) a connection ran."""
    return [q["sql"] for q in captured.captured_queries if '"ob_' in q["sql"]]


def started(repo: DjangoJobRepository, run: str) -> Any:
    return move(repo, launch(repo, key(run=run)), BatchStatus.STARTED)


def confirmation_form(text: str) -> dict[str, str]:
    """The hidden fields of a confirmation page, to post it as confirmed."""
    fields = dict(re.findall(r'type="hidden" name="([^"]+)" value="([^"]*)"', text))
    fields.pop("csrfmiddlewaretoken", None)
    return fields


def test_lists_details_and_the_dashboard_read_the_replica(
    replica: Server, operator: Client, repo: DjangoJobRepository
) -> None:
    seen = started(repo, "before-the-pause")
    unseen = unreplayed(replica, lambda: started(repo, "after-the-pause"))

    page = operator.get(list_url()).content.decode()
    assert change_url("jobexecution", seen.id) in page
    assert change_url("jobexecution", unseen.id) not in page
    # Not on the replica yet: the console's 404 page (issue 39), for the
    # execution's page, its history and its instance's page alike.
    assert operator.get(change_url("jobexecution", seen.id)).status_code == 200
    for url in (
        change_url("jobexecution", unseen.id),
        reverse("admin:oxide_batch_jobexecution_history", args=[unseen.id]),
        change_url("jobinstance", unseen.job_instance_id),
    ):
        assert operator.get(url).status_code == 404, url

    # The dashboard (and its timeline) reads the app's tables on the replica only.
    with (
        CaptureQueriesContext(connections[ALIAS]) as on_replica,
        CaptureQueriesContext(connection) as on_primary,
    ):
        dashboard = operator.get(reverse("admin:oxide_batch_dashboard") + f"?execution={seen.id}")
    assert dashboard.status_code == 200
    assert batch_reads(on_replica)
    assert batch_reads(on_primary) == []


def test_the_confirmation_page_and_the_action_read_the_primary(
    replica: Server, operator: Client, repo: DjangoJobRepository
) -> None:
    unseen = unreplayed(replica, lambda: started(repo, "after-the-pause"))
    url = act_url("jobexecution", "stop", unseen.id)

    with CaptureQueriesContext(connections[ALIAS]) as on_replica:
        page = operator.get(url)
        text = page.content.decode()
        # The row is found, with the version the action will expect (primary).
        assert f'name="version_{unseen.id}" value="{unseen.version}"' in text
        # The recovery proposal (and its evidence) is read on the primary too.
        proposal = operator.get(act_url("jobexecution", "recover", unseen.id)).content.decode()
        assert "evidence digest" in proposal
        done = operator.post(url, confirmation_form(text))
    assert done.status_code == 302
    assert on_replica.captured_queries == []
    # Outside a console read page the app's reads go to the primary.
    assert models.JobExecution.objects.get(pk=unseen.id).stop_requested_by == "otto"


def test_the_page_after_an_action_reads_the_primary(
    replica: Server, operator: Client, repo: DjangoJobRepository, settings: Any
) -> None:
    settings.OXIDE_BATCH_REPLICA_PIN = "2s"
    running = started(repo, "stopped-by-the-operator")
    url = act_url("jobexecution", "stop", running.id)
    done = unreplayed(
        replica,
        lambda: operator.post(
            url, confirmation_form(operator.get(url).content.decode()), follow=True
        ),
    )

    # The redirect lands on the execution's page, read on the primary: the stop shows.
    assert done.redirect_chain[-1][0] == change_url("jobexecution", running.id)
    assert "stop requested by otto" in done.content.decode()
    assert PIN_COOKIE in operator.cookies
    # Once the pin has expired the page reads the (paused) replica again.
    time.sleep(3.1)
    later = operator.get(change_url("jobexecution", running.id)).content.decode()
    assert "no stop requested" in later


def test_the_api_and_the_runtime_read_the_primary(
    replica: Server, operator: Client, repo: DjangoJobRepository
) -> None:
    from django.contrib.auth import get_user_model

    unseen = unreplayed(replica, lambda: started(repo, "after-the-pause"))

    api = APIClient()
    user = get_user_model().objects.get(username="otto")
    api.credentials(HTTP_AUTHORIZATION=f"Token {api_token(user)}")
    with CaptureQueriesContext(connections[ALIAS]) as on_replica:
        found = api.get(reverse("oxide_batch:api:execution", args=[unseen.id]))
        listed = api.get(reverse("oxide_batch:api:executions"))
    assert found.status_code == 200, found.content
    assert found.json()["id"] == unseen.id
    assert unseen.id in [row["id"] for row in listed.json()["results"]]
    assert on_replica.captured_queries == []

    # Outside a request (commands, the watchdog, an in-process runtime)
    # nothing is marked: the router sends the app's reads to the primary.
    assert router.db_for_read(models.JobExecution) == "default"
    # The runtime's reads are the repository's: its explicit alias, even
    # inside a page marked to read the replica.
    with page_reads(PageReads(replica=ALIAS)), repo.begin() as uow:
        assert uow.get_job_execution(unseen.id).status is BatchStatus.STARTED


def test_a_replica_without_its_router_or_middleware_is_a_warning(
    replica: Server, settings: Any
) -> None:
    assert replica_wiring_check() == []
    settings.DATABASE_ROUTERS = []
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if m != REPLICA_MIDDLEWARE]
    assert [w.id for w in replica_wiring_check()] == ["oxide_batch.W203", "oxide_batch.W204"]
