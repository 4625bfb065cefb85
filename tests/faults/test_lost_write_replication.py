"""A lost acknowledged write after a real failover (issue 26 point 3).

A primary (a copy of the test cluster, its databases migrated) streams its WAL
to a standby (tests/replication.py); gunicorn serves the app on
``DATABASE_URL`` naming both servers with ``target_session_attrs=read-write``,
so the same app server reaches whichever is the primary. A runtime using the
high-level client (``job_run`` / ``run.step``) commits chunks; everything so
far reaches the standby.

Asynchronous replication: the standby's WAL stream is cut (it is stopped), one
more chunk commits — acknowledged with a 200, as asynchronous replication does
without the standby — and the primary is killed; the standby is started and
promoted, so the new primary lacks that chunk deterministically. The runtime's
next chunk commit is refused ``version_ahead`` (not ``stale_version``): the
client raises ``LostWrite`` and writes nothing more; the step on the new primary
is exactly as before the lost chunk; the execution carries the ``lost_write``
marker; the watchdog leaves it although its lease expired; a recovery proposal
shows the unknown-commit marker and ``MARK_FAILED`` needs ``UNKNOWN_EFFECT``.

Synchronous replication: the same kill and promotion loses nothing — the next
chunk commits, the run completes, no marker.

The servers are the test's own (ports and directories of their own): safe under
pytest-xdist; the shared test cluster is only read by ``pg_basebackup``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from django.core.management import call_command
from django.db import connection

from oxide_batch import models
from oxide_batch.client import LostWrite, OperatorClient, RuntimeClient
from oxide_batch.domain.errors import StaleVersion, UnresolvedRecoveryRequired, VersionAhead
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.management.commands import batch_watchdog
from oxide_batch.roles import OPERATOR, RUNTIME
from tests.live import gunicorn, token_for
from tests.replication import Server, bindir, primary_and_standby

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
JOB = "nightly_import"
PARAMETERS = {"business_date": "2026-07-29"}
CHUNK = 10
EXECUTIONS = models.JobExecution._meta.db_table
STEPS = models.StepExecution._meta.db_table


class RecordingClient(RuntimeClient):
    """A runtime client that records every request it sends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[tuple[str, str]] = []

    def _request(
        self, method: str, path: str, body: Any = None, query: Any = None
    ) -> tuple[int, Any]:
        self.sent.append((method, path))
        return super()._request(method, path, body, query)


@dataclass
class Deployment:
    primary: Server
    standby: Server
    runtime: RecordingClient
    operator: OperatorClient


def both_hosts(primary: Server, standby: Server) -> str:
    """The test database on both servers, primary first: libpq takes the one
    that accepts a read-write session."""
    db = connection.settings_dict
    user = quote(db["USER"] or "postgres", safe="")
    name = quote(db["NAME"], safe="")
    return (
        f"postgres://{user}@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/{name}"
        "?target_session_attrs=read-write"
    )


@contextmanager
def deployed(*, synchronous: bool) -> Iterator[Deployment]:
    """A primary, its standby and gunicorn on both; the tokens are made before
    the copy, so both servers have them."""
    bindir()  # skip early off PostgreSQL / without scripts/with-postgres
    runtime_token = token_for("worker-1", RUNTIME)
    operator_token = token_for("olga.ops", OPERATOR)
    with (
        primary_and_standby(synchronous=synchronous) as (primary, standby),
        gunicorn(database=both_hosts(primary, standby), workers=1, threads=2) as url,
    ):
        runtime = RecordingClient(url, runtime_token, timeout=20)
        yield Deployment(primary, standby, runtime, OperatorClient(url, operator_token, timeout=20))


def row(server: Server, table: str, pk: int) -> dict[str, Any]:
    """A row as ``server`` stores it (every column)."""
    with server.connect() as db:
        found = db.execute(f"SELECT to_jsonb(r) FROM {table} r WHERE id = %s", (pk,)).fetchone()
    assert found is not None, f"{table} {pk} is not on port {server.port}"
    return dict(found[0])


def replicated(primary: Server, standby: Server) -> None:
    """Until the standby replayed everything the primary wrote so far."""
    with primary.connect("postgres") as admin:
        current = admin.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert current is not None
    standby.wait_for(f"SELECT pg_last_wal_replay_lsn() >= '{current[0]}'::pg_lsn", True)


def replication_state(primary: Server) -> list[str]:
    with primary.connect("postgres") as admin:
        return [r[0] for r in admin.execute("SELECT sync_state FROM pg_stat_replication")]


@contextmanager
def django_on(server: Server) -> Iterator[None]:
    """The in-process Django connection (every thread's) on ``server``'s copy of
    the test database; back on the test cluster afterwards."""
    settings = connection.settings_dict
    saved = settings["HOST"], settings["PORT"]
    connection.close()
    settings["HOST"], settings["PORT"] = "127.0.0.1", str(server.port)
    try:
        yield
    finally:
        connection.close()
        settings["HOST"], settings["PORT"] = saved


def chunk(offset: int) -> dict[str, Any]:
    return {"read": CHUNK, "written": CHUNK, "checkpoint": {"offset": offset}}


def test_an_acknowledged_chunk_lost_in_an_async_failover_is_refused_as_version_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with deployed(synchronous=False) as deployment:
        primary, standby, runtime = deployment.primary, deployment.standby, deployment.runtime
        assert replication_state(primary) == ["async"]
        run = runtime.job_run(JOB, PARAMETERS, poll_interval=60)  # no heartbeat meanwhile
        seen: dict[str, Any] = {}

        def job() -> None:
            with run, run.step("load") as step:
                for offset in (10, 20):
                    step.commit(**chunk(offset))
                replicated(primary, standby)
                seen["step"] = row(primary, STEPS, step.step.id)
                seen["execution"] = row(primary, EXECUTIONS, run.execution.id)

                standby.stop("fast")  # the WAL stream is cut
                primary.wait_for("SELECT count(*) FROM pg_stat_replication", 0)
                acknowledged = step.commit(**chunk(30))  # 200: async commits alone
                seen["acknowledged"] = acknowledged.version
                assert row(primary, STEPS, step.step.id)["version"] == acknowledged.version

                primary.kill()  # the machine is gone, with the chunk
                standby.start()
                standby.promote()
                promoted = row(standby, STEPS, step.step.id)
                assert promoted == seen["step"]  # the chunk is lost, deterministically
                seen["sent"] = len(runtime.sent)
                step.commit(**chunk(40))  # the runtime's next write
                seen["after"] = True  # never reached

        with pytest.raises(LostWrite) as lost:
            job()

        step_id, execution_id = seen["step"]["id"], run.execution.id
        ahead, stored = seen["acknowledged"], seen["step"]["version"]
        assert "after" not in seen
        assert ahead == stored + 1
        # The problem is version_ahead, never a stale version to re-read past.
        cause = lost.value.__cause__
        assert isinstance(cause, VersionAhead)
        assert not isinstance(cause, StaleVersion)
        assert (cause.code, cause.expected, cause.actual) == ("version_ahead", ahead, stored)
        assert (lost.value.step_id, lost.value.expected, lost.value.stored) == (
            step_id,
            ahead,
            stored,
        )
        # The refused chunk was the last request: no FAILED step, no FAILED job.
        assert runtime.sent[seen["sent"] :] == [("POST", f"steps/{step_id}/checkpoint")]

        # On the promoted standby: the step exactly as before the lost chunk
        # (version, counts, checkpoint), the execution as before but marked.
        step_now = row(standby, STEPS, step_id)
        assert step_now == seen["step"]
        assert (step_now["status"], step_now["read_count"], step_now["committed_count"]) == (
            "STARTED",
            2 * CHUNK,
            2,
        )
        assert json.loads(step_now["checkpoint"])["payload"] == {"offset": 20}
        execution_now = row(standby, EXECUTIONS, execution_id)
        marker = execution_now.pop("lost_write")
        assert (marker["expected_version"], marker["stored_version"]) == (ahead, stored)
        assert marker["detected_at"]
        before = dict(seen["execution"])
        assert before.pop("lost_write") is None
        assert execution_now == before
        with standby.connect() as db:
            counted = db.execute(
                f"SELECT count(*) FROM {STEPS} WHERE job_execution_id = %s",
                (execution_id,),
            ).fetchone()
        assert counted == (1,)

        # Its lease expired long ago: the watchdog still leaves it to a human.
        with standby.connect() as db:
            for table, key in ((EXECUTIONS, "id"), (STEPS, "job_execution_id")):
                db.execute(
                    f"UPDATE {table} SET last_activity_at = last_activity_at - interval '1 hour'"
                    f" WHERE {key} = %s",
                    (execution_id,),
                )
        # The promoted server started seconds ago; its hold-off has a test of its own.
        monkeypatch.setattr(batch_watchdog, "database_uptime", lambda: timedelta(days=1))
        out = io.StringIO()
        with django_on(standby):
            call_command("batch_watchdog", "--once", "--json", stdout=out, stderr=io.StringIO())
            assert not models.RecoveryDecision.objects.filter(job_execution_id=execution_id)
        document = json.loads(out.getvalue())
        assert (document["recovered"], document["skipped"], document["holding_until"]) == (
            0,
            1,
            None,
        )
        (action,) = document["actions"]
        assert (action["job_execution_id"], action["outcome"], action["detail"]) == (
            execution_id,
            "skipped",
            "unknown_commit",
        )
        assert action["lease_expired_at"] is not None
        assert row(standby, EXECUTIONS, execution_id)["status"] == "STARTED"

        # The proposal (served by the same gunicorn, now on the promoted server).
        operator = deployment.operator
        proposal = operator.proposal(execution_id)
        assert (proposal.eligible, proposal.eligibility) == (True, "lease_expired")
        assert proposal.markers["unknown_commit"]
        assert proposal.default_failure_category is FailureCategory.UNKNOWN_COMMIT
        with pytest.raises(UnresolvedRecoveryRequired):
            operator.recover(proposal, disposition=RecoveryDisposition.MARK_FAILED,
                             reason_code="WORKER_LOST", operation_id="r-1")  # fmt: skip
        decided = operator.recover(proposal, disposition=RecoveryDisposition.MARK_FAILED,
                                   reason_code="UNKNOWN_EFFECT", operation_id="r-2")  # fmt: skip
        assert decided.execution is not None
        assert decided.execution.status is S.FAILED
        assert decided.execution.failure is not None
        assert decided.execution.failure.category is FailureCategory.UNKNOWN_COMMIT


def test_a_sync_failover_loses_nothing_and_the_run_goes_on() -> None:
    with deployed(synchronous=True) as deployment:
        primary, standby, runtime = deployment.primary, deployment.standby, deployment.runtime
        assert replication_state(primary) == ["sync"]
        with (
            runtime.job_run(JOB, PARAMETERS, poll_interval=60) as run,
            run.step("load") as step,
        ):
            for offset in (10, 20):
                step.commit(**chunk(offset))
            acknowledged = step.commit(**chunk(30))  # 200 once the standby has it
            primary.kill()
            standby.promote()
            assert row(standby, STEPS, step.step.id)["version"] == acknowledged.version
            step.commit(**chunk(40))  # the runtime's next write

        execution = row(standby, EXECUTIONS, run.execution.id)
        assert (execution["status"], execution["lost_write"]) == ("COMPLETED", None)
        step_now = row(standby, STEPS, step.step.id)
        assert (step_now["status"], step_now["read_count"], step_now["committed_count"]) == (
            "COMPLETED",
            4 * CHUNK,
            4,
        )
        assert json.loads(step_now["checkpoint"])["payload"] == {"offset": 40}
