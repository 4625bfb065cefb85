"""A page read from the replica says how far behind it is, above
``OXIDE_BATCH_REPLICA_LAG_NOTICE`` (1 s in these tests); a replica that has
replayed all it received is not behind, however long the primary idled."""

from __future__ import annotations

import re
import time

import pytest
from django.test import Client
from django.urls import reverse

from oxide_batch.db.replica import measure_lag
from oxide_batch.domain import BatchStatus
from oxide_batch.repository import DjangoJobRepository
from tests.helpers import key, launch, move, refuse_parallel_workers
from tests.replica.conftest import (
    ALIAS,
    ON_BOTH,
    act_url,
    caught_up,
    change_url,
    list_url,
    unreplayed,
)
from tests.replication import Server

pytestmark = [pytest.mark.postgres, ON_BOTH]

NOTICE = 'id="ob-replica-notice"'
THRESHOLD = 1.0  # the replica fixture's OXIDE_BATCH_REPLICA_LAG_NOTICE


def newest_replay_age(replica: Server) -> float:
    """What a lag measure that ignores an idle primary would say: the age of
    the newest transaction the replica replayed."""
    with replica.connect() as session:
        row = session.execute(
            "SELECT EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp())"
        ).fetchone()
    assert row is not None
    return float(row[0])


def test_a_replica_behind_by_more_than_the_threshold_says_so(
    replica: Server, operator: Client, repo: DjangoJobRepository
) -> None:
    execution = launch(repo, key(run="replayed"))
    unreplayed(replica, lambda: move(repo, execution, BatchStatus.STARTED))
    time.sleep(THRESHOLD + 0.5)

    for url in (
        list_url(),
        change_url("jobexecution", execution.id),
        reverse("admin:oxide_batch_dashboard"),
    ):
        text = operator.get(url).content.decode()
        assert NOTICE in text, url
        assert re.search(r"read from a replica that is \d seconds behind the primary", text)
    # A page read from the primary is current: no notice.
    confirmation = operator.get(act_url("jobexecution", "stop", execution.id))
    assert NOTICE not in confirmation.content.decode()


@pytest.mark.serial
def test_an_idle_caught_up_replica_is_not_behind(
    replica: Server, operator: Client, repo: DjangoJobRepository
) -> None:
    # Other workers' commits on the cluster would keep the replica's newest
    # replayed commit young: the primary must idle for this test.
    refuse_parallel_workers("needs the test cluster idle")
    launch(repo, key(run="replayed"))
    caught_up(replica)
    time.sleep(THRESHOLD + 0.5)  # the primary idles
    assert newest_replay_age(replica) > THRESHOLD

    assert measure_lag(ALIAS) == 0
    assert NOTICE not in operator.get(list_url()).content.decode()
