"""Sixty-four runtimes at once over two app servers behind PgBouncer in
transaction pooling: PostgreSQL never holds more client connections to the
database than the pool size, while the app servers hold one persistent
connection per busy thread to the pooler; every request is answered (no 5xx,
no transport error) and every row is at the version its successes produced.

PostgreSQL's count is sampled from a direct connection (not through the
pooler, excluded from the count) every few milliseconds for the whole run."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from django.db import connection, connections

from oxide_batch import models
from oxide_batch.client import RuntimeClient
from oxide_batch.domain.execution import ExecutionCounts
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.status import BatchStatus
from oxide_batch.roles import RUNTIME
from tests.concurrency.support import admin_connection
from tests.live import token_for
from tests.pooler import POOL_SIZE, ScaledOut, scaled_out

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
CLIENTS = 64
CHUNKS = 8
# Two servers × two workers × sixteen threads: as many app threads as clients,
# so each may hold its own connection to the pooler at once.
WORKERS, THREADS = 2, 16
SAMPLE_EVERY = 0.005
BACKENDS = (
    "SELECT pid FROM pg_stat_activity"
    " WHERE datname = %s AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
)


@pytest.fixture(scope="module")
def deployment(django_db_setup: None) -> Iterator[ScaledOut]:
    with scaled_out(workers=WORKERS, threads=THREADS) as running:
        yield running


@dataclass
class Samples:
    postgres: list[int] = field(default_factory=list)
    pids: set[int] = field(default_factory=set)
    pooler_clients: list[int] = field(default_factory=list)
    error: BaseException | None = None


def pooler_clients(admin: psycopg.Connection[Any], database: str) -> int:
    """Client connections PgBouncer holds for ``database`` (its SHOW POOLS)."""
    # The admin console speaks the simple query protocol only: a client cursor.
    with psycopg.ClientCursor(admin) as cursor:
        cursor.execute("SHOW POOLS")
        names = [column.name for column in cursor.description or ()]
        return sum(
            int(row[names.index("cl_active")]) + int(row[names.index("cl_waiting")])
            for row in cursor.fetchall()
            if row[names.index("database")] == database
        )


def sample(deployment: ScaledOut, stop: threading.Event, into: Samples) -> None:
    try:
        take_samples(deployment, stop, into)
    except BaseException as error:  # the test reports it
        into.error = error


def take_samples(deployment: ScaledOut, stop: threading.Event, into: Samples) -> None:
    database = connection.settings_dict["NAME"]
    pooler = psycopg.connect(
        host="127.0.0.1",
        port=deployment.bouncer.port,
        user=connection.settings_dict["USER"],
        dbname="pgbouncer",
        autocommit=True,
    )
    with admin_connection() as direct, pooler:
        while not stop.is_set():
            pids = [int(row[0]) for row in direct.execute(BACKENDS, [database])]
            into.postgres.append(len(pids))
            into.pids.update(pids)
            into.pooler_clients.append(pooler_clients(pooler, database))
            time.sleep(SAMPLE_EVERY)


def test_postgres_holds_at_most_the_pool_size_with_64_clients(deployment: ScaledOut) -> None:
    token = token_for("pooled-runtime", RUNTIME)
    connections.close_all()  # this process's own connection is not counted either
    barrier = threading.Barrier(CLIENTS)
    results: list[Any] = [None] * CLIENTS

    def target(index: int) -> None:
        try:
            results[index] = run(
                deployment.urls[index % len(deployment.urls)], token, index, barrier
            )
        except BaseException as error:  # the test reports it
            results[index] = error

    samples = Samples()
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(deployment, stop, samples), daemon=True)
    sampler.start()
    time.sleep(0.2)
    threads = [threading.Thread(target=target, args=(i,)) for i in range(CLIENTS)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
        assert not thread.is_alive(), "a client hung"
    elapsed = time.monotonic() - started
    stop.set()
    sampler.join(10)

    assert samples.error is None, samples.error
    failures = [r for r in results if isinstance(r, BaseException)]
    assert failures == [], failures[:3]
    for execution_id, step_id, step_version in results:
        execution = models.JobExecution.objects.get(pk=execution_id)
        step = models.StepExecution.objects.get(pk=step_id)
        assert (execution.status, step.status) == ("COMPLETED", "COMPLETED")
        assert step.version == step_version  # each success once, none lost
        assert (step.read_count, step.committed_count) == (CHUNKS, CHUNKS)
    assert samples.postgres, "no sample taken"
    peak = max(samples.postgres)
    print(
        f"\n{CLIENTS} clients, {CLIENTS * (6 + CHUNKS)} requests in {elapsed:.1f}s over "
        f"{len(deployment.urls)} servers: PostgreSQL client connections peak {peak} "
        f"(pool size {POOL_SIZE}, {len(samples.pids)} distinct backends, "
        f"{len(samples.postgres)} samples); pooler clients peak {max(samples.pooler_clients)}"
    )
    assert peak <= POOL_SIZE, samples.postgres
    assert len(samples.pids) <= POOL_SIZE, samples.pids  # the same server connections, reused
    # More app connections than server connections: the pooler multiplexed them.
    assert max(samples.pooler_clients) > POOL_SIZE, samples.pooler_clients


def run(url: str, token: str, index: int, barrier: threading.Barrier) -> tuple[int, int, int]:
    """One whole run (launch, start, a step of CHUNKS chunks, complete); returns
    (execution id, step id, the step version the last success produced)."""
    client = RuntimeClient(url, token, timeout=60)
    barrier.wait(timeout=60)
    _, execution = client.launch("pooled_job", {"run": str(index)})
    execution = client.start(execution)
    step = client.create_step(execution, "load")
    step = client.transition_step(step, step.version, S.STARTED)
    for chunk in range(CHUNKS):
        committed = client.commit_chunk(
            step.id,
            step.version,
            ExecutionCounts(read=1, committed=1),
            checkpoint=StateEnvelope("reader.offset", 1, {"offset": chunk}),
        )
        assert committed.version == step.version + 1
        step = committed
    step = client.transition_step(step, step.version, S.COMPLETED)
    execution = client.transition(execution, execution.version, S.COMPLETED)
    return execution.id, step.id, step.version


def test_the_pooler_sets_the_timeouts_the_app_no_longer_sends(deployment: ScaledOut) -> None:
    """Behind a transaction pooler the app sends no ``options``; PgBouncer's
    ``connect_query`` sets the same timeouts on every server connection."""
    with psycopg.connect(
        host="127.0.0.1",
        port=deployment.bouncer.port,
        user=connection.settings_dict["USER"],
        dbname=deployment.bouncer.database,
        autocommit=True,
        prepare_threshold=None,
    ) as pooled:
        shown = [
            pooled.execute(f"SHOW {name}").fetchone()
            for name in ("statement_timeout", "lock_timeout")
        ]
    assert shown == [("30s",), ("5s",)]
