"""The job-name walk (``oxide_batch/selectors/job_names.py``): the distinct
job names of a table in index order, one query reading about one index entry
per name (a loose index scan), capped, on both databases."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.selectors.job_names import JOB_NAMES_MAX, job_names, led_by_job_name

pytestmark = pytest.mark.django_db


# ---------------------------------------------------------------- the walk


def test_job_names_walks_the_distinct_names_in_order(demo):
    expected = sorted(set(models.JobInstance.objects.values_list("job_name", flat=True)))
    with CaptureQueriesContext(connection) as captured:
        found = job_names(models.JobInstance)
    assert len(captured.captured_queries) == 1
    assert (list(found.names), found.truncated) == (expected, False)
    capped = job_names(models.JobInstance, limit=2)
    assert (list(capped.names), capped.truncated) == (expected[:2], True)
    exact = job_names(models.JobInstance, limit=len(expected))
    assert (list(exact.names), exact.truncated) == (expected, False)


def test_job_names_of_an_empty_table(db):
    assert job_names(models.JobExecution) == job_names(models.JobExecution, limit=1)
    assert job_names(models.JobExecution).names == ()


@pytest.mark.parametrize("limit", [0, JOB_NAMES_MAX + 1])
def test_the_cap_is_1_to_500(db, limit):
    with pytest.raises(ValueError, match="limit"):
        job_names(models.JobExecution, limit=limit)


def test_a_table_without_a_job_name_index_is_refused(db):
    assert led_by_job_name(models.JobInstance)
    assert led_by_job_name(models.JobExecution)
    assert not led_by_job_name(models.DefinitionUpgrade)
    with pytest.raises(ValueError, match="no index led by job_name"):
        job_names(models.DefinitionUpgrade)


# ---------------------------------------------------------------- the plan

ROWS = 50_000
JOBS = 20


def _fill_executions(cursor) -> None:
    """``ROWS`` instances and executions of ``JOBS`` job names, server-side."""
    cursor.execute("SELECT id FROM ob_job_definition WHERE job_name IS NULL")
    (legacy,) = cursor.fetchone()
    cursor.execute(
        """
        INSERT INTO ob_job_instance (job_name, key_digest, identifying_parameters, created_at)
        SELECT 'job_' || (i %% %s), encode(sha256(i::text::bytea), 'hex'), '[]'::jsonb, now()
        FROM generate_series(1, %s) AS i
        """,
        [JOBS, ROWS],
    )
    cursor.execute(
        """
        INSERT INTO ob_job_execution (job_instance_id, job_name, attempt, definition_id, status,
            exit_code, created_at, started_at, ended_at, updated_at, version, read_count,
            processed_count, written_count, filtered_count, committed_count, rolled_back_count)
        SELECT id, job_name, 1, %s, 'COMPLETED', 'COMPLETED', now(), now(), now(), now(), 1,
               0, 0, 0, 0, 0, 0
        FROM ob_job_instance
        """,
        [legacy],
    )
    for table in ("ob_job_instance", "ob_job_execution"):
        # Earlier tests' rolled-back rows leave dead index entries behind; size
        # the indexes by what they hold, as a live database's would be.
        cursor.execute(f"REINDEX TABLE {table}")
        cursor.execute(f"ANALYZE {table}")


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("model", "index"),
    [
        (models.JobExecution, "ob_execution_job_name"),
        (models.JobInstance, "ob_instance_"),
    ],
)
def test_the_walk_reads_one_index_entry_per_name(db, model, index):
    with connection.cursor() as cursor:
        _fill_executions(cursor)
    with CaptureQueriesContext(connection) as captured:
        found = job_names(model)
    assert len(found.names) == JOBS
    (query,) = captured.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + query["sql"])
        plan = "\n".join(line for (line,) in cursor.fetchall())
    table = model._meta.db_table
    assert f"Seq Scan on {table}" not in plan, plan
    assert "Sort" not in plan, plan
    assert "Aggregate" not in plan, plan
    assert f"Index Only Scan using {index}" in plan, plan
    # Each step stops at the first entry past the previous name: JOBS + 1
    # descents of one row at most, not ROWS entries.
    scans = re.findall(r"Index Only Scan using \S+ on \S+.*\(actual rows=(\d+) loops=(\d+)\)", plan)
    assert scans, plan
    assert sum(int(rows) * int(loops) for rows, loops in scans) <= 2 * (JOBS + 1), plan


def test_on_sqlite_each_step_searches_the_index(db):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's EXPLAIN QUERY PLAN")
    with CaptureQueriesContext(connection) as captured:
        job_names(models.JobExecution)
    (query,) = captured.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
        plan = [detail for (*_, detail) in cursor.fetchall()]
    step = "SEARCH ob_job_execution USING COVERING INDEX ob_execution_job_name (job_name>?)"
    assert step in plan, plan
    assert not any("TEMP B-TREE" in detail for detail in plan), plan
