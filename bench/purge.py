"""Purge benchmark: ``purge_batch_metadata`` against a hand-written SQL DELETE.

Run on a throwaway PostgreSQL cluster (never on a database you care about — it
creates and drops databases named ``oxb_bench_*``)::

    scripts/with-postgres .venv/bin/python bench/purge.py --instances 100000

For each size (``--instances`` and the smaller ``--compare`` size) it builds a
template database with that many finished instances, each with 3 executions
(FAILED, FAILED, COMPLETED — a restart chain) of 5 steps, generated server-side
with ``INSERT … SELECT generate_series`` (not through the repository), then
clones it twice (``CREATE DATABASE … TEMPLATE``) and deletes every row:

- ``command``: ``manage.py purge_batch_metadata --older-than 30d --batch-size N``
  in a subprocess (survey, lock, full re-check, set-based deletes and an audit
  record per batch); its peak RSS comes from ``wait4``;
- ``sql``: psycopg, per batch ``SELECT id … ORDER BY id LIMIT N`` then one
  ``DELETE … WHERE job_instance_id = ANY(%s)`` per table, child before parent.

It prints rows deleted per second for both, their ratio, and the command's peak
memory per size (flat in the total size when the purge streams batch by batch).
``--steps`` changes the steps per execution and ``--no-sql`` skips the SQL side
(for a size where only the command's memory and rate are wanted, e.g.
``--instances 1000000 --steps 1 --no-sql``).
Figures are recorded in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
TABLES = (
    ("ob_flow_decision", "job_instance_id"),
    ("ob_step_partition", "job_instance_id"),
    ("ob_step_execution", "job_instance_id"),
    ("ob_job_execution", "job_instance_id"),
    ("ob_job_instance", "id"),
)
ATTEMPTS = 3
STEPS = 5
COUNTS = "read_count, processed_count, written_count, filtered_count, committed_count, "
COUNTS += "rolled_back_count"


def database_url(name: str) -> str:
    base = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(base._replace(path=f"/{name}"))


def admin() -> psycopg.Connection[Any]:
    return psycopg.connect(database_url("postgres"), autocommit=True)


def recreate(name: str, template: str | None = None) -> None:
    with admin() as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        if template is None:
            connection.execute(f'CREATE DATABASE "{name}"')
        else:
            connection.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')


def drop(name: str) -> None:
    with admin() as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')


def generate(name: str, instances: int, steps: int = STEPS) -> float:
    """Migrate ``name`` and fill it; returns the seconds it took."""
    started = time.perf_counter()
    recreate(name)
    env = {**os.environ, "DATABASE_URL": database_url(name)}
    subprocess.run(
        [PYTHON, "manage.py", "migrate", "-v0", "--skip-checks"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=600,
        stderr=subprocess.DEVNULL,
    )
    with psycopg.connect(database_url(name)) as connection:
        connection.execute("SET statement_timeout = 0")
        definition = connection.execute(
            "SELECT id FROM ob_job_definition WHERE job_name IS NULL"
        ).fetchone()
        assert definition is not None, "the legacy definition comes with the migrations"
        params = {"n": instances, "definition": definition[0], "steps": steps}
        # Instance i's attempt a runs at base + 10 i + 2 a seconds, one second long.
        connection.execute(
            """
            INSERT INTO ob_job_instance (id, job_name, key_digest, identifying_parameters,
                                         created_at)
            SELECT i, 'bench_job', encode(sha256(i::text::bytea), 'hex'), '[]'::jsonb,
                   timestamptz '2025-01-01' + i * interval '10 seconds'
            FROM generate_series(1, %(n)s) AS i
            """,
            params,
        )
        connection.execute(
            f"""
            INSERT INTO ob_job_execution (id, job_instance_id, job_name, attempt, restart_of_id,
                definition_id, status, exit_code, failure_category, failure_id, created_at,
                started_at, ended_at, updated_at, last_activity_at, version, {COUNTS})
            SELECT (i - 1) * 3 + a, i, 'bench_job', a,
                   CASE WHEN a > 1 THEN (i - 1) * 3 + a - 1 END, %(definition)s,
                   CASE WHEN a < 3 THEN 'FAILED' ELSE 'COMPLETED' END,
                   CASE WHEN a < 3 THEN 'FAILED' ELSE 'COMPLETED' END,
                   CASE WHEN a < 3 THEN 'USER_COMPONENT' END, CASE WHEN a < 3 THEN a END,
                   t, t, t + interval '1 second', t + interval '1 second',
                   t + interval '1 second', 2, 500, 500, 500, 0, 5, 0
            FROM generate_series(1, %(n)s) AS i, generate_series(1, 3) AS a,
                 LATERAL (SELECT timestamptz '2025-01-01' + i * interval '10 seconds'
                                 + a * interval '2 seconds' AS t) AS times
            """,
            params,
        )
        connection.execute(
            f"""
            INSERT INTO ob_step_execution (id, job_instance_id, job_execution_id, step_name,
                node_id, status, exit_code, created_at, started_at, ended_at, updated_at,
                version, {COUNTS})
            SELECT ((i - 1) * 3 + a - 1) * %(steps)s + s, i, (i - 1) * 3 + a, 'step' || s,
                   'step' || s,
                   'COMPLETED', 'COMPLETED', t, t, t + interval '100 ms',
                   t + interval '100 ms', 2, 100, 100, 100, 0, 1, 0
            FROM generate_series(1, %(n)s) AS i, generate_series(1, 3) AS a,
                 generate_series(1, %(steps)s) AS s,
                 LATERAL (SELECT timestamptz '2025-01-01' + i * interval '10 seconds'
                                 + a * interval '2 seconds' + s * interval '100 ms' AS t) AS x
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


@dataclass
class Measurement:
    label: str
    rows: int
    seconds: float
    batches: int
    max_rss_kib: int | None = None

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds


def run_command(name: str, batch_size: int) -> Measurement:
    env = {**os.environ, "DATABASE_URL": database_url(name)}
    args = [
        PYTHON,
        "manage.py",
        "purge_batch_metadata",
        "--older-than",
        "30d",
        "--batch-size",
        str(batch_size),
        "--operation-id",
        "bench",
        "--yes",
        "--json",
    ]
    started = time.perf_counter()
    process = subprocess.Popen(
        args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"purge_batch_metadata exited {process.returncode}: {output[-2000:]!r}")
    document = json.loads(output)
    rows = sum(document["counts"].values())
    return Measurement("command", rows, seconds, len(document["batches"]), usage.ru_maxrss)


def run_sql(name: str, batch_size: int) -> Measurement:
    rows = batches = 0
    with psycopg.connect(database_url(name)) as connection:
        started = time.perf_counter()
        while True:
            ids = [
                row[0]
                for row in connection.execute(
                    "SELECT id FROM ob_job_instance ORDER BY id LIMIT %s", (batch_size,)
                )
            ]
            if not ids:
                connection.commit()
                break
            for table, column in TABLES:
                rows += connection.execute(
                    f"DELETE FROM {table} WHERE {column} = ANY(%s)", (ids,)
                ).rowcount
            connection.commit()
            batches += 1
        seconds = time.perf_counter() - started
    return Measurement("sql", rows, seconds, batches)


def remaining(name: str) -> int:
    with psycopg.connect(database_url(name)) as connection:
        row = connection.execute(
            "SELECT (SELECT count(*) FROM ob_job_instance) + (SELECT count(*) FROM "
            "ob_job_execution) + (SELECT count(*) FROM ob_step_execution)"
        ).fetchone()
        assert row is not None
        return int(row[0])


def bench(instances: int, batch_size: int, steps: int = STEPS, sql: bool = True) -> dict[str, Any]:
    template, command_db, sql_db = (f"oxb_bench_{kind}" for kind in ("template", "cmd", "sql"))
    print(f"== {instances:,} instances (batch {batch_size})", flush=True)
    generated = generate(template, instances, steps)
    total = instances * (1 + ATTEMPTS + ATTEMPTS * steps)
    print(f"   generated {total:,} rows in {generated:.1f}s", flush=True)
    recreate(command_db, template)
    if sql:
        recreate(sql_db, template)
    drop(template)
    command = run_command(command_db, batch_size)
    assert command.rows == total, (command.rows, total)
    assert remaining(command_db) == 0
    drop(command_db)
    measured = [command]
    ratio = float("nan")
    if sql:
        hand = run_sql(sql_db, batch_size)
        assert hand.rows == total, (hand.rows, total)
        assert remaining(sql_db) == 0
        drop(sql_db)
        measured.append(hand)
        ratio = command.rows_per_second / hand.rows_per_second
    for m in measured:
        memory = f", peak RSS {m.max_rss_kib / 1024:.1f} MiB" if m.max_rss_kib else ""
        print(
            f"   {m.label:<8} {m.rows:,} rows in {m.seconds:6.1f}s = "
            f"{m.rows_per_second:,.0f} rows/s ({m.batches} batches){memory}",
            flush=True,
        )
    if sql:
        print(f"   ratio command / sql = {ratio:.2f}", flush=True)
    hand_rate = measured[1].rows_per_second if sql else float("nan")
    return {
        "instances": instances,
        "rows": total,
        "command_rows_per_second": round(command.rows_per_second),
        "steps_per_execution": steps,
        "generate_seconds": round(generated, 1),
        "sql_rows_per_second": round(hand_rate) if sql else None,
        "ratio": round(ratio, 3) if sql else None,
        "command_seconds": round(command.seconds, 2),
        "sql_seconds": round(measured[1].seconds, 2) if sql else None,
        "command_peak_rss_mib": round((command.max_rss_kib or 0) / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=100_000)
    parser.add_argument(
        "--compare",
        type=int,
        default=20_000,
        help="a second, smaller size to show memory is flat (0: skip)",
    )
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument(
        "--steps", type=int, default=STEPS, help=f"steps per execution (default {STEPS})"
    )
    parser.add_argument(
        "--no-sql",
        dest="sql",
        action="store_false",
        help="skip the hand-written SQL comparison (the command's memory and rate only)",
    )
    options = parser.parse_args()
    if "DATABASE_URL" not in os.environ:
        raise SystemExit("run through scripts/with-postgres (DATABASE_URL is not set)")
    sizes = [size for size in (options.compare, options.instances) if size > 0]
    results = [
        bench(size, options.batch_size, options.steps, options.sql) for size in dict.fromkeys(sizes)
    ]
    if len(results) == 2:
        small, large = results
        growth = large["command_peak_rss_mib"] / small["command_peak_rss_mib"]
        print(
            f"== peak RSS {small['command_peak_rss_mib']} MiB at {small['instances']:,} vs "
            f"{large['command_peak_rss_mib']} MiB at {large['instances']:,} instances "
            f"(x{growth:.2f} for x{large['instances'] / small['instances']:.0f} the data)"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
