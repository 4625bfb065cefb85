"""A PostgreSQL restart behind PgBouncer (tests/faults/test_restart.py's, through
the pooler): while the database is down both app servers answer every API call
503 ``unavailable`` — PgBouncer refuses a query it cannot place, which reaches
the app as a connection error, and drops a client that has waited for a server
connection past its ``query_wait_timeout`` (5 s) — ``/healthz`` stays 200 and
``/readyz`` is 503; once it is back, PgBouncer opens new server connections by
itself and the same server processes serve again, never answering 500."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from oxide_batch.client import RuntimeClient
from oxide_batch.domain import BatchStatus
from oxide_batch.domain.errors import Unavailable
from oxide_batch.roles import RUNTIME
from tests.faults.test_restart import (  # noqa: F401 (cluster: the fixture)
    Cluster,
    assert_unavailable,
    call,
    cluster,
)
from tests.live import token_for
from tests.pooler import ScaledOut, scaled_out

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.serial,
    pytest.mark.django_db(transaction=True),
]
S = BatchStatus
RECOVERY_DEADLINE = 20.0  # PgBouncer retries a failed server login every second


@pytest.fixture(scope="module")
def deployment(django_db_setup: None) -> Iterator[ScaledOut]:
    with scaled_out(workers=2, threads=2) as running:
        yield running


def test_both_servers_answer_unavailable_while_down_and_recover_through_the_pooler(
    deployment: ScaledOut,
    cluster: Cluster,  # noqa: F811 (the fixture)
) -> None:
    token = token_for("pooled-restart", RUNTIME)
    clients = [RuntimeClient(url, token, timeout=20, retry_budget=0) for url in deployment.urls]
    _, execution = clients[0].launch("pooled_restart_job", {"run": "1"})
    for client in clients:  # every server has connected through the pooler
        assert client.execution(execution.id).version == execution.version
    started = {"expected_version": execution.version, "status": "STARTED"}
    statuses: list[int] = []

    with cluster.down():
        down_at = time.monotonic()
        for _ in range(3):  # several requests: both servers, several workers and threads
            for url, client in zip(deployment.urls, clients, strict=True):
                api = f"{url}/api/v1/executions/{execution.id}"
                for answer in (call(api, token), call(api + "/transition", token, started)):
                    statuses.append(answer[0])
                    assert_unavailable(answer)
                with pytest.raises(Unavailable):
                    client.execution(execution.id)
                with pytest.raises(Unavailable):  # answered, not lost: not commit_outcome_unknown
                    client.transition(execution, execution.version, S.STARTED)
        for url in deployment.urls:
            assert call(url + "/healthz")[0] == 200
            ready = call(url + "/readyz")
            assert ready[0] == 503, ready
        down_for = time.monotonic() - down_at

    back_at = time.monotonic()
    recovered: list[float] = []
    for url in deployment.urls:
        api = f"{url}/api/v1/executions/{execution.id}"
        while True:
            status, _, document = call(api, token)
            statuses.append(status)
            if status == 200 or time.monotonic() > back_at + RECOVERY_DEADLINE:
                break
            time.sleep(0.05)
        assert status == 200, document
        assert document["version"] == execution.version  # nothing moved while down
        recovered.append(time.monotonic() - back_at)
    moved = clients[1].transition(execution, execution.version, S.STARTED)
    assert (moved.status, moved.version) == (S.STARTED, execution.version + 1)
    for url in deployment.urls * 4:  # every worker and thread serves again
        status, _, document = call(f"{url}/api/v1/executions/{execution.id}", token)
        statuses.append(status)
        assert (status, document["status"]) == (200, "STARTED")
        assert call(url + "/readyz")[0] == 200
    assert 500 not in statuses, statuses
    print(
        f"\nthrough PgBouncer: first 200 per server {', '.join(f'{s:.2f}s' for s in recovered)} "
        f"after pg_ctl start returned; {down_for:.1f}s of requests while down; "
        f"{len(statuses)} answers, none 500"
    )
