"""Operator console at scale: page server times over 10^6 executions.

Run on a throwaway PostgreSQL cluster (it creates and drops the database
``oxb_console_bench``)::

    scripts/with-postgres .venv/bin/python bench/console.py --executions 1000000

Generates ``--executions`` executions (one instance each; 3 steps each; a
partitioned step with 64 partitions every 10,000th execution) spread over the
last 60 days with ``INSERT … SELECT generate_series`` (server-side, not through
the repository; every instance has two identifying parameters, ``batch`` = its
id and ``business_date`` = its day, both visible): ~96% COMPLETED, 3% FAILED
(by category), the rest STOPPED, ABANDONED, and a few STARTED (stale) and
UNKNOWN. Then it fetches every changelist, detail and dashboard page with
Django's test client as a superuser (``--runs`` times after one warm-up) and
prints the median and maximum server time and the query count of each.
Figures are recorded in docs/console.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parents[1]
DATABASE = "oxb_console_bench"
COUNTS = "read_count, processed_count, written_count, filtered_count, committed_count, "
COUNTS += "rolled_back_count"
JOBS = 20
SPAN_DAYS = 60


def database_url(name: str) -> str:
    base = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(base._replace(path=f"/{name}"))


def recreate(name: str) -> None:
    with psycopg.connect(database_url("postgres"), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        connection.execute(f'CREATE DATABASE "{name}"')


STATUS = """CASE WHEN i %% 100000 = 7 THEN 'UNKNOWN'
                 WHEN i %% 100000 = 3 THEN 'STARTED'
                 WHEN i %% 100 < 3 THEN 'FAILED'
                 WHEN i %% 100 = 3 THEN 'STOPPED'
                 WHEN i %% 100 = 4 THEN 'ABANDONED'
                 ELSE 'COMPLETED' END"""
CATEGORY = """CASE WHEN i %% 100000 = 7 THEN 'UNKNOWN_COMMIT'
                   WHEN i %% 100 < 3 THEN (ARRAY['USER_COMPONENT', 'TRANSIENT_INFRASTRUCTURE',
                        'PERMANENT_INFRASTRUCTURE'])[i %% 3 + 1] END"""


def generate(executions: int) -> float:
    """Migrate the bench database and fill it; returns the seconds it took."""
    started = time.perf_counter()
    recreate(DATABASE)
    import subprocess

    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0", "--skip-checks"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url(DATABASE)},
        check=True,
        timeout=600,
        stderr=subprocess.DEVNULL,
    )
    with psycopg.connect(database_url(DATABASE)) as connection:
        connection.execute("SET statement_timeout = 0")
        row = connection.execute(
            "SELECT id FROM ob_job_definition WHERE job_name IS NULL"
        ).fetchone()
        assert row is not None, "the legacy definition comes with the migrations"
        params: dict[str, Any] = {"n": executions, "definition": row[0], "jobs": JOBS}
        # Execution i was created at now - 60 days + i * (60 days / n).
        times = f"""LATERAL (SELECT now() - interval '{SPAN_DAYS} days'
                      + (i::float8 / %(n)s) * interval '{SPAN_DAYS} days' AS t) AS x"""
        connection.execute(
            f"""
            INSERT INTO ob_job_instance (id, job_name, key_digest, identifying_parameters,
                                         created_at)
            SELECT i, 'job_' || (i %% %(jobs)s), encode(sha256(i::text::bytea), 'hex'),
                   jsonb_build_array(
                       jsonb_build_object('name', 'batch', 'type', 'i64', 'value', i::text),
                       jsonb_build_object('name', 'business_date', 'type', 'string',
                                          'value', to_char(t, 'YYYY-MM-DD'))), t
            FROM generate_series(1, %(n)s) AS i, {times}
            """,
            params,
        )
        finished = "(status NOT IN ('STARTED', 'UNKNOWN'))"
        connection.execute(
            f"""
            INSERT INTO ob_job_execution (id, job_instance_id, job_name, attempt,
                definition_id, status, exit_code, failure_category, failure_id, created_at,
                started_at, ended_at, updated_at, last_activity_at, failed_at, version,
                {COUNTS})
            SELECT i, i, 'job_' || (i %% %(jobs)s), 1, %(definition)s, status, status,
                   category, CASE WHEN category IS NOT NULL THEN i END,
                   t, t, CASE WHEN {finished} THEN t + interval '90 seconds' END,
                   t + interval '90 seconds', t + interval '90 seconds',
                   CASE WHEN status = 'FAILED' THEN t + interval '90 seconds' END, 3,
                   1500, 1500, 1490, 10, 15, 0
            FROM generate_series(1, %(n)s) AS i, {times},
                 LATERAL (SELECT {STATUS} AS status, {CATEGORY} AS category) AS s
            """,
            params,
        )
        connection.execute(
            f"""
            INSERT INTO ob_step_execution (id, job_instance_id, job_execution_id, step_name,
                node_id, status, exit_code, created_at, started_at, ended_at, updated_at,
                last_activity_at, version, {COUNTS})
            SELECT (i - 1) * 3 + k, i, i, 'step' || k, 'step' || k,
                   'COMPLETED', 'COMPLETED', t + k * interval '20 seconds',
                   t + k * interval '20 seconds', t + k * interval '20 seconds'
                   + interval '15 seconds', t + k * interval '20 seconds'
                   + interval '15 seconds', t + k * interval '20 seconds'
                   + interval '15 seconds', 2, 500, 500, 497, 3, 5, 0
            FROM generate_series(1, %(n)s) AS i, generate_series(1, 3) AS k, {times}
            """,
            params,
        )
        connection.execute(
            f"""
            INSERT INTO ob_step_partition (job_instance_id, step_execution_id,
                worker_step_execution_id, partition_key, ordinal, status, exit_code, version,
                {COUNTS})
            SELECT i, (i - 1) * 3 + 2, (i - 1) * 3 + 3, 'p' || o, o,
                   CASE WHEN o %% 17 = 5 THEN 'FAILED' ELSE 'COMPLETED' END,
                   CASE WHEN o %% 17 = 5 THEN 'FAILED' ELSE 'COMPLETED' END,
                   2, 10, 10, 10, 0, 1, 0
            FROM generate_series(1, %(n)s, 10000) AS i, generate_series(1, 64) AS o
            """,
            params,
        )
        for table in ("ob_job_instance", "ob_job_execution", "ob_step_execution"):
            connection.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"(SELECT max(id) FROM {table}))"
            )
        connection.commit()
        connection.autocommit = True
        connection.execute("VACUUM (ANALYZE)")
    return time.perf_counter() - started


def measure(runs: int) -> list[tuple[str, float, float, int]]:
    os.environ["DATABASE_URL"] = database_url(DATABASE)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ["OXIDE_BATCH_VISIBLE_PARAMETERS"] = "batch,business_date"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.apps import apps
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment
    from django.urls import reverse

    setup_test_environment()
    user, _ = User.objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)

    def middle(model: Any) -> int | None:
        top = model._default_manager.order_by("-pk").values_list("pk", flat=True).first()
        return None if top is None else max(top // 2, 1)

    pages: list[tuple[str, str]] = [("dashboard", reverse("admin:oxide_batch_dashboard"))]
    names = {
        name: apps.get_model("oxide_batch", name)
        for name in (
            "jobinstance",
            "jobexecution",
            "stepexecution",
            "steppartition",
            "flowdecision",
            "jobdefinition",
            "recoverydecision",
            "operatorrequest",
            "retentionrecord",
        )
    }
    changelist = reverse("admin:oxide_batch_jobexecution_changelist")
    pages += [
        ("executions ?status=FAILED", changelist + "?status__exact=FAILED"),
        ("executions ?job_name=job_7", changelist + "?job_name=job_7"),
        ("executions ?q=<id>", changelist + "?q=500000"),
        ("executions page 50", changelist + "?p=50"),
        ("executions last 7 days", changelist + "?created_at__gte=" + _days_ago(7)),
        ("executions unresolved", changelist + "?triage=unresolved"),
        ("executions failed in 24 h", changelist + "?triage=failed24h"),
        (
            "executions failed in 24 h, one category",
            changelist + "?triage=failed24h&failure_category=USER_COMPONENT",
        ),
        ("executions ?q=batch=500000", changelist + "?q=batch%3D500000"),
        ("executions ?q=business_date=<day>", changelist + "?q=business_date%3D" + _days_ago(7)),
    ]
    for name, model in names.items():
        pages.append((f"{name} list", reverse(f"admin:oxide_batch_{name}_changelist")))
        pk = middle(model)
        if pk is not None and model._default_manager.filter(pk=pk).exists():
            pages.append((f"{name} detail", reverse(f"admin:oxide_batch_{name}_change", args=[pk])))
    unresolved = (
        names["jobexecution"]._default_manager.filter(status="UNKNOWN").values_list("pk", flat=True)
    )
    if unresolved:
        pages.append(
            (
                "unresolved execution detail (case file)",
                reverse("admin:oxide_batch_jobexecution_change", args=[unresolved[0]]),
            )
        )
        pages.append(
            (
                "recover confirmation",
                reverse("admin:oxide_batch_jobexecution_act", args=["recover"])
                + f"?ids={unresolved[0]}",
            )
        )
    failed = (
        names["jobexecution"]
        ._default_manager.filter(failed_at__isnull=False)
        .order_by("-failed_at")
        .values_list("pk", flat=True)[:1]
    )
    if failed:
        pages.append(
            (
                "failed execution detail (what became of it)",
                reverse("admin:oxide_batch_jobexecution_change", args=[failed[0]]),
            )
        )
    results = []
    for label, url in pages:
        client.get(url)  # warm-up
        times: list[float] = []
        queries = 0
        for _ in range(runs):
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                response = client.get(url)
                times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (url, response.status_code)
            queries = len(captured.captured_queries)
        results.append((label, statistics.median(times), max(times), queries))
    return results


def _days_ago(days: int) -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC) - timedelta(days=days)).date().isoformat()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="reuse an existing bench database")
    args = parser.parse_args()
    if "DATABASE_URL" not in os.environ:
        sys.exit("bench/console.py needs DATABASE_URL (run it under scripts/with-postgres)")
    if not args.keep:
        seconds = generate(args.executions)
        print(f"generated {args.executions} executions (x3 steps) in {seconds:.1f} s")
    print(f"{'page':46} {'median ms':>10} {'max ms':>8} {'queries':>8}")
    for label, median, worst, queries in measure(args.runs):
        print(f"{label:46} {median:10.1f} {worst:8.1f} {queries:8d}")


if __name__ == "__main__":
    main()
