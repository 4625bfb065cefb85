"""A real PostgreSQL restart while the app runs (scripts/with-postgres's cluster,
stopped with ``pg_ctl stop -m fast`` and started again with its own options).

While the database is down, gunicorn answers every API call 503 ``unavailable``
with ``Retry-After`` (a mutation too: nothing reached the database), ``/healthz``
stays 200 and ``/readyz`` is 503; the repository raises ``Unavailable`` and the
commands exit 7 with one line. Once it is back, the same server processes and
the same Python process serve again without a restart, never answering 500; a
purge run survives a restart between two batches, and a batch whose connection
dies mid-batch deletes nothing."""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib import error as urlerror
from urllib import request as urlrequest

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from django.test import override_settings

from oxide_batch import models
from oxide_batch.client import RuntimeClient
from oxide_batch.client.wire import PROBLEM_CONTENT_TYPE
from oxide_batch.domain import BatchStatus
from oxide_batch.domain.errors import Unavailable
from oxide_batch.domain.events import PurgeApplied
from oxide_batch.domain.retention import format_instant
from oxide_batch.management.commands import purge_batch_metadata
from oxide_batch.management.commands._cli import release_idle_connections
from oxide_batch.repository import hooks
from oxide_batch.roles import RUNTIME
from tests.concurrency.support import backend_pid
from tests.helpers import launch, refuse_parallel_workers
from tests.live import ROOT, database_url, gunicorn, token_for
from tests.repository.test_retention import build_instance, rows_of

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.serial,
    pytest.mark.django_db(transaction=True),
]
S = BatchStatus
UNAVAILABLE_EXIT = 7
PURGE = "purge_batch_metadata"
RECOVERY_DEADLINE = 15.0


class Cluster:
    """scripts/with-postgres's cluster, stopped and started in place."""

    def __init__(self, bindir: str, data: str) -> None:
        self.bindir = Path(bindir)
        self.data = Path(data)
        # What with-postgres started it with (port, socket directory, listen
        # address, max_connections, durability): a bare start would use the
        # defaults (port 5432) and nobody would find it.
        self.options = self._postmaster_options()

    def _postmaster_options(self) -> str:
        words = shlex.split((self.data / "postmaster.opts").read_text())[1:]
        kept: list[str] = []
        skip = False
        for word in words:
            if skip:
                skip = False
            elif word == "-D":
                skip = True  # pg_ctl passes -D itself
            else:
                kept.append(word)
        return shlex.join(kept)

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        return subprocess.run(
            [*as_owner, str(self.bindir / "pg_ctl"), "-D", str(self.data), *args],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )

    def running(self) -> bool:
        return self._pg_ctl("status").returncode == 0

    def stop(self) -> None:
        done = self._pg_ctl("stop", "-m", "fast", "-w", "-t", "60")
        assert done.returncode == 0, done.stdout + done.stderr

    def start(self) -> None:
        log = self.data.parent / "server.log"
        done = self._pg_ctl("start", "-w", "-t", "60", "-l", str(log), "-o", self.options)
        assert done.returncode == 0, done.stdout + done.stderr

    @contextmanager
    def down(self) -> Iterator[None]:
        """The database stopped for the block, started again whatever happens."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def restart(self) -> None:
        with self.down():
            pass


@pytest.fixture
def cluster(transactional_db: None) -> Iterator[Cluster]:
    """The test cluster, running again at the end even if the test failed, and
    this process's connections replaced (pytest-django flushes through them).
    Stopping it would break every other worker's tests: it refuses to run
    beside them (scripts/test runs the ``serial`` tests alone)."""
    refuse_parallel_workers("restarts the shared server")
    bindir = os.environ.get("OXIDE_BATCH_PG_BINDIR")
    data = os.environ.get("OXIDE_BATCH_PG_DATA")
    if not bindir or not data:
        pytest.skip("needs OXIDE_BATCH_PG_BINDIR and OXIDE_BATCH_PG_DATA (scripts/with-postgres)")
    controlled = Cluster(bindir, data)
    try:
        yield controlled
    finally:
        if not controlled.running():
            controlled.start()
        for each in connections.all(initialized_only=True):
            each.close()


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[str]:
    with gunicorn() as url:
        yield url


# -- HTTP ----------------------------------------------------------------------------


def call(url: str, token: str | None = None, body: Any = None) -> tuple[int, dict[str, str], Any]:
    """(status, headers, JSON body) of one request; never raises for an HTTP status."""
    headers = {"Accept": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Token {token}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    call = urlrequest.Request(url, data=data, headers=headers)
    try:
        with urlrequest.urlopen(call, timeout=20) as answer:
            return answer.status, dict(answer.headers), json.loads(answer.read() or b"null")
    except urlerror.HTTPError as answer:
        return answer.code, dict(answer.headers), json.loads(answer.read() or b"null")


def assert_unavailable(answer: tuple[int, dict[str, str], Any]) -> None:
    status, headers, document = answer
    assert status == 503, answer
    assert headers["Content-Type"].startswith(PROBLEM_CONTENT_TYPE), headers
    assert document["code"] == "unavailable", document
    assert int(headers["Retry-After"]) > 0


def server_pids(url: str) -> set[int]:
    """The gunicorn master and workers serving ``url`` (same command line)."""
    bind = url.removeprefix("http://")
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if bind.encode() in argv and any(b"gunicorn" in word for word in argv):
                found.add(int(entry.name))
    return found


def test_the_api_answers_unavailable_while_down_and_recovers_without_a_restart(
    server: str, cluster: Cluster
) -> None:
    token = token_for("restarted-runtime", RUNTIME)
    client = RuntimeClient(server, token, timeout=20, retry_budget=0)
    _, execution = client.launch("restart_job", {"run": "1"})
    api = f"{server}/api/v1/executions/{execution.id}"
    started = {"expected_version": execution.version, "status": "STARTED"}
    pids = server_pids(server)
    assert len(pids) == 3  # the master and two workers
    statuses: list[int] = []

    with cluster.down():
        for _ in range(3):  # several requests: both workers, several threads
            with pytest.raises(Unavailable):
                client.execution(execution.id)
            with pytest.raises(Unavailable):  # answered, not lost: not commit_outcome_unknown
                client.transition(execution, execution.version, S.STARTED)
            read = call(api, token)
            mutation = call(api + "/transition", token, started)
            for answer in (read, mutation):
                statuses.append(answer[0])
                assert_unavailable(answer)
        assert call(server + "/healthz")[0] == 200
        ready = call(server + "/readyz")
        assert ready[0] == 503, ready
        assert ready[2]["code"] == "unavailable"

    back_at = time.monotonic()
    deadline = back_at + RECOVERY_DEADLINE
    while True:
        status, _, document = call(api, token)
        statuses.append(status)
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    recovered = time.monotonic() - back_at
    assert status == 200, document
    assert document["version"] == execution.version  # nothing moved while down
    moved = client.transition(execution, execution.version, S.STARTED)
    assert (moved.status, moved.version) == (S.STARTED, execution.version + 1)
    for _ in range(8):  # the other workers' and threads' killed connections are replaced too
        status, _, document = call(api, token)
        statuses.append(status)
        assert (status, document["status"]) == (200, "STARTED")
    assert call(server + "/readyz")[0] == 200
    assert 500 not in statuses, statuses
    assert server_pids(server) == pids  # the same processes: no worker was replaced
    print(
        f"\nfirst 200 {recovered:.3f}s after pg_ctl start returned; "
        f"{len(statuses)} answers, none 500"
    )


# -- in process ------------------------------------------------------------------------


def refused(*args: str) -> tuple[int, str, str]:
    """(exit code, message, stdout) of a command that failed in this process."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as failure:
        call_command(*args, stdout=out, stderr=err)
    return failure.value.returncode, str(failure.value), out.getvalue()


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    """``manage.py`` in its own process, on the test database."""
    environment = {**os.environ, "DATABASE_URL": database_url()}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_repository_and_the_commands_are_unavailable_while_down_then_work(repo, cluster):
    execution = launch(repo)
    instance = str(execution.job_instance_id)
    with cluster.down():
        with pytest.raises(Unavailable), repo.begin() as uow:
            uow.get_job_execution(execution.id)
        failures = [
            refused("batch_executions", "--instance", instance),
            refused("batch_executions", "--unresolved-for", "1m"),  # a selector, no repository
            refused(PURGE, "--older-than", "30d", "--dry-run"),
            refused("prune_batch_audit", "--older-than", "30d", "--dry-run"),
        ]
        for code, message, _ in failures:
            assert (code, message) == (UNAVAILABLE_EXIT, "unavailable: repository is unavailable")
        _, _, out = refused(PURGE, "--older-than", "30d", "--dry-run", "--json")
        document = json.loads(out)
        assert (document["ok"], document["exit_code"]) == (False, UNAVAILABLE_EXIT)
        assert document["error"]["code"] == "unavailable"
        # A real process: exit status 7 and one line on stderr, no traceback.
        process = manage("batch_executions", "--unresolved-for", "1m")
        assert process.returncode == UNAVAILABLE_EXIT, process.stderr
        assert process.stderr == "CommandError: unavailable: repository is unavailable\n"
        print(f"\nwhile down: exit {process.returncode}, stderr {process.stderr!r}")
    # The same process, nothing reset by hand: the failed connection is replaced.
    with repo.begin() as uow:
        assert uow.get_job_execution(execution.id) == execution
    out = io.StringIO()
    call_command("batch_executions", "--instance", instance, "--json", stdout=out)
    assert [row["id"] for row in json.loads(out.getvalue())["executions"]] == [execution.id]
    assert manage("batch_executions", "--unresolved-for", "1m").returncode == 0


def test_release_idle_connections_replaces_a_connection_the_restart_killed(repo, cluster):
    execution = launch(repo)
    killed = backend_pid()
    cluster.restart()
    # Without this call the first unit of work would fail once with Unavailable:
    # outside a request nothing else health-checks an idle persistent connection.
    release_idle_connections()
    with repo.begin() as uow:
        assert uow.get_job_execution(execution.id) == execution
    assert backend_pid() != killed


@pytest.fixture
def old_instances(repo, clock) -> list[int]:
    """Four finished instances, due for purging (two batches of two)."""
    return [build_instance(repo, clock, f"old-{n}", steps=1) for n in range(4)]


def purge_args(clock, operation_id: str) -> tuple[str, ...]:
    cutoff = format_instant(clock.now() + timedelta(seconds=1))
    return (
        PURGE,
        "--ended-before",
        cutoff,
        "--batch-size",
        "2",
        "--yes",
        "--json",
        "--operation-id",
        operation_id,
    )


def purged(instance_ids: list[int]) -> list[bool]:
    return [set(rows_of(instance).values()) == {0} for instance in instance_ids]


def purge_records() -> list[tuple[str, int]]:
    rows = models.RetentionRecord.objects.filter(action="APPLY_PURGE").order_by("id")
    return [(row.operation_id, row.deleted_job_instances) for row in rows]


@override_settings(OXIDE_BATCH_PURGE_MIN_AGE=timedelta(0))
def test_a_purge_run_survives_a_restart_between_two_batches(
    clock, cluster, old_instances, monkeypatch
):
    release = purge_batch_metadata.release_idle_connections
    restarts: list[float] = []
    pids: list[int] = []

    def restart_then_release() -> None:
        if not restarts:  # between batch 1 and batch 2, once
            pids.append(backend_pid())
            began = time.monotonic()
            cluster.restart()
            restarts.append(time.monotonic() - began)
        release()

    monkeypatch.setattr(purge_batch_metadata, "release_idle_connections", restart_then_release)
    out = io.StringIO()
    call_command(*purge_args(clock, "nightly"), stdout=out)

    document = json.loads(out.getvalue())
    assert document["ok"], document
    assert [(b["number"], b["outcome"]) for b in document["batches"]] == [
        (1, "APPLIED"),
        (2, "APPLIED"),
    ]
    assert document["counts"]["job_instances"] == 4
    assert len(restarts) == 1
    assert backend_pid() != pids[0]  # batch 2 ran on a new connection
    assert purged(old_instances) == [True] * 4
    assert purge_records() == [("nightly:1", 2), ("nightly:2", 2)]  # each once
    print(f"\nrestart between batches took {restarts[0]:.2f}s; the run completed")


@override_settings(OXIDE_BATCH_PURGE_MIN_AGE=timedelta(0))
def test_a_batch_cut_off_by_a_shutdown_deletes_nothing_and_a_rerun_resumes(
    clock, cluster, old_instances
):
    before = {instance: rows_of(instance) for instance in old_instances}
    applied: list[int] = []

    def shut_down_inside_batch_two(event: hooks.OperationEvent) -> None:
        # After batch 2's deletes ran, before its audit row and COMMIT.
        if event.operation == "apply_purge" and event.outcome == "ok":
            [purged] = event.events
            assert isinstance(purged, PurgeApplied)
            applied.append(purged.counts.job_instances)
            if len(applied) == 2:
                cluster.stop()

    hooks.register(shut_down_inside_batch_two)
    try:
        code, message, out = refused(*purge_args(clock, "weekly"))
    finally:
        hooks.unregister(shut_down_inside_batch_two)
        cluster.start()

    assert (code, message) == (UNAVAILABLE_EXIT, "unavailable: repository is unavailable")
    document = json.loads(out)
    assert document["error"]["code"] == "unavailable"
    assert [b["number"] for b in document["progress"]["batches"]] == [1]
    assert applied == [2, 2]  # batch 2 had deleted its two instances when the server went
    # Batch 1 committed; batch 2 rolled back whole: both of its instances intact.
    assert document["progress"]["counts"]["job_instances"] == 2
    gone = purged(old_instances)
    assert gone.count(True) == 2
    for instance, done in zip(old_instances, gone, strict=True):
        assert rows_of(instance) == (
            {kind: 0 for kind in before[instance]} if done else before[instance]
        )
    assert purge_records() == [("weekly:1", 2)]

    out = io.StringIO()
    call_command(*purge_args(clock, "weekly"), stdout=out)  # the same operation id resumes
    rerun = json.loads(out.getvalue())
    assert [(b["number"], b["outcome"]) for b in rerun["batches"]] == [
        (1, "REPLAYED"),
        (2, "APPLIED"),
    ]
    assert purged(old_instances) == [True] * 4
    assert purge_records() == [("weekly:1", 2), ("weekly:2", 2)]
