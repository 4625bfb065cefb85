"""Layer benchmark: the same compare-and-swap at every layer, side by side (issue 7).

One command from a fresh clone (it starts its own throwaway PostgreSQL through
``scripts/with-postgres`` with PostgreSQL's durability defaults)::

    .venv/bin/python bench/layers.py            # full run, ~4 min on 2 vCPU
    .venv/bin/python bench/layers.py --quick    # short run, ~1 min

Run inside ``scripts/with-postgres`` (``DATABASE_URL`` set) it uses that cluster
instead, and says whether its commits are durable (``OXIDE_BATCH_PG_DURABLE=1
scripts/with-postgres …`` keeps the defaults; ``scripts/with-postgres env
OXIDE_BATCH_PG_DURABLE=1 …`` would not: the variable must reach the script that
starts the cluster). It creates and drops the database ``oxb_bench_layers``.

The work: three CAS operations, each ``BEGIN``, one locking read, one write,
``COMMIT`` —

- ``transition``: STARTING → STARTED of a job execution (a fresh one per
  operation: the lifecycle does not repeat);
- ``exit-status``: exit-code enrichment of one STARTED job execution, repeated
  (the repeatable transition-like CAS, same columns and activity stamp);
- ``chunk``: a chunk commit of one STARTED step: count deltas added under the
  lock and a checkpoint envelope stored with its checksum;

at every layer, in one process tree and one sitting:

- ``L1`` raw psycopg 3 (its defaults: server-side binding, statements prepared
  after 5 uses) issuing exactly the repository's statements, with the same
  connection options (statement and lock timeouts as ``options``);
  ``L1c`` the same with Django's default psycopg settings (client-side
  binding, no prepared statements: what the repository ran with before
  issue 7), for reference;
- ``L2`` ``DjangoJobRepository`` (``transition_job_execution``,
  ``enrich_job_exit_status``, ``commit_chunk``), one unit of work per operation;
  ``ref`` the usual Django way (``select_for_update().get()`` +
  ``save(update_fields=…)``), for reference;
- ``L3`` the DRF endpoints in-process (``APIClient`` with a runtime token);
- ``L4`` the HTTP API under gunicorn (sync workers = cores) driven by a separate
  load process (``bench/load.py``) at 1, 4 and 8 concurrent clients, each on
  its own execution or step;
- ``lifecycle``: whole job lifecycles (launch, 10 steps × 20 chunk commits,
  completion: 234 operations) per second at L2 and L4.

Each measurement is bounded (duration and operation count) and repeated in
``--runs`` interleaved rounds (default 5; ratios want 3 or more); the table shows medians
and the median of the per-round ratios to L1 (other work on the machine shows
up as a bad round rather than as a bad ratio; the load average is printed
before and after). After every measurement the database is
checked: the sum of version increments of the rows worked on equals the
successful operations (and chunk counts add up) — nothing lost, nothing extra.
The statements of one operation at L1, L2 and L3 are captured from the
PostgreSQL statement log (``SET log_statement = 'all'`` on that connection
only: it sees ``BEGIN`` and ``COMMIT``, which Django's query capture does not)
and compared. Figures are recorded in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from hashlib import sha256
from pathlib import Path
from typing import Any
from urllib import request as urlrequest
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATABASE = "oxb_bench_layers"
EVENTS_LOG = Path("/tmp") / f"{DATABASE}-events.log"
OPS = ("transition", "exit-status", "chunk")
CONCURRENCY = (1, 4, 8)
EXIT_CODES = ("BENCH_A", "BENCH_B")
DELTA = {"read": 100, "processed": 100, "written": 100, "committed": 1}
STEPS, CHUNKS = 10, 20
LIFECYCLE_OPS = 3 + STEPS * (3 + CHUNKS) + 1  # 234 calls, 222 of them version bumps
LIFECYCLE_BUMPS = 2 + STEPS * (2 + CHUNKS)
# contract §8.1: Prefect 3.9's state transition over HTTP, same machine kind.
PREFECT = {1: 52.0, 4: 57.0}


# ============================================================================ setup


def reexec_under_postgres(program: str = __file__, *, durable: bool = True) -> None:
    """Without DATABASE_URL, run this very command (``program``, one of the
    benches) inside a throwaway cluster: with PostgreSQL's durability defaults
    when ``durable``, else ``scripts/with-postgres``'s (fsync off)."""
    if os.environ.get("DATABASE_URL"):
        return
    script = ROOT / "scripts" / "with-postgres"
    env = {**os.environ, "OXIDE_BATCH_PG_DURABLE": "1"} if durable else dict(os.environ)
    args = [str(script), sys.executable, str(Path(program).resolve()), *sys.argv[1:]]
    os.execve(str(script), args, env)


def database_url(name: str) -> str:
    base = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(base._replace(path=f"/{name}"))


def admin(name: str = "postgres") -> psycopg.Connection[Any]:
    return psycopg.connect(database_url(name), autocommit=True)


def create_database() -> None:
    with admin() as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{DATABASE}"')
        connection.execute(f'CREATE DATABASE "{DATABASE}"')


def drop_database() -> None:
    from django.db import connections

    connections.close_all()
    with admin() as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


def setup_django() -> str:
    """Point Django at the bench database, migrate it, return a runtime token."""
    os.environ["DATABASE_URL"] = database_url(DATABASE)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command

    from oxide_batch.repository.clock import SystemClock
    from oxide_batch.repository.tokens import issue_api_token
    from oxide_batch.roles import RUNTIME, ensure_roles

    call_command("migrate", verbosity=0, interactive=False)
    # The structured events (one JSON line per lifecycle event, as the
    # observability work specified them) still get formatted and written, to a file instead
    # of this table's terminal; gunicorn's go to its log file.
    import logging

    for handler in logging.getLogger("oxide_batch.events").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(EVENTS_LOG.open("w"))
    ensure_roles()
    user = User.objects.create_user("bench-runtime", password=None)
    user.groups.add(Group.objects.get(name=RUNTIME))
    return issue_api_token(user=user, name="bench", now=SystemClock().now()).token


def cores() -> int:
    return len(os.sched_getaffinity(0))


def machine() -> dict[str, Any]:
    import django
    import rest_framework

    model = "unknown"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as meminfo:
        memory_kib = int(meminfo.readline().split()[1])
    with admin(DATABASE) as connection:
        settings = {
            name: connection.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in ("server_version", "fsync", "synchronous_commit", "full_page_writes")
        }
    try:
        from importlib.metadata import version

        gunicorn = version("gunicorn")
    except Exception:
        gunicorn = "missing"
    return {
        "cpu": model,
        "cores": cores(),
        "memory_gib": round(memory_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "django": django.get_version(),
        "drf": rest_framework.VERSION,
        "psycopg": psycopg.__version__,
        "gunicorn": gunicorn,
        "postgresql": settings,
    }


# ===================================================================== CPU accounting


TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int, *, children: bool) -> float:
    """utime+stime (and cutime+cstime of reaped children) of ``pid``, seconds."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICK


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listing:
            return [int(child) for child in listing.read().split()]
    except OSError:
        return []


def tree_cpu(pid: int | None) -> float:
    """CPU seconds of a process and its children, including the exited ones."""
    if pid is None:
        return 0.0
    return _cpu_of(pid, children=True) + sum(
        _cpu_of(child, children=True) for child in _children(pid)
    )


def postmaster_pid() -> int | None:
    data = os.environ.get("OXIDE_BATCH_PG_DATA")
    if not data:
        return None
    try:
        return int((Path(data) / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# ============================================================================ targets


@dataclass
class Target:
    """One execution or step a driver works on (its version moves with each CAS)."""

    id: int
    version: int
    offset: int = 0


def checkpoint(offset: int) -> dict[str, Any]:
    return {
        "schema": "bench.reader",
        "schema_version": 1,
        "payload": {"file": "part-00001.csv", "offset": offset},
    }


def legacy_definition() -> int:
    with admin(DATABASE) as connection:
        row = connection.execute(
            "SELECT id FROM ob_job_definition WHERE job_name IS NULL"
        ).fetchone()
    assert row is not None
    return int(row[0])


def fresh_executions(count: int) -> list[int]:
    """``count`` STARTING job executions (version 0), one per new instance, made
    server-side (INSERT … SELECT generate_series), not through the repository."""
    tag = uuid.uuid4().hex
    with admin(DATABASE) as connection:
        rows = connection.execute(
            """
            WITH instance AS (
                INSERT INTO ob_job_instance (job_name, key_digest, identifying_parameters,
                                             created_at)
                SELECT 'bench_transition', encode(sha256((%(tag)s || i)::bytea), 'hex'),
                       '[]'::jsonb, date_trunc('milliseconds', now())
                FROM generate_series(1, %(n)s) AS i
                RETURNING id, created_at
            )
            INSERT INTO ob_job_execution (job_instance_id, job_name, attempt, definition_id,
                status, exit_code, created_at, updated_at, last_activity_at, version,
                read_count, processed_count, written_count, filtered_count, committed_count,
                rolled_back_count)
            SELECT id, 'bench_transition', 1, %(definition)s, 'STARTING', 'UNKNOWN',
                   created_at, created_at, created_at, 0, 0, 0, 0, 0, 0, 0
            FROM instance ORDER BY id
            RETURNING id
            """,
            {"tag": tag, "n": count, "definition": legacy_definition()},
        ).fetchall()
    return sorted(int(row[0]) for row in rows)


def started_execution() -> Target:
    """A STARTED job execution made through the repository."""
    from oxide_batch.domain import BatchStatus, JobInstanceKey, JobParameter, LifecycleTransition
    from oxide_batch.repository import DjangoJobRepository

    repo = DjangoJobRepository()
    key = JobInstanceKey.of("bench_cas", [JobParameter.from_json("run", uuid.uuid4().hex)])
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key).instance
        execution = uow.create_job_execution(instance.id)
        execution = uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(BatchStatus.STARTED)
        )
        uow.commit()
    return Target(execution.id, execution.version)


def started_step() -> Target:
    """A STARTED step (under a STARTED job execution) made through the repository."""
    from oxide_batch.domain import BatchStatus, LifecycleTransition
    from oxide_batch.repository import DjangoJobRepository

    parent = started_execution()
    repo = DjangoJobRepository()
    with repo.begin() as uow:
        step = uow.create_step_execution(parent.id, "load")
        step = uow.transition_step_execution(
            step.id, step.version, LifecycleTransition(BatchStatus.STARTED)
        )
        uow.commit()
    return Target(step.id, step.version)


def row_totals(table: str, ids: list[int]) -> tuple[int, int]:
    """(sum of versions, sum of read counts) of the rows."""
    with admin(DATABASE) as connection:
        row = connection.execute(
            f"SELECT coalesce(sum(version), 0), coalesce(sum(read_count), 0) FROM {table} "
            "WHERE id = ANY(%s)",
            (ids,),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


# ============================================================================ drivers


class Failed(Exception):
    """An operation that did not succeed (the code says why)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def now() -> datetime:
    return datetime.now(UTC)


class RawCas:
    """L1: the repository's statements written by hand over one psycopg connection.

    BEGIN (psycopg's, before the first statement), ``SELECT <the repository's
    columns> … FOR NO KEY UPDATE``, the domain checks in plain Python, one
    ``UPDATE`` of the columns the repository changes (in its order), COMMIT.
    """

    def __init__(self, params: dict[str, Any], *, django_cursor: bool) -> None:
        from oxide_batch.repository.records import JOB_EXECUTION_COLUMNS, STEP_EXECUTION_COLUMNS

        params = {
            key: value
            for key, value in params.items()
            if key not in ("cursor_factory", "prepare_threshold", "context")
        }
        if django_cursor:
            params.update(cursor_factory=psycopg.ClientCursor, prepare_threshold=None)
        self.connection: psycopg.Connection[Any] = psycopg.connect(**params)
        self.execution_select = (
            f"SELECT {', '.join(JOB_EXECUTION_COLUMNS)} FROM ob_job_execution "
            "WHERE id = %s ORDER BY id ASC LIMIT 1 FOR NO KEY UPDATE"
        )
        self.step_select = (
            f"SELECT {', '.join(STEP_EXECUTION_COLUMNS)} FROM ob_step_execution "
            "WHERE id = %s ORDER BY id ASC LIMIT 1 FOR NO KEY UPDATE"
        )
        self.execution_index = {name: i for i, name in enumerate(JOB_EXECUTION_COLUMNS)}
        self.step_index = {name: i for i, name in enumerate(STEP_EXECUTION_COLUMNS)}

    def _lock(self, sql: str, pk: int) -> tuple[Any, ...]:
        row = self.connection.execute(sql, (pk,)).fetchone()
        if row is None:
            self.connection.rollback()
            raise Failed("not_found")
        return tuple(row)

    def _refuse(self, code: str) -> None:
        self.connection.rollback()
        raise Failed(code)

    def transition(self, pk: int, expected: int) -> int:
        row = self._lock(self.execution_select, pk)
        index = self.execution_index
        version = row[index["version"]]
        if version != expected:
            self._refuse("stale_version")
        if row[index["status"]] != "STARTING":  # STARTED is legal from STARTING only here
            self._refuse("illegal_transition")
        at = now()
        self.connection.execute(
            "UPDATE ob_job_execution SET status = %s, started_at = %s, updated_at = %s, "
            "version = %s, last_activity_at = %s WHERE id = %s",
            ("STARTED", at, at, version + 1, at, pk),
        )
        self.connection.commit()
        return int(version + 1)

    def exit_status(self, pk: int, expected: int, exit_code: str) -> int:
        row = self._lock(self.execution_select, pk)
        version = row[self.execution_index["version"]]
        if version != expected:
            self._refuse("stale_version")
        at = now()
        self.connection.execute(
            "UPDATE ob_job_execution SET exit_code = %s, updated_at = %s, version = %s, "
            "last_activity_at = %s WHERE id = %s",
            (exit_code, at, version + 1, at, pk),
        )
        self.connection.commit()
        return int(version + 1)

    def chunk(self, pk: int, expected: int, envelope: dict[str, Any]) -> int:
        text = json.dumps(envelope, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        checksum = sha256(text.encode()).hexdigest()
        row = self._lock(self.step_select, pk)
        index = self.step_index
        version = row[index["version"]]
        if version != expected:
            self._refuse("stale_version")
        if row[index["status"]] != "STARTED":
            self._refuse("invalid_state")
        self.connection.execute(
            "UPDATE ob_step_execution SET updated_at = %s, version = %s, read_count = %s, "
            "processed_count = %s, written_count = %s, committed_count = %s, "
            "checkpoint = %s, checkpoint_checksum = %s WHERE id = %s",
            (
                now(),
                version + 1,
                row[index["read_count"]] + DELTA["read"],
                row[index["processed_count"]] + DELTA["processed"],
                row[index["written_count"]] + DELTA["written"],
                row[index["committed_count"]] + DELTA["committed"],
                text,
                checksum,
                pk,
            ),
        )
        self.connection.commit()
        return int(version + 1)

    def backend_pid(self) -> int:
        return int(self.connection.info.backend_pid)

    def set_logging(self, on: bool) -> None:
        self.connection.autocommit = True
        self.connection.execute("SET log_statement = 'all'" if on else "RESET log_statement")
        self.connection.autocommit = False


class Repository:
    """L2: ``DjangoJobRepository``, one unit of work per operation."""

    def __init__(self) -> None:
        from oxide_batch.domain import BatchStatus, ExecutionCounts, LifecycleTransition
        from oxide_batch.domain.state import EnvelopeKind, StateEnvelope
        from oxide_batch.repository import DjangoJobRepository, SystemClock

        self.repo = DjangoJobRepository(clock=SystemClock())
        self.started = LifecycleTransition(BatchStatus.STARTED)
        self.delta = ExecutionCounts(**DELTA)
        self.envelope = StateEnvelope
        self.kind = EnvelopeKind.CHECKPOINT

    def transition(self, pk: int, expected: int) -> int:
        with self.repo.begin() as uow:
            execution = uow.transition_job_execution(pk, expected, self.started)
            uow.commit()
        return execution.version

    def exit_status(self, pk: int, expected: int, exit_code: str) -> int:
        with self.repo.begin() as uow:
            execution = uow.enrich_job_exit_status(pk, expected, exit_code)
            uow.commit()
        return execution.version

    def chunk(self, pk: int, expected: int, envelope: dict[str, Any]) -> int:
        # What a runtime holds; the repository checks it against its limits.
        state = self.envelope(envelope["schema"], envelope["schema_version"], envelope["payload"])
        with self.repo.begin() as uow:
            step = uow.commit_chunk(pk, expected, self.delta, checkpoint=state)
            uow.commit()
        return step.version

    def lifecycle(self, tag: str) -> int:
        """Launch, 10 steps × 20 chunk commits, completion — one unit of work per
        call, as a runtime makes them through the API."""
        from oxide_batch.domain import BatchStatus, JobInstanceKey, JobParameter
        from oxide_batch.domain import LifecycleTransition as Move

        repo = self.repo
        key = JobInstanceKey.of("bench_lifecycle", [JobParameter.from_json("run", tag)])
        with repo.begin() as uow:
            instance = uow.select_or_create_job_instance(key).instance
            uow.commit()
        with repo.begin() as uow:
            execution = uow.create_job_execution(instance.id)
            uow.commit()
        with repo.begin() as uow:
            execution = uow.transition_job_execution(
                execution.id, execution.version, Move(BatchStatus.STARTED)
            )
            uow.commit()
        for number in range(STEPS):
            with repo.begin() as uow:
                step = uow.create_step_execution(execution.id, f"step{number:02d}")
                uow.commit()
            with repo.begin() as uow:
                step = uow.transition_step_execution(
                    step.id, step.version, Move(BatchStatus.STARTED)
                )
                uow.commit()
            for chunk in range(CHUNKS):
                state = self.envelope("bench.reader", 1, checkpoint(chunk)["payload"])
                with repo.begin() as uow:
                    step = uow.commit_chunk(step.id, step.version, self.delta, checkpoint=state)
                    uow.commit()
            with repo.begin() as uow:
                uow.transition_step_execution(step.id, step.version, Move(BatchStatus.COMPLETED))
                uow.commit()
        with repo.begin() as uow:
            execution = uow.transition_job_execution(
                execution.id, execution.version, Move(BatchStatus.COMPLETED)
            )
            uow.commit()
        return execution.id


class UsualDjango:
    """ref: the same CAS the usual Django way — ``select_for_update().get()`` of
    the model instance, the checks, ``save(update_fields=…)`` (contract §8.1's
    600–700 ops/s figure)."""

    def __init__(self) -> None:
        from django.db import transaction

        from oxide_batch import models  # noqa: TID251 — the reference is the ORM itself

        self.models = models
        self.transaction = transaction

    def transition(self, pk: int, expected: int) -> int:
        with self.transaction.atomic():
            row = self.models.JobExecution.objects.select_for_update(no_key=True).get(pk=pk)
            if row.version != expected:
                raise Failed("stale_version")
            if row.status != "STARTING":
                raise Failed("illegal_transition")
            at = now()
            row.status, row.started_at, row.updated_at, row.last_activity_at = (
                "STARTED",
                at,
                at,
                at,
            )
            row.version += 1
            row.save(
                update_fields=["status", "started_at", "updated_at", "version", "last_activity_at"]
            )
        return int(row.version)

    def exit_status(self, pk: int, expected: int, exit_code: str) -> int:
        with self.transaction.atomic():
            row = self.models.JobExecution.objects.select_for_update(no_key=True).get(pk=pk)
            if row.version != expected:
                raise Failed("stale_version")
            at = now()
            row.exit_code, row.updated_at, row.last_activity_at = exit_code, at, at
            row.version += 1
            row.save(update_fields=["exit_code", "updated_at", "version", "last_activity_at"])
        return int(row.version)

    def chunk(self, pk: int, expected: int, envelope: dict[str, Any]) -> int:
        text = json.dumps(envelope, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        with self.transaction.atomic():
            row = self.models.StepExecution.objects.select_for_update(no_key=True).get(pk=pk)
            if row.version != expected:
                raise Failed("stale_version")
            if row.status != "STARTED":
                raise Failed("invalid_state")
            row.read_count += DELTA["read"]
            row.processed_count += DELTA["processed"]
            row.written_count += DELTA["written"]
            row.committed_count += DELTA["committed"]
            row.checkpoint, row.checkpoint_checksum = text, sha256(text.encode()).hexdigest()
            row.updated_at = now()
            row.version += 1
            row.save(
                update_fields=[
                    "updated_at",
                    "version",
                    "read_count",
                    "processed_count",
                    "written_count",
                    "committed_count",
                    "checkpoint",
                    "checkpoint_checksum",
                ]
            )
        return int(row.version)


class InProcessApi:
    """L3: the DRF endpoints in-process, through Django's test client (the whole
    request cycle: middleware, URL resolution, token authentication, view)."""

    def __init__(self, token: str) -> None:
        from rest_framework.test import APIClient

        self.client = APIClient(HTTP_HOST="127.0.0.1")
        self.client.credentials(HTTP_AUTHORIZATION=f"Token {token}")

    def _post(self, path: str, body: dict[str, Any]) -> int:
        response = self.client.post(f"/api/v1/{path}", body, format="json")
        document = json.loads(response.content)
        if response.status_code != 200:
            raise Failed(document.get("code", str(response.status_code)))
        return int(document["version"])

    def transition(self, pk: int, expected: int) -> int:
        return self._post(
            f"executions/{pk}/transition", {"expected_version": expected, "status": "STARTED"}
        )

    def exit_status(self, pk: int, expected: int, exit_code: str) -> int:
        return self._post(
            f"executions/{pk}/exit-status", {"expected_version": expected, "exit_code": exit_code}
        )

    def chunk(self, pk: int, expected: int, envelope: dict[str, Any]) -> int:
        return self._post(
            f"steps/{pk}/checkpoint",
            {"expected_version": expected, "counts": DELTA, "checkpoint": envelope},
        )


# ======================================================================= measurement


@dataclass
class Sample:
    layer: str
    op: str
    clients: int
    run: int
    ok: int
    wall: float
    latencies: list[float]
    errors: dict[str, int] = field(default_factory=dict)
    driver_cpu: float = 0.0  # the driving process (this one, or the load process)
    server_cpu: float = 0.0  # gunicorn's workers (L4)
    database_cpu: float = 0.0  # every PostgreSQL process
    unit: str = "ops"
    check: str = ""

    @property
    def rate(self) -> float:
        return self.ok / self.wall if self.wall else 0.0

    def percentile(self, fraction: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


class Bench:
    def __init__(self, options: argparse.Namespace, token: str) -> None:
        from django.db import connection

        self.options = options
        self.token = token
        self.samples: list[Sample] = []
        self.postmaster = postmaster_pid()
        params = connection.get_connection_params()
        self.drivers: dict[str, Any] = {
            "L1": RawCas(params, django_cursor=False),
            "L1c": RawCas(params, django_cursor=True),
            "L2": Repository(),
            "ref": UsualDjango(),
            "L3": InProcessApi(token),
        }
        self.server: Server | None = None

    # -- in-process layers -------------------------------------------------------

    def drive(
        self, layer: str, op: str, run: int, call: Callable[[], None], cap: int, duration: float
    ) -> Sample:
        latencies: list[float] = []
        errors: dict[str, int] = {}
        ok = 0
        database = tree_cpu(self.postmaster)
        cpu = time.process_time()
        began = time.perf_counter()
        deadline = began + duration
        while ok < cap and time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                call()
            except StopIteration:
                break
            except Exception as error:
                code = getattr(error, "code", type(error).__name__)
                errors[code] = errors.get(code, 0) + 1
                if sum(errors.values()) >= 10:
                    break
                continue
            latencies.append(time.perf_counter() - started)
            ok += 1
        wall = time.perf_counter() - began
        return Sample(
            layer,
            op,
            1,
            run,
            ok,
            wall,
            latencies,
            errors,
            driver_cpu=time.process_time() - cpu,
            database_cpu=tree_cpu(self.postmaster) - database,
        )

    def in_process(self, layer: str, op: str, run: int, duration: float) -> Sample:
        driver = self.drivers[layer]
        cap = max(50, int(4000 * duration))
        if op == "transition":
            pool = fresh_executions(cap)
            ids: Iterator[int] = iter(pool)

            def call() -> None:
                driver.transition(next(ids), 0)

            sample = self.drive(layer, op, run, call, cap, duration)
            versions, _ = row_totals("ob_job_execution", pool)
            sample.check = self.verify(sample, versions, sample.ok)
        elif op == "exit-status":
            target = started_execution()
            before, _ = row_totals("ob_job_execution", [target.id])

            def call() -> None:
                code = EXIT_CODES[target.version % 2]
                target.version = driver.exit_status(target.id, target.version, code)

            sample = self.drive(layer, op, run, call, cap, duration)
            after, _ = row_totals("ob_job_execution", [target.id])
            sample.check = self.verify(sample, after - before, sample.ok)
        else:
            target = started_step()
            before, read_before = row_totals("ob_step_execution", [target.id])

            def call() -> None:
                target.offset += 1
                target.version = driver.chunk(target.id, target.version, checkpoint(target.offset))

            sample = self.drive(layer, op, run, call, cap, duration)
            after, read_after = row_totals("ob_step_execution", [target.id])
            sample.check = self.verify(sample, after - before, sample.ok)
            if (read_after - read_before) != DELTA["read"] * sample.ok:
                sample.check = f"FAILED: read_count grew {read_after - read_before}"
        self.samples.append(sample)
        return sample

    def lifecycle_in_process(self, run: int, count: int) -> Sample:
        driver: Repository = self.drivers["L2"]
        tag = uuid.uuid4().hex
        executions: list[int] = []

        def call() -> None:
            executions.append(driver.lifecycle(f"{tag}-{len(executions)}"))

        sample = self.drive("L2", "lifecycle", run, call, count, duration=3600)
        sample.unit = "lifecycles"
        sample.check = self.verify_lifecycles(sample, executions)
        self.samples.append(sample)
        return sample

    # -- verification ------------------------------------------------------------

    @staticmethod
    def verify(sample: Sample, increments: int, expected: int) -> str:
        if sample.errors:
            return f"FAILED: errors {sample.errors}"
        if increments != expected:
            return f"FAILED: versions grew {increments}, {expected} operations succeeded"
        return f"ok: +{increments} versions = {expected} ops"

    @staticmethod
    def verify_lifecycles(sample: Sample, executions: list[int]) -> str:
        if sample.errors:
            return f"FAILED: errors {sample.errors}"
        with admin(DATABASE) as connection:
            row = connection.execute(
                """
                SELECT count(DISTINCT e.id) FILTER (WHERE e.status = 'COMPLETED'),
                       coalesce(sum(s.version), 0) + (SELECT coalesce(sum(version), 0)
                           FROM ob_job_execution WHERE id = ANY(%(ids)s)),
                       coalesce(sum(s.read_count), 0),
                       count(s.id) FILTER (WHERE s.status = 'COMPLETED')
                FROM ob_job_execution e JOIN ob_step_execution s ON s.job_execution_id = e.id
                WHERE e.id = ANY(%(ids)s)
                """,
                {"ids": executions},
            ).fetchone()
        assert row is not None
        completed, versions, read, steps = (int(value) for value in row)
        n = len(executions)
        expected = (n, n * LIFECYCLE_BUMPS, n * STEPS * CHUNKS * DELTA["read"], n * STEPS)
        if (completed, versions, read, steps) != expected or sample.ok != n:
            return f"FAILED: {(completed, versions, read, steps)} != {expected}"
        return f"ok: {n} completed, +{versions} versions = {n * LIFECYCLE_BUMPS} CAS ops"

    # -- L4 ----------------------------------------------------------------------

    def over_http(self, op: str, clients: int, run: int, duration: float) -> Sample:
        assert self.server is not None
        plan: dict[str, Any] = {
            "base_url": self.server.url,
            "token": self.token,
            "op": op,
            "duration": duration,
        }
        table = "ob_step_execution" if op == "chunk" else "ob_job_execution"
        if op == "transition":
            per_client = int(1500 * duration / clients) + 20
            pool = fresh_executions(per_client * clients)
            plan["clients"] = [
                {"executions": pool[i * per_client : (i + 1) * per_client]} for i in range(clients)
            ]
            ids = pool
        elif op == "exit-status":
            targets = [started_execution() for _ in range(clients)]
            plan["clients"] = [{"execution": t.id, "version": t.version} for t in targets]
            ids = [t.id for t in targets]
        elif op == "chunk":
            targets = [started_step() for _ in range(clients)]
            plan["clients"] = [{"step": t.id, "version": t.version} for t in targets]
            ids = [t.id for t in targets]
        else:
            each = max(1, self.options.lifecycles // clients)
            tag = uuid.uuid4().hex
            plan["clients"] = [{"lifecycles": each, "tag": f"{tag}-{i}"} for i in range(clients)]
            ids = []
        before, read_before = row_totals(table, ids) if ids else (0, 0)
        result, cpu = self.server.load(plan, self.postmaster)
        sample = Sample(
            "L4",
            op,
            clients,
            run,
            result["ok"],
            result["wall"],
            result["latencies"],
            result["errors"],
            driver_cpu=result["cpu"],
            server_cpu=cpu["server"],
            database_cpu=cpu["database"],
        )
        if op == "lifecycle":
            sample.unit = "lifecycles"
            sample.latencies = []
            lifecycles = Sample("L4", op, clients, run, len(result["executions"]), sample.wall, [])
            sample.check = self.verify_lifecycles(lifecycles, result["executions"])
            if not sample.errors and sample.ok != LIFECYCLE_OPS * len(result["executions"]):
                sample.check = f"FAILED: {sample.ok} requests"
            sample.ok = len(result["executions"])
        else:
            after, read_after = row_totals(table, ids)
            sample.check = self.verify(sample, after - before, sample.ok)
            if op == "chunk" and (read_after - read_before) != DELTA["read"] * sample.ok:
                sample.check = f"FAILED: read_count grew {read_after - read_before}"
        self.samples.append(sample)
        return sample


class Server:
    """gunicorn (sync workers = cores) on a free loopback port, and the load process."""

    def __init__(self, workers: int, token: str, log: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.token = token
        self.log = log.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "project.wsgi:application",
                "--workers",
                str(workers),
                "--worker-class",
                "sync",
                "--bind",
                f"127.0.0.1:{port}",
                "--timeout",
                "120",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env={**os.environ, "DEBUG": "false"},
            stdout=self.log,
            stderr=self.log,
        )
        self.wait_ready(workers)

    def wait_ready(self, workers: int) -> None:
        deadline = time.monotonic() + 60
        call = urlrequest.Request(
            self.url + "/api/v1/descriptor", headers={"Authorization": f"Token {self.token}"}
        )
        while True:
            if self.process.poll() is not None:
                raise SystemExit(f"gunicorn exited {self.process.returncode}")
            try:
                with urlrequest.urlopen(call, timeout=5) as response:
                    if response.status == 200 and len(_children(self.process.pid)) >= workers:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("gunicorn did not answer within 60 s")
            time.sleep(0.2)

    def load(self, plan: dict[str, Any], postmaster: int | None) -> tuple[Any, dict[str, float]]:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "load.py")],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        server, database = tree_cpu(self.process.pid), tree_cpu(postmaster)
        output, _ = process.communicate(json.dumps(plan).encode(), timeout=600)
        cpu = {
            "server": tree_cpu(self.process.pid) - server,
            "database": tree_cpu(postmaster) - database,
        }
        if process.returncode != 0:
            raise SystemExit(f"load process exited {process.returncode}")
        return json.loads(output), cpu

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


# ======================================================================= statements


LOG_LINE = re.compile(r"\[(\d+)\] (LOG|DETAIL|ERROR|STATEMENT):  (.*)$")


def statement_log_path() -> Path | None:
    data = os.environ.get("OXIDE_BATCH_PG_DATA")
    path = None if not data else Path(data).parent / "server.log"
    return path if path is not None and path.exists() else None


def read_statements(path: Path, offset: int, pid: int) -> list[str]:
    """The statements backend ``pid`` logged after ``offset`` (``log_statement``)."""
    time.sleep(0.1)  # backends write their log lines straight to the file
    with path.open("rb") as log:
        log.seek(offset)
        text = log.read().decode("utf-8", "replace")
    statements = []
    for line in text.splitlines():
        match = LOG_LINE.search(line)
        if match is None or int(match.group(1)) != pid or match.group(2) != "LOG":
            continue
        message = match.group(3)
        if message.startswith("statement: "):
            statements.append(message.removeprefix("statement: "))
        elif message.startswith("execute "):
            statements.append(message.split(": ", 1)[1])
    return [s for s in statements if not s.startswith("RESET log_statement")]


def shorten(sql: str) -> str:
    """The select list as a column count (the lists are long and identical)."""
    sql = sql.replace('"', "")
    match = re.match(r"SELECT (.+?) FROM ", sql)
    if match and match.group(1).count(",") >= 4:
        columns = match.group(1).count(",") + 1
        sql = f"SELECT <{columns} columns> FROM " + sql[match.end() :]
    return sql


def normalized(sql: str) -> str:
    """For comparing L1 with L2: no quotes, table qualifiers, column aliases that
    repeat the column, parameters or literals."""
    sql = re.sub(r"'(?:[^']|'')*'(?:::[a-z ]+)?", "?", sql.replace('"', ""))
    sql = re.sub(r"\$\d+|\b\d+\b", "?", sql)
    sql = re.sub(r"\bob_\w+\.", "", sql)
    return re.sub(r"\b(\w+) AS \1\b", r"\1", sql)


class Capture:
    """One operation's statements at L1, L2 and L3, from PostgreSQL's log."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.path = statement_log_path()

    def django_pid(self) -> int:
        from django.db import connection

        connection.ensure_connection()
        return int(connection.connection.info.backend_pid)

    @staticmethod
    def django_logging(on: bool) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SET log_statement = 'all'" if on else "RESET log_statement")

    def one(self, layer: str, op: str) -> list[str]:
        assert self.path is not None
        driver = self.bench.drivers[layer]
        if op == "transition":
            pk = fresh_executions(1)[0]

            def call() -> None:
                driver.transition(pk, 0)

        elif op == "exit-status":
            target = started_execution()

            def call() -> None:
                driver.exit_status(target.id, target.version, EXIT_CODES[0])

        else:
            target = started_step()

            def call() -> None:
                driver.chunk(target.id, target.version, checkpoint(1))

        raw = layer.startswith("L1")
        pid = driver.backend_pid() if raw else self.django_pid()
        switch = driver.set_logging if raw else self.django_logging
        switch(True)
        offset = self.path.stat().st_size
        call()
        switch(False)
        return read_statements(self.path, offset, pid)

    def all(self) -> dict[str, dict[str, list[str]]]:
        if self.path is None:
            print("(no statement log: run through scripts/with-postgres to capture statements)")
            return {}
        return {op: {layer: self.one(layer, op) for layer in ("L1", "L2", "L3")} for op in OPS}


def print_statements(captured: dict[str, dict[str, list[str]]]) -> dict[str, Any]:
    verdicts: dict[str, Any] = {}
    for op, layers in captured.items():
        same = [normalized(s) for s in layers["L1"]] == [normalized(s) for s in layers["L2"]]
        verdicts[op] = {"same_as_L1": same, "L2_statements": len(layers["L2"])}
        print(f"\n-- {op}: L1 and L2 issue {'the same' if same else 'DIFFERENT'} statements")
        if not same:
            for layer in ("L1", "L2"):
                print(f"   {layer} normalized: {[normalized(s) for s in layers[layer]]}")
        for layer, statements in layers.items():
            print(f"   {layer} ({len(statements)} statements)")
            for number, sql in enumerate(statements, 1):
                print(f"     {number}. {shorten(sql)}")
    return verdicts


# ============================================================================ report


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(samples: list[Sample]) -> dict[tuple[str, str, int], dict[str, Any]]:
    rows: dict[tuple[str, str, int], dict[str, Any]] = {}
    for sample in samples:
        row = rows.setdefault(
            (sample.layer, sample.op, sample.clients),
            {"rates": {}, "p50": [], "p99": [], "cpu": [], "unit": sample.unit, "checks": []},
        )
        row["rates"][sample.run] = sample.rate
        if sample.latencies:
            row["p50"].append(sample.percentile(0.50) * 1000)
            row["p99"].append(sample.percentile(0.99) * 1000)
        if sample.ok:
            row["cpu"].append(
                {
                    "driver": sample.driver_cpu / sample.ok * 1000,
                    "server": sample.server_cpu / sample.ok * 1000,
                    "database": sample.database_cpu / sample.ok * 1000,
                    "wall": sample.wall / sample.ok * 1000 * sample.clients,
                }
            )
        row["checks"].append(sample.check)
    for row in rows.values():
        row["rate"] = median(list(row["rates"].values()))
        row["p50_ms"] = median(row["p50"])
        row["p99_ms"] = median(row["p99"])
        row["ms_per_op"] = {
            part: median([cpu[part] for cpu in row["cpu"]])
            for part in ("wall", "driver", "server", "database")
        }
    return rows


def ratio(
    rows: dict[tuple[str, str, int], dict[str, Any]],
    numerator: tuple[str, str, int],
    denominator: tuple[str, str, int],
    scale: float = 1.0,
) -> float:
    """The median of the per-round ratios (rounds pair measurements made close in time)."""
    top, bottom = rows.get(numerator), rows.get(denominator)
    if not top or not bottom:
        return float("nan")
    runs = sorted(set(top["rates"]) & set(bottom["rates"]))
    return median([top["rates"][r] / (bottom["rates"][r] * scale) for r in runs])


def report(
    samples: list[Sample], statements: dict[str, Any], info: dict[str, Any], runs: int
) -> dict[str, Any]:
    rows = summarize(samples)
    n = info["cores"]
    print(
        f"\n== medians of {runs} round(s); ratio = median of per-round ratios to L1 "
        "(same operation, one client)"
    )
    header = (
        f"{'layer':<5} {'operation':<12} {'clients':>7} {'ops/s':>9} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'÷ L1':>6}   CPU ms/op: driver server database"
    )
    print(header)
    print("-" * len(header))
    table = []
    lifecycles = []
    for key, row in sorted(rows.items(), key=lambda item: order(item[0])):
        layer, op, clients = key
        r = ratio(rows, key, ("L1", op, 1)) if op in OPS else float("nan")
        cpu = row["ms_per_op"]
        if op in OPS:
            print(
                f"{layer:<5} {op:<12} {clients:>7} {row['rate']:>9,.0f} "
                f"{row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f} {r:>6.2f}   "
                f"{cpu['driver']:>10.3f} {cpu['server']:>6.3f} {cpu['database']:>8.3f}"
            )
        else:
            lifecycles.append((layer, clients, row))
        table.append(
            {
                "layer": layer,
                "op": op,
                "clients": clients,
                "unit": row["unit"],
                "rate": round(row["rate"], 2),
                "rates": [round(v, 2) for v in row["rates"].values()],
                "p50_ms": round(row["p50_ms"], 3),
                "p99_ms": round(row["p99_ms"], 3),
                "ratio_to_L1": round(r, 3),
                "cpu_ms_per_op": {k: round(v, 3) for k, v in cpu.items()},
                "checks": row["checks"],
            }
        )
    if lifecycles:
        print(
            f"\n== whole lifecycles (launch, {STEPS} steps × {CHUNKS} chunk commits, completion:"
            f" {LIFECYCLE_OPS} calls)"
        )
        print(
            f"{'layer':<5} {'clients':>7} {'lifecycles/s':>12} {'calls/s':>8}   "
            "CPU ms/lifecycle: driver server database"
        )
        for layer, clients, row in lifecycles:
            cpu = row["ms_per_op"]
            print(
                f"{layer:<5} {clients:>7} {row['rate']:>12.2f} {row['rate'] * LIFECYCLE_OPS:>8,.0f}"
                f"   {cpu['driver']:>17.1f} {cpu['server']:>6.1f} {cpu['database']:>8.1f}"
            )
    targets = evaluate(rows, statements, n)
    print("\n== targets (issue 7, contract §8.2)")
    for target in targets:
        mark = "met" if target["met"] else "MISSED"
        print(f"  {mark:<6} {target['target']:<58} {target['measured']}")
    failed = [s for s in samples if not s.check.startswith("ok")]
    print(
        f"\n== correctness: {len(samples) - len(failed)}/{len(samples)} measurements verified"
        + "".join(f"\n   {s.layer} {s.op} x{s.clients} run {s.run}: {s.check}" for s in failed)
    )
    return {
        "machine": info,
        "runs": runs,
        "table": table,
        "targets": targets,
        "failed": len(failed),
    }


LAYER_ORDER = {"L1": 0, "L1c": 1, "L2": 2, "ref": 3, "L3": 4, "L4": 5}


def order(key: tuple[str, str, int]) -> tuple[int, int, int]:
    layer, op, clients = key
    ops = (*OPS, "lifecycle")
    return (ops.index(op), LAYER_ORDER[layer], clients)


def evaluate(
    rows: dict[tuple[str, str, int], dict[str, Any]], statements: dict[str, Any], n: int
) -> list[dict[str, Any]]:
    targets = []

    def add(text: str, value: float, goal: float, measured: str) -> None:
        if math.isnan(value):  # a layer this run left out
            return
        targets.append(
            {
                "target": text,
                "value": value,
                "goal": goal,
                "met": value >= goal,
                "measured": measured,
            }
        )

    for op in ("transition", "chunk"):
        r = ratio(rows, ("L2", op, 1), ("L1", op, 1))
        add(f"L2 {op} ≥ 0.5 × L1", r, 0.5, f"{r:.2f} × L1")
    for op in OPS:
        r = ratio(rows, ("L3", op, 1), ("L1", op, 1))
        add(f"L3 {op} ≥ 0.3 × L1", r, 0.3, f"{r:.2f} × L1")
    for op in OPS:
        r = ratio(rows, ("L4", op, 8), ("L3", op, 1), scale=n)
        add(
            f"L4 {op} at 8 clients ≥ 0.5 × L3 × {n} cores",
            r,
            0.5,
            f"{r:.2f} × (L3 × {n})",
        )
    for clients, prefect in PREFECT.items():
        row = rows.get(("L4", "transition", clients))
        rate = row["rate"] if row else float("nan")
        add(
            f"L4 transition at {clients} client(s) ≥ 10 × Prefect ({prefect:.0f}/s)",
            rate / prefect,
            10.0,
            f"{rate:,.0f}/s = {rate / prefect:.1f} × Prefect",
        )
    chunk = statements.get("chunk")
    if chunk:
        count = chunk["L2_statements"]
        same = "same as L1" if chunk["same_as_L1"] else "DIFFERENT from L1"
        targets.append(
            {
                "target": "a chunk commit issues ≤ 4 statements",
                "value": count,
                "goal": 4,
                "met": count <= 4,
                "measured": f"{count} statements ({same})",
            }
        )
    return targets


def profile(bench: Bench, spec: str, duration: float) -> None:
    """pyinstrument over ``duration`` seconds of one in-process layer and operation
    (after a warm-up); the fixture setup shows as its own small branch."""
    from pyinstrument import Profiler

    layer, op = spec.split(":")
    bench.in_process(layer, op, 0, 0.5)
    profiler = Profiler(interval=0.0005)
    profiler.start()
    sample = bench.in_process(layer, op, 1, max(duration, 3.0))
    profiler.stop()
    print(profiler.output_text(unicode=True, color=False))
    print(
        f"{layer} {op}: {sample.rate:,.0f} ops/s under the profiler; CPU ms/op: this process "
        f"{sample.driver_cpu / sample.ok * 1000:.3f}, PostgreSQL "
        f"{sample.database_cpu / sample.ok * 1000:.3f}; {sample.check}"
    )


# ============================================================================== main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run: 3 short rounds (~1 min)")
    parser.add_argument("--runs", type=int, help="interleaved rounds (default 5; quick 3)")
    parser.add_argument("--duration", type=float, help="seconds per in-process measurement")
    parser.add_argument("--http-duration", type=float, help="seconds per L4 measurement")
    parser.add_argument("--lifecycles", type=int, help="lifecycles per lifecycle measurement")
    parser.add_argument("--layers", default="L1,L1c,L2,ref,L3,L4", help="comma-separated")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the bench database")
    parser.add_argument(
        "--profile",
        metavar="LAYER:OP",
        help="instead: profile one in-process layer (L1, L2, ref, L3) and operation "
        "with pyinstrument (e.g. L3:chunk)",
    )
    options = parser.parse_args()
    quick = options.quick
    options.runs = options.runs or (3 if quick else 5)
    options.duration = options.duration or (0.3 if quick else 1.0)
    options.http_duration = options.http_duration or (0.5 if quick else 1.5)
    options.lifecycles = options.lifecycles or (1 if quick else 4)
    layers = options.layers.split(",")
    reexec_under_postgres()

    started = time.perf_counter()
    create_database()
    token = setup_django()
    info = machine()
    pg = info["postgresql"]
    print(
        f"== {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB; "
        f"PostgreSQL {pg['server_version']} (fsync={pg['fsync']}, "
        f"synchronous_commit={pg['synchronous_commit']}); Python {info['python']}, "
        f"Django {info['django']}, DRF {info['drf']}, psycopg {info['psycopg']}, "
        f"gunicorn {info['gunicorn']}",
        flush=True,
    )
    load = os.getloadavg()
    info["load_before"] = [round(value, 2) for value in load]
    print(f"   load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    if load[0] > 0.5:
        print("   (the machine is busy: figures will be lower and noisier than on an idle one)")
    if pg["fsync"] != "on" or pg["synchronous_commit"] != "on":
        print(
            "   (commits are NOT durable: run without DATABASE_URL, or with "
            "OXIDE_BATCH_PG_DURABLE=1 set for scripts/with-postgres itself)"
        )
    bench = Bench(options, token)
    if options.profile:
        try:
            profile(bench, options.profile, options.duration)
        finally:
            if not options.keep:
                drop_database()
        return
    try:
        if "L4" in layers:
            bench.server = Server(cores(), token, Path("/tmp") / f"{DATABASE}-gunicorn.log")
        in_process = [layer for layer in ("L1", "L1c", "L2", "ref", "L3") if layer in layers]
        # Warm-up: imports, caches, prepared statements, both gunicorn workers.
        for layer in in_process:
            for op in OPS:
                bench.in_process(layer, op, 0, 0.2)
        if bench.server is not None:
            for op in OPS:
                bench.over_http(op, 8, 0, 0.5)
        bench.samples.clear()
        for run in range(1, options.runs + 1):
            print(f"== round {run}/{options.runs}", flush=True)
            for op in OPS:
                for layer in in_process:
                    s = bench.in_process(layer, op, run, options.duration)
                    print(f"   {layer:<4} {op:<12} {s.rate:>9,.0f} ops/s   {s.check}", flush=True)
            if "L2" in layers:
                s = bench.lifecycle_in_process(run, options.lifecycles)
                print(f"   L2   lifecycle    {s.rate:>9,.2f} /s      {s.check}", flush=True)
            if bench.server is not None:
                for clients in CONCURRENCY:
                    for op in OPS:
                        s = bench.over_http(op, clients, run, options.http_duration)
                        print(
                            f"   L4   {op:<12} x{clients} {s.rate:>6,.0f} ops/s   {s.check}",
                            flush=True,
                        )
                    s = bench.over_http("lifecycle", clients, run, 0)
                    print(
                        f"   L4   lifecycle    x{clients} {s.rate:>6,.2f} /s      {s.check}",
                        flush=True,
                    )
        statements: dict[str, Any] = {}
        if all(layer in layers for layer in ("L1", "L2", "L3")):
            print("\n== statements of one operation (PostgreSQL log, log_statement = all)")
            statements = print_statements(Capture(bench).all())
        result = report(bench.samples, statements, info, options.runs)
    finally:
        if bench.server is not None:
            bench.server.stop()
        if not options.keep:
            drop_database()
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["load_after"] = [round(value, 2) for value in os.getloadavg()]
    result["statements"] = statements
    print(
        f"\n== {result['seconds']:.0f} s in all; load average after: "
        + " ".join(f"{value:.2f}" for value in result["load_after"])
    )
    if options.json:
        options.json.write_text(json.dumps(result, indent=2))
    if result["failed"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
