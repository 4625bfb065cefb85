"""The unresolved-executions selectors (contract §2.5.3, §5.3): UNKNOWN, or
active and silent — no activity of the row nor a step write — since the
cutoff; newest first by keyset, one query, on the partial index
``ob_execution_unresolved`` (also as a prepared statement's generic plan)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.selectors.unresolved import (
    needs_attention_queryset,
    unresolved_executions,
    unresolved_executions_queryset,
)
from tests.helpers import key, launch, move
from tests.repository.test_evidence import MINUTE, OTHER, OWNER, chunk, owned_started, started_step

pytestmark = pytest.mark.django_db
S = BatchStatus


def _ids(now, inactive_for=15 * MINUTE, **options) -> list[int]:
    return [
        view.id for view in unresolved_executions(now=now, inactive_for=inactive_for, **options)
    ]


def test_unresolved_executions_are_unknown_or_inactive_without_recent_step_writes(repo, clock):
    stale = move(repo, launch(repo, key(run="stale")), S.STARTED, clock=clock)
    unknown = move(repo, launch(repo, key(run="unknown")), S.STARTED, S.UNKNOWN, clock=clock)
    stepping = move(repo, launch(repo, key(run="stepping")), S.STARTED, clock=clock)
    step = started_step(repo, stepping)
    move(repo, launch(repo, key(run="done")), S.STARTED, S.COMPLETED, clock=clock)
    clock.advance(10 * MINUTE)
    chunk(repo, step, None)
    fresh = launch(repo, key(run="fresh"))
    clock.advance(10 * MINUTE)
    now = clock.now()
    assert _ids(now) == [unknown.id, stale.id]
    assert _ids(now, inactive_for=5 * MINUTE) == [fresh.id, stepping.id, unknown.id, stale.id]
    assert _ids(now, inactive_for=timedelta(hours=1)) == [unknown.id]


def test_the_cutoff_is_exclusive_for_activity_and_inclusive_for_step_writes(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    clock.advance(15 * MINUTE)
    assert _ids(clock.now()) == []
    clock.advance(timedelta(milliseconds=1))
    assert _ids(clock.now()) == [execution.id]
    step = started_step(repo, execution)
    clock.advance(15 * MINUTE)
    assert step.updated_at == clock.now() - 15 * MINUTE
    assert _ids(clock.now()) == []


def test_the_owners_observation_keeps_an_execution_resolved_a_strangers_does_not(repo, clock):
    execution = owned_started(repo, clock)
    clock.advance(20 * MINUTE)
    with repo.begin() as uow:
        uow.observe_execution_control(execution.id, OTHER)
        uow.commit()
    assert _ids(clock.now()) == [execution.id]
    with repo.begin() as uow:
        uow.observe_execution_control(execution.id, OWNER)
        uow.commit()
    assert _ids(clock.now()) == []


def test_unresolved_executions_page_newest_first_by_keyset(repo, clock):
    executions = [
        move(repo, launch(repo, key(run=f"r{n}")), S.STARTED, S.UNKNOWN, clock=clock)
        for n in range(5)
    ]
    ids = sorted((e.id for e in executions), reverse=True)
    now = clock.now()
    assert _ids(now, limit=2) == ids[:2]
    assert _ids(now, limit=2, before_id=ids[1]) == ids[2:4]
    assert _ids(now, limit=2, before_id=ids[3]) == ids[4:]
    assert _ids(now, before_id=ids[4]) == []


def test_unresolved_views_show_control_evidence(repo, clock):
    execution = owned_started(repo, clock)
    with repo.begin() as uow:
        uow.request_execution_stop(execution.id, execution.version, "operator:test")
        uow.commit()
    clock.advance(20 * MINUTE)
    (view,) = unresolved_executions(now=clock.now(), inactive_for=15 * MINUTE)
    assert view.execution == execution
    assert (view.owner_recorded, view.stop_requested_by) == (True, "operator:test")


@pytest.mark.parametrize("limit", [0, 501])
def test_the_page_size_is_1_to_500(limit, clock):
    with pytest.raises(ValueError, match="limit"):
        unresolved_executions(now=clock.now(), inactive_for=MINUTE, limit=limit)


def test_unresolved_executions_is_one_query(repo, clock):
    for n in range(3):
        move(repo, launch(repo, key(run=f"r{n}")), S.STARTED, S.UNKNOWN, clock=clock)
    with CaptureQueriesContext(connection) as queries:
        views = unresolved_executions(now=clock.now(), inactive_for=MINUTE, before_id=10**12)
    assert len(views) == 3
    assert len(queries.captured_queries) == 1


@pytest.mark.postgres
def test_unresolved_executions_read_the_partial_index(repo, clock):
    history = move(repo, launch(repo, key(run="history")), S.STARTED, S.COMPLETED, clock=clock)
    now = clock.now()
    finished = [
        models.JobExecution(
            job_instance_id=history.job_instance_id,
            job_name=history.job_name,
            attempt=attempt,
            definition_id=history.definition_id,
            status="COMPLETED",
            exit_code="COMPLETED",
            created_at=now,
            started_at=now,
            ended_at=now,
            updated_at=now,
            last_activity_at=now,
        )
        for attempt in range(2, 2002)
    ]
    models.JobExecution.objects.bulk_create(finished, batch_size=500)
    stale = move(repo, launch(repo, key(run="stale")), S.STARTED, clock=clock)
    unknown = move(repo, launch(repo, key(run="unknown")), S.STARTED, S.UNKNOWN, clock=clock)
    clock.advance(timedelta(hours=1))
    with connection.cursor() as cursor:
        # Earlier tests' rolled-back rows leave dead index entries behind; size
        # the indexes by what they hold, as a live database's would be.
        cursor.execute("REINDEX TABLE ob_job_execution")
        cursor.execute("ANALYZE ob_job_execution")
        cursor.execute("ANALYZE ob_step_execution")
    with CaptureQueriesContext(connection) as queries:
        assert _ids(clock.now()) == [unknown.id, stale.id]
    (query,) = queries.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + query["sql"])
        plan = "\n".join(line for (line,) in cursor.fetchall())
    assert "ob_execution_unresolved" in plan, plan
    assert "Seq Scan on ob_job_execution" not in plan, plan
    composable = unresolved_executions_queryset(now=clock.now(), inactive_for=15 * MINUTE)
    # The console's and the gauge's rule with leases (contract §2.5.3) reads the same index.
    attention = needs_attention_queryset(
        now=clock.now(), stale_after=15 * MINUTE, lease_ttl=timedelta(seconds=60)
    )
    for queryset in (composable, attention):
        assert "ob_execution_unresolved" in queryset.order_by("-id")[:50].explain()
        assert_generic_plan_reads_the_partial_index(queryset)


def assert_generic_plan_reads_the_partial_index(queryset: Any) -> None:
    """A prepared statement's generic plan (what PostgreSQL may switch to after
    five runs on one connection) must find the partial index too: the status
    values are literals, not parameters (bench/size.py found the table walk)."""
    sql, params = queryset.order_by("-id")[:50].query.sql_with_params()
    parts = sql.split("%s")
    numbered = parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], 1))
    types = ", ".join(
        "text"
        if isinstance(p, str)
        else "timestamptz"
        if isinstance(p, datetime)
        else "interval"  # the lease TTL where a claim recorded none (decision 212)
        if isinstance(p, timedelta)
        else "integer"
        for p in params
    )
    with connection.cursor() as cursor:
        cursor.execute(f"PREPARE unresolved_generic ({types}) AS {numbered}")
        try:
            cursor.execute("SET plan_cache_mode = force_generic_plan")
            marks = ", ".join(["%s"] * len(params))
            # EXECUTE's arguments as literals (bound, their types are unknown).
            cursor.execute(
                connection.ops.compose_sql(  # type: ignore[attr-defined] # PostgreSQL's
                    f"EXPLAIN EXECUTE unresolved_generic({marks})", params
                )
            )
            generic = "\n".join(line for (line,) in cursor.fetchall())
        finally:
            cursor.execute("RESET plan_cache_mode")
            cursor.execute("DEALLOCATE unresolved_generic")
    assert "unresolved on ob_job_execution" in generic, generic
    assert "Seq Scan on ob_job_execution" not in generic, generic
