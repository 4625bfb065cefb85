"""The job-name filter (contract §5.1): every job name of the
page's table — jobs launched on the legacy definition included — from one
bounded index walk, never a DISTINCT or COUNT over the table."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from oxide_batch import models
from oxide_batch.admin.pages import JobNameFilter
from oxide_batch.demo.workload import Workload
from oxide_batch.selectors.job_names import JOB_NAMES_MAX, job_names, led_by_job_name

pytestmark = pytest.mark.django_db

LISTS = ("jobinstance", "jobexecution")
FILTER_LINK = re.compile(r'<a href="\?job_name=([^"&]+)[^"]*">')


def _page(client, name: str, **query: str) -> str:
    response = client.get(reverse(f"admin:oxide_batch_{name}_changelist"), query)
    assert response.status_code == 200
    return str(response.content.decode())


def _offered(page: str) -> list[str]:
    section = page[page.index('data-filter-title="job name"') :].split("</details>", 1)[0]
    return FILTER_LINK.findall(section)


def _launch(names: list[str]) -> None:
    work = Workload(datetime.now(UTC) - timedelta(hours=1))
    for name in names:
        work.complete(name, ["only"], n=1)


@pytest.mark.parametrize("name", LISTS)
def test_every_job_name_is_offered_whatever_its_definition(admin_client, demo, name):
    launched = set(models.JobExecution.objects.values_list("job_name", flat=True))
    on_legacy = set(
        models.JobExecution.objects.filter(definition__job_name=None).values_list(
            "job_name", flat=True
        )
    )
    assert on_legacy, "the demo launches jobs on the legacy definition"
    assert sorted(_offered(_page(admin_client, name))) == sorted(launched)


@pytest.mark.parametrize("name", LISTS)
def test_a_name_filters_the_list(admin_client, demo, name):
    page = _page(admin_client, name, job_name="report_build")
    rows = page[page.index('id="result_list"') :].split("</table>", 1)[0]
    assert "report_build" in rows
    assert "nightly_import" not in rows


@pytest.mark.parametrize("name", LISTS)
def test_the_filter_is_one_query_however_many_job_names(admin_client, demo, name):
    def queries() -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            _page(admin_client, name)
        return [q["sql"] for q in captured.captured_queries]

    _page(admin_client, name)  # warm process-wide caches first (test order)
    before = queries()
    _launch([f"more_{n:02}" for n in range(12)])
    after = queries()
    assert len(after) == len(before)
    walks = [sql for sql in after if "WITH RECURSIVE" in sql]
    assert len(walks) == 1
    assert not any("DISTINCT" in sql.upper() for sql in after)


def test_beyond_the_cap_the_list_says_so_and_a_typed_name_still_filters(
    admin_client, demo, monkeypatch
):
    monkeypatch.setattr(JobNameFilter, "cap", 3)
    page = _page(admin_client, "jobexecution")
    first = sorted(set(models.JobExecution.objects.values_list("job_name", flat=True)))
    assert _offered(page) == first[:3]
    assert "Only the first 3 job names are listed" in page
    # A name past the cap: the filter applies it and shows it as the selection.
    chosen = first[-1]
    page = _page(admin_client, "jobexecution", job_name=chosen)
    assert chosen in _offered(page)
    assert re.search(rf'<li class="selected">\s*<a href="\?job_name={chosen}"', page)
    rows = page[page.index('id="result_list"') :].split("</table>", 1)[0]
    assert chosen in rows
    assert first[0] not in rows


def test_facets_are_off(admin_client, demo):
    """``?_facets`` would count every filter choice over the whole table."""
    with CaptureQueriesContext(connection) as captured:
        _page(admin_client, "jobexecution", _facets="True")
    for sql in (q["sql"] for q in captured.captured_queries):
        if re.search(r"COUNT\(", sql, re.IGNORECASE):
            assert "LIMIT" in sql.upper(), sql


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
