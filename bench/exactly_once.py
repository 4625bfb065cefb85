"""The exactly-once soak (issue 42): the harness of tests/local/test_exactly_once.py
with 100 SIGKILLs instead of 12. Not part of the test command.

Run on a throwaway PostgreSQL cluster (it creates and drops a database named
``oxb_bench_exactly_once``)::

    scripts/with-postgres .venv/bin/python bench/exactly_once.py --kills 100

The job (tests/local/import_job.py, ``LocalRuntime``) imports ``--records``
records into a table with no unique constraint, a chunk commit with its
checkpoint every ``--chunk`` records, and is SIGKILLed at seeded random moments
(``--window`` seconds after its step started), each killed run taken over by
the operator's recovery (with an override) and restarted. At the end it checks
that every record is in the table exactly once and that the repository's
counts and checkpoint agree with the table, and prints one JSON document.
``--http N`` runs the same harness on the HTTP client (gunicorn) with N kills
first, and reports its duplicates beside. Figures are recorded in
docs/reliability.md ("Exactly-once output: the 100-kill soak").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATABASE = "oxb_bench_exactly_once"


CLUSTER = os.environ.get("DATABASE_URL", "")


def database_url(name: str) -> str:
    return urlunsplit(urlsplit(CLUSTER)._replace(path=f"/{name}"))


def admin(statement: str) -> None:
    with psycopg.connect(CLUSTER, autocommit=True) as connection:
        connection.execute(statement)


def setup() -> str:
    """Create, migrate and point Django at the bench database; the records'
    table and a runtime user; a token of another for the HTTP client."""
    admin(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
    admin(f'CREATE DATABASE "{DATABASE}"')
    os.environ["DATABASE_URL"] = database_url(DATABASE)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ.setdefault("SECRET_KEY", "bench-exactly-once-" + "x" * 40)
    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from django.db import connection

    from oxide_batch.repository.clock import SystemClock
    from oxide_batch.repository.tokens import issue_api_token
    from oxide_batch.roles import RUNTIME, ensure_roles
    from tests.local.records import Record

    call_command("migrate", verbosity=0, interactive=False)
    with connection.schema_editor() as editor:
        editor.create_model(Record)
    ensure_roles()
    for name in ("importer", "http-importer"):
        user = User.objects.create_user(name)
        user.groups.add(Group.objects.get(name=RUNTIME))
    http_user = User.objects.get(username="http-importer")
    return issue_api_token(user=http_user, name="bench", now=SystemClock().now()).token


def soak(arguments: argparse.Namespace, token: str) -> dict[str, Any]:
    from django.conf import settings

    from tests.local.harness import job_command, job_environment, run_with_kills
    from tests.local.records import Record

    environment = job_environment(os.environ["DATABASE_URL"], settings.SECRET_KEY)
    window = (arguments.window[0], arguments.window[1])
    report: dict[str, Any] = {"records": arguments.records, "chunk": arguments.chunk}
    if arguments.http:
        from tests.live import gunicorn

        with gunicorn(database=os.environ["DATABASE_URL"], workers=1) as url:
            command = job_command(
                records=arguments.records, chunk=arguments.chunk, run="http", url=url, token=token
            )
            http = run_with_kills(
                command, environment, kills=arguments.http, seed=arguments.seed, window=window
            )
        report["http"] = summary(http)
        Record.objects.all().delete()
    command = job_command(
        records=arguments.records, chunk=arguments.chunk, run="local", user="importer"
    )
    local = run_with_kills(
        command, environment, kills=arguments.kills, seed=arguments.seed, window=window
    )
    report["local"] = summary(local)
    report["exactly_once"] = (
        local.duplicates == {}
        and local.rows == local.distinct == arguments.records
        and local.written_count == local.checkpoint == local.rows
    )
    return report


def summary(outcome: Any) -> dict[str, Any]:
    return {
        "kills": outcome.kills,
        "runs": outcome.runs,
        "seconds": round(outcome.seconds, 1),
        "rows": outcome.rows,
        "distinct_keys": outcome.distinct,
        "keys_duplicated": len(outcome.duplicates),
        "extra_rows": outcome.rows - outcome.distinct,
        "written_count": outcome.written_count,
        "checkpoint": outcome.checkpoint,
        "status": outcome.status,
        "distinct_kill_offsets": len(set(outcome.kill_offsets)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--window", type=float, nargs=2, default=(0.02, 0.2))
    parser.add_argument("--http", type=int, default=0, help="kills of the HTTP harness first")
    arguments = parser.parse_args()
    token = setup()
    try:
        report = soak(arguments, token)
    finally:
        from django.db import connections

        connections.close_all()
        with suppress(psycopg.Error):
            admin(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
    print(json.dumps(report, indent=2))
    return 0 if report["exactly_once"] else 1


if __name__ == "__main__":
    sys.exit(main())
