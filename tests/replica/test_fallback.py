"""A replica that cannot be reached, or cannot answer a page's reads: the page
is read from the primary and says so — never a server error — and a replica
found down is left alone for a while instead of being waited for on every page."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections
from django.test import Client

from oxide_batch.db import middleware
from oxide_batch.db.replica import forget_failures, is_down, measure_lag
from oxide_batch.repository import DjangoJobRepository
from tests.helpers import key, launch
from tests.replica.conftest import ALIAS, ON_BOTH, change_url, list_url
from tests.replication import Server

pytestmark = [pytest.mark.postgres, ON_BOTH]

NOTICE = 'id="ob-replica-notice"'


@pytest.fixture
def lag_queries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The aliases the middleware asked for their lag, in order."""
    asked: list[str] = []

    def counted(alias: str) -> float:
        asked.append(alias)
        return measure_lag(alias)

    monkeypatch.setattr(middleware, "measure_lag", counted)
    return asked


@pytest.fixture
def stopped(replica: Server) -> Iterator[Server]:
    """The replica's server is down (stopped at once, as a crash), restarted afterwards."""
    connections[ALIAS].close()
    replica.stop("immediate")
    try:
        yield replica
    finally:
        replica.start()
        replica.wait_for("SELECT pg_is_in_recovery()", True)


@pytest.fixture
def without_the_tables(replica_alias: dict[str, Any], replica: Server) -> Iterator[None]:
    """The alias names the replica's ``postgres`` database: it answers the lag
    query, and fails every read of the app's tables."""
    name = replica_alias["NAME"]
    replica_alias["NAME"] = "postgres"
    connections[ALIAS].close()
    try:
        yield
    finally:
        replica_alias["NAME"] = name
        connections[ALIAS].close()


def test_a_replica_that_is_down_falls_back_to_the_primary_with_a_notice(
    stopped: Server, operator: Client, repo: DjangoJobRepository, lag_queries: list[str]
) -> None:
    execution = launch(repo, key(run="on-the-primary"))
    page = operator.get(list_url())
    assert page.status_code == 200
    text = page.content.decode()
    assert change_url("jobexecution", execution.id) in text
    assert NOTICE in text
    assert "The read replica could not be reached, so this page was read from" in text
    assert lag_queries == [ALIAS]
    # The next page does not wait for it again.
    detail = operator.get(change_url("jobexecution", execution.id))
    assert detail.status_code == 200
    assert NOTICE in detail.content.decode()
    assert lag_queries == [ALIAS]


def test_a_replica_that_fails_a_read_is_read_again_on_the_primary(
    without_the_tables: None, operator: Client, repo: DjangoJobRepository
) -> None:
    execution = launch(repo, key(run="on-the-primary"))
    for url in (list_url(), change_url("jobexecution", execution.id)):
        forget_failures()
        page = operator.get(url)
        assert page.status_code == 200, url
        text = page.content.decode()
        assert "The read replica could not answer, so this page was read again" in text
        assert str(execution.id) in text
        assert is_down(ALIAS)
