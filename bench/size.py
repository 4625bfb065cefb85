"""Size benchmark: chunk commit and hot reads at 10^4 and 10^7 step rows (issue 16).

One command from a fresh clone (it starts its own throwaway PostgreSQL through
``scripts/with-postgres``, with that script's fast defaults: ``fsync=off``)::

    .venv/bin/python bench/size.py                       # 10^4 vs 10^7 step rows
    .venv/bin/python bench/size.py --large 100000        # quick: 10^4 vs 10^5

Run inside ``scripts/with-postgres`` (``DATABASE_URL`` set) it uses that cluster.
The durability setting does not matter for this comparison: both sizes run on
the same cluster with the same settings, and what is compared is the cost of an
operation among few rows against the same operation among many. It creates the
databases ``oxb_bench_size_small`` and ``oxb_bench_size_large`` (10^7 step rows
take about 7 GB on disk) and drops them at the end (``--keep`` keeps them).

Each database is migrated, then filled server-side with ``INSERT … SELECT
generate_series`` (not through the repository), then ``VACUUM ANALYZE``. For S
step rows: S/10 job executions of 10 steps each, 4/5 as many job instances (one
in five has a FAILED first attempt and a COMPLETED restart, ``restart_of`` set),
every step with a checkpoint envelope and its SHA-256. A fixed number of
executions (``--active``, default 60, spread evenly through the ids) are
STARTED, 9 steps COMPLETED and the 10th STARTED: half of them with activity now,
half left behind in the past (what ``unresolved_for`` finds). The active set is
the same at both sizes: it is bounded by the runtimes, not by the history.

The operations, through the real API in-process (``APIClient`` with a runtime
token, as ``bench/layers.py``'s L3), each on rows among the big data:

- ``chunk``: ``POST steps/{id}/checkpoint`` (count deltas and a checkpoint) on
  the STARTED step of one of the active executions, repeated;
- ``execution``: ``GET executions/{id}`` of a random execution;
- ``step``: ``GET steps/{id}`` of a random step;
- ``checkpoint``: ``GET steps/{id}/checkpoint`` of a random step (verified);
- ``steps``: ``GET executions/{id}/steps`` (first page) of a random execution;
- ``unresolved``: ``GET executions?unresolved_for=1d`` (first page), the
  operator's "needs attention" list.

Each measurement is ``--n`` operations; both sizes are measured in each of
``--rounds`` interleaved rounds (small, then large, per round) after a warm-up,
and the table shows medians, ops/s and CPU ms per operation (this process and
every PostgreSQL process), and the median of the per-round large/small ratios
against the target (large ≥ small / 1.2). After every measurement the rows are
checked: the chunk target's version grew by the operations and its read count by
100 each; every read answered 200 with the row asked for (10 steps a list, the
known unresolved set). The statements of one operation and their plans
(``EXPLAIN (ANALYZE, BUFFERS)``, rolled back) are printed at both sizes for a
ratio that misses, or for all with ``--explain``. Figures are recorded in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import layers  # bench/layers.py: the cluster, database and CPU helpers

ROOT = layers.ROOT
SIZES = ("small", "large")
OPS = ("chunk", "execution", "step", "checkpoint", "steps", "unresolved")
STEPS = 10  # per execution
TARGET = 1.2  # large within 1.2x of small
DELTA = layers.DELTA
COUNTS = (
    "read_count, processed_count, written_count, filtered_count, committed_count, rolled_back_count"
)


# ============================================================================ setup


def database(size: str) -> str:
    return f"oxb_bench_size_{size}"


_WRAPPERS: dict[str, Any] = {}


def use(name: str) -> None:
    """Point Django's default connection (and the layers helpers) at ``name``:
    one connection per database, kept open and swapped in, so switching between
    the sizes every few operations costs no reconnect."""
    from django.db import connections

    if name not in _WRAPPERS:
        current = connections["default"]
        _WRAPPERS[name] = type(current)({**current.settings_dict, "NAME": name}, "default")
    connections["default"] = _WRAPPERS[name]
    layers.DATABASE = name


def close_all() -> None:
    for wrapper in _WRAPPERS.values():
        wrapper.close()


def prepare(names: list[str]) -> str:
    """A migrated template with the runtime user and token, cloned into ``names``
    (so one token authenticates in every database); returns the token."""
    layers.DATABASE = "oxb_bench_size_template"
    layers.create_database()
    token = layers.setup_django()
    from django.db import connections

    connections.close_all()
    with layers.admin() as connection:
        for name in names:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            connection.execute(f'CREATE DATABASE "{name}" TEMPLATE "{layers.DATABASE}"')
    layers.drop_database()
    return token


@dataclass
class Shape:
    """What a database holds (its ids are 1..n per table)."""

    steps: int
    executions: int
    instances: int
    active: list[int]  # STARTED executions with activity now (chunk targets)
    stale: list[int]  # STARTED executions left behind (the unresolved list)
    seconds: float = 0.0
    bytes: int = 0


def shape(steps: int, active: int) -> tuple[int, int, int, int]:
    executions = steps // STEPS
    instances = executions - executions // 5
    active = max(2, min(active, executions // 5))
    stride = max(1, executions // 5 // active)
    return executions, instances, active, stride


def build(name: str, steps: int, active: int) -> Shape:
    """Fill ``name`` server-side; FK triggers off during the load (one check per
    row at COMMIT would dominate), the references checked by anti-joins after."""
    executions, instances, active, stride = shape(steps, active)
    started = time.perf_counter()
    with layers.admin(name) as connection:
        definition = connection.execute(
            "SELECT id FROM ob_job_definition WHERE job_name IS NULL"
        ).fetchone()
        assert definition is not None
        params = {
            "instances": instances,
            "executions": executions,
            "active": active,
            "stride": stride,
            "definition": definition[0],
        }
        connection.execute("SET statement_timeout = 0")
        connection.execute("SET maintenance_work_mem = '1GB'")
        connection.execute("SET session_replication_role = replica")
        # Instance i's first attempt is execution i + (i - 1) / 4: executions 5k - 1
        # (FAILED) and 5k (its COMPLETED restart) share instance 4k.
        connection.execute(
            """
            INSERT INTO ob_job_instance (id, job_name, key_digest, identifying_parameters,
                                         created_at)
            SELECT i, 'bench_job_' || i %% 10, encode(sha256(('size' || i)::bytea), 'hex'),
                   jsonb_build_array(jsonb_build_object('name', 'run', 'type', 'STRING',
                                                        'value', i::text)),
                   timestamptz '2024-01-01' + (i + (i - 1) / 4) * interval '10 seconds'
            FROM generate_series(1, %(instances)s) AS i
            """,
            params,
        )
        # Execution e: instance e - e / 5; e % 5 = 4 FAILED, e % 5 = 0 its restart;
        # every stride-th e % 5 = 1 (the first ``active``) STARTED, alternately with
        # activity now and left in the past.
        connection.execute(
            f"""
            INSERT INTO ob_job_execution (id, job_instance_id, job_name, attempt, restart_of_id,
                definition_id, status, exit_code, failure_category, failure_id, created_at,
                started_at, ended_at, updated_at, last_activity_at, version, {COUNTS})
            SELECT e, e - e / 5, 'bench_job_' || (e - e / 5) %% 10,
                   CASE WHEN e %% 5 = 0 THEN 2 ELSE 1 END,
                   CASE WHEN e %% 5 = 0 THEN e - 1 END, %(definition)s, x.status,
                   CASE WHEN x.status = 'STARTED' THEN 'UNKNOWN' ELSE x.status END,
                   CASE WHEN x.status = 'FAILED' THEN 'USER_COMPONENT' END,
                   CASE WHEN x.status = 'FAILED' THEN 1 END,
                   t, t, CASE WHEN x.status <> 'STARTED' THEN t + interval '1 second' END,
                   CASE WHEN x.status <> 'STARTED' THEN t + interval '1 second'
                        WHEN x.recent THEN now() ELSE t END,
                   CASE WHEN x.status <> 'STARTED' THEN t + interval '1 second'
                        WHEN x.recent THEN now() ELSE t END,
                   CASE WHEN x.status = 'STARTED' THEN 1 ELSE 2 END,
                   5000, 5000, 5000, 0, 50, 0
            FROM generate_series(1, %(executions)s) AS e,
                 LATERAL (SELECT timestamptz '2024-01-01' + e * interval '10 seconds' AS t,
                                 e %% 5 = 1 AND (e - 1) / 5 %% %(stride)s = 0
                                     AND (e - 1) / 5 / %(stride)s < %(active)s AS active,
                                 (e - 1) / 5 / %(stride)s %% 2 = 0 AS recent_slot) AS a,
                 LATERAL (SELECT CASE WHEN a.active THEN 'STARTED'
                                      WHEN e %% 5 = 4 THEN 'FAILED'
                                      ELSE 'COMPLETED' END AS status,
                                 a.active AND a.recent_slot AS recent) AS x
            """,
            params,
        )
        # Step s of execution e: id (e - 1) * 10 + s; the last step of a FAILED
        # execution FAILED, of a STARTED one STARTED; a checkpoint on every one.
        connection.execute(
            f"""
            INSERT INTO ob_step_execution (id, job_instance_id, job_execution_id, step_name,
                node_id, status, exit_code, failure_category, failure_id, created_at,
                started_at, ended_at, updated_at, version, {COUNTS}, checkpoint,
                checkpoint_checksum)
            SELECT (e.id - 1) * 10 + s, e.job_instance_id, e.id, x.name, x.name, x.status,
                   CASE WHEN x.status = 'STARTED' THEN 'UNKNOWN' ELSE x.status END,
                   CASE WHEN x.status = 'FAILED' THEN 'USER_COMPONENT' END,
                   CASE WHEN x.status = 'FAILED' THEN 1 END,
                   x.t, x.t, CASE WHEN x.status <> 'STARTED' THEN x.t + interval '40 ms' END,
                   CASE WHEN x.status <> 'STARTED' THEN x.t + interval '40 ms'
                        ELSE e.last_activity_at END,
                   CASE WHEN x.status = 'STARTED' THEN 6 ELSE 7 END,
                   500, 500, 500, 0, 5, 0, c.text,
                   encode(sha256(convert_to(c.text, 'UTF8')), 'hex')
            FROM ob_job_execution AS e, generate_series(1, 10) AS s,
                 LATERAL (SELECT 'step' || lpad(s::text, 2, '0') AS name,
                                 e.created_at + s * interval '50 ms' AS t,
                                 CASE WHEN s < 10 OR e.status = 'COMPLETED' THEN 'COMPLETED'
                                      ELSE e.status END AS status) AS x,
                 LATERAL (SELECT '{{"payload":{{"file":"part-' || lpad(s::text, 5, '0')
                                 || '.csv","offset":500}},"schema":"bench.reader",'
                                 || '"schema_version":1}}' AS text) AS c
            """,
        )
        for table in ("ob_job_instance", "ob_job_execution", "ob_step_execution"):
            connection.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"(SELECT max(id) FROM {table}))"
            )
        connection.execute("SET session_replication_role = DEFAULT")
        orphans = connection.execute(
            """
            SELECT (SELECT count(*) FROM ob_job_execution e WHERE NOT EXISTS
                        (SELECT 1 FROM ob_job_instance i WHERE i.id = e.job_instance_id))
                 + (SELECT count(*) FROM ob_job_execution e WHERE e.restart_of_id IS NOT NULL
                        AND NOT EXISTS (SELECT 1 FROM ob_job_execution r
                                        WHERE r.id = e.restart_of_id
                                          AND r.job_instance_id = e.job_instance_id))
                 + (SELECT count(*) FROM ob_step_execution s WHERE NOT EXISTS
                        (SELECT 1 FROM ob_job_execution e WHERE e.id = s.job_execution_id
                                 AND e.job_instance_id = s.job_instance_id))
            """
        ).fetchone()
        assert orphans is not None
        assert orphans[0] == 0, f"{orphans[0]} dangling references"
        connection.execute("VACUUM (ANALYZE)")
        rows = connection.execute(
            """
            SELECT e.id, e.last_activity_at > now() - interval '1 day'
            FROM ob_job_execution e WHERE e.status = 'STARTED' ORDER BY e.id
            """
        ).fetchall()
        size = connection.execute("SELECT pg_database_size(current_database())").fetchone()
        assert size is not None
    result = Shape(
        steps=steps,
        executions=executions,
        instances=instances,
        active=[int(pk) for pk, recent in rows if recent],
        stale=[int(pk) for pk, recent in rows if not recent],
        seconds=time.perf_counter() - started,
        bytes=int(size[0]),
    )
    assert len(result.active) + len(result.stale) == active, (result, active)
    return result


# ======================================================================= measurement


class Failed(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class Sample:
    size: str
    op: str
    run: int
    ok: int
    wall: float
    errors: dict[str, int] = field(default_factory=dict)
    driver_cpu: float = 0.0
    database_cpu: float = 0.0
    check: str = ""

    @property
    def rate(self) -> float:
        return self.ok / self.wall if self.wall else 0.0


class Bench:
    def __init__(self, token: str, shapes: dict[str, Shape], n: int, seed: int) -> None:
        from rest_framework.test import APIClient

        self.client = APIClient(HTTP_HOST="127.0.0.1")
        self.client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        self.shapes = shapes
        self.n = n
        self.random = random.Random(seed)
        self.postmaster = layers.postmaster_pid()
        self.samples: list[Sample] = []
        self.targets = {size: list(shape.active) for size, shape in shapes.items()}

    def get(self, path: str) -> Any:
        response = self.client.get(f"/api/v1/{path}")
        document = json.loads(response.content)
        if response.status_code != 200:
            raise Failed(document.get("code", str(response.status_code)))
        return document

    def expect(self, condition: bool, what: str) -> None:
        if not condition:
            raise Failed(what)

    def calls(self, size: str, op: str) -> tuple[Callable[[int], None], Callable[[], str]]:
        """The operation (given its index) and the check of what it left."""
        shape = self.shapes[size]
        ids = [self.random.randint(1, shape.executions) for _ in range(self.n)]
        if op == "chunk":
            # The STARTED (10th) step of an active execution, one per measurement.
            execution = self.targets[size].pop(0)
            pk = (execution - 1) * STEPS + STEPS
            before, read_before = layers.row_totals("ob_step_execution", [pk])
            target = layers.Target(pk, before)
            done = [0]

            def chunk(i: int) -> None:
                target.offset += 1
                response = self.client.post(
                    f"/api/v1/steps/{pk}/checkpoint",
                    {
                        "expected_version": target.version,
                        "counts": DELTA,
                        "checkpoint": layers.checkpoint(target.offset),
                    },
                    format="json",
                )
                document = json.loads(response.content)
                if response.status_code != 200:
                    raise Failed(document.get("code", str(response.status_code)))
                target.version = int(document["version"])
                done[0] += 1

            def check_chunk() -> str:
                after, read_after = layers.row_totals("ob_step_execution", [pk])
                if after - before != done[0]:
                    return f"FAILED: versions grew {after - before}, {done[0]} ops"
                if read_after - read_before != DELTA["read"] * done[0]:
                    return f"FAILED: read_count grew {read_after - read_before}"
                return f"ok: +{done[0]} versions, +{read_after - read_before} read"

            return chunk, check_chunk
        if op in ("step", "checkpoint"):
            ids = [self.random.randint(1, shape.steps) for _ in range(self.n)]
        checked = [0]

        def read(i: int) -> None:
            pk = ids[i % len(ids)]
            if op == "execution":
                document = self.get(f"executions/{pk}")
                self.expect(document["id"] == pk, "wrong execution")
            elif op == "step":
                document = self.get(f"steps/{pk}")
                self.expect(document["id"] == pk, "wrong step")
            elif op == "checkpoint":
                document = self.get(f"steps/{pk}/checkpoint")
                self.expect(
                    document["step"]["id"] == pk
                    and document["checkpoint"]["payload"]["offset"] >= 500,
                    "wrong checkpoint",
                )
            elif op == "steps":
                document = self.get(f"executions/{pk}/steps")
                found = document["results"]
                self.expect(
                    len(found) == STEPS and all(s["job_execution_id"] == pk for s in found),
                    f"{len(found)} steps",
                )
            else:
                document = self.get("executions?unresolved_for=1d")
                found = sorted(e["id"] for e in document["results"])
                self.expect(found == shape.stale, f"{len(found)} unresolved")
            checked[0] += 1

        def check_read() -> str:
            return f"ok: {checked[0]} answers verified"

        return read, check_read

    def measure(self, op: str, run: int, block: int) -> list[Sample]:
        """``op`` at both sizes, ``self.n`` operations each, alternating sizes every
        ``block`` operations (a busy moment on the machine hits both alike)."""
        plans = {}
        for size in SIZES:
            use(database(size))
            plans[size] = self.calls(size, op)
        samples = {size: Sample(size, op, run, 0, 0.0) for size in SIZES}
        done = dict.fromkeys(SIZES, 0)
        while any(done[size] < self.n for size in SIZES):
            for size in SIZES:
                sample, (call, _) = samples[size], plans[size]
                if done[size] >= self.n or sum(sample.errors.values()) >= 10:
                    done[size] = self.n
                    continue
                use(database(size))
                database_cpu = layers.tree_cpu(self.postmaster)
                cpu = time.process_time()
                began = time.perf_counter()
                for i in range(done[size], min(self.n, done[size] + block)):
                    try:
                        call(i)
                    except Exception as error:
                        code = getattr(error, "code", type(error).__name__)
                        sample.errors[code] = sample.errors.get(code, 0) + 1
                        continue
                    sample.ok += 1
                sample.wall += time.perf_counter() - began
                sample.driver_cpu += time.process_time() - cpu
                sample.database_cpu += layers.tree_cpu(self.postmaster) - database_cpu
                done[size] = min(self.n, done[size] + block)
        for size, sample in samples.items():
            use(database(size))
            sample.check = f"FAILED: errors {sample.errors}" if sample.errors else plans[size][1]()
            if run:
                self.samples.append(sample)
        return list(samples.values())

    # -- statements and plans ----------------------------------------------------

    def statements(self, size: str, op: str) -> list[str]:
        """The SQL of one operation, as Django ran it (parameters inlined)."""
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        n, self.n = self.n, 1
        try:
            use(database(size))
            call, _ = self.calls(size, op)
            with CaptureQueriesContext(connection) as captured:
                call(0)
        finally:
            self.n = n
        return [query["sql"] for query in captured.captured_queries]

    def explain(self, size: str, op: str) -> None:
        print(f"\n-- {op} at {size} ({self.shapes[size].steps:,} step rows)")
        with layers.admin(database(size)) as connection:
            for number, sql in enumerate(self.statements(size, op), 1):
                print(f"   {number}. {layers.shorten(sql)}")
                if not sql.lstrip().upper().startswith(("SELECT", "UPDATE", "INSERT", "DELETE")):
                    continue
                connection.execute("BEGIN")
                try:
                    plan = connection.execute(
                        f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}"
                    ).fetchall()
                finally:
                    connection.execute("ROLLBACK")
                for (line,) in plan:
                    print(f"        {line}")


# ============================================================================ report


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(bench: Bench, rounds: int) -> tuple[list[dict[str, Any]], list[str]]:
    by: dict[tuple[str, str], dict[int, Sample]] = {}
    for sample in bench.samples:
        by.setdefault((sample.size, sample.op), {})[sample.run] = sample
    small, large = (bench.shapes[size].steps for size in SIZES)
    print(
        f"\n== medians of {rounds} round(s), {bench.n} operations each; "
        f"ratio = median of per-round small/large ops/s (target ≤ {TARGET})"
    )
    header = (
        f"{'operation':<11} {f'{small:,} ops/s':>16} {f'{large:,} ops/s':>18} {'ratio':>6} "
        f"{'':>4}   CPU ms/op small: app db   large: app db"
    )
    print(header)
    print("-" * len(header))
    table, missed = [], []
    for op in OPS:
        s, g = by.get(("small", op), {}), by.get(("large", op), {})
        runs = sorted(set(s) & set(g))
        ratio = median([s[r].rate / g[r].rate for r in runs if g[r].rate])
        rate = {
            size: median([x.rate for x in found.values()])
            for size, found in (("small", s), ("large", g))
        }
        cpu = {
            size: (
                median([x.driver_cpu / x.ok * 1000 for x in found.values() if x.ok]),
                median([x.database_cpu / x.ok * 1000 for x in found.values() if x.ok]),
            )
            for size, found in (("small", s), ("large", g))
        }
        met = ratio <= TARGET
        if not met:
            missed.append(op)
        print(
            f"{op:<11} {rate['small']:>16,.0f} {rate['large']:>18,.0f} {ratio:>6.2f} "
            f"{'PASS' if met else 'FAIL':>4}   {cpu['small'][0]:>14.3f} {cpu['small'][1]:.3f}"
            f"   {cpu['large'][0]:>8.3f} {cpu['large'][1]:.3f}"
        )
        table.append(
            {
                "op": op,
                "small_ops_per_second": round(rate["small"], 1),
                "large_ops_per_second": round(rate["large"], 1),
                "small_rates": [round(x.rate, 1) for x in s.values()],
                "large_rates": [round(x.rate, 1) for x in g.values()],
                "ratio": round(ratio, 3),
                "pass": met,
                "cpu_ms_per_op": {
                    size: {"app": round(app, 3), "database": round(db, 3)}
                    for size, (app, db) in cpu.items()
                },
            }
        )
    return table, missed


# ============================================================================== main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10_000, help="step rows (default 10^4)")
    parser.add_argument("--large", type=int, default=10_000_000, help="step rows (default 10^7)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--n", type=int, default=500, help="operations per measurement")
    parser.add_argument(
        "--block", type=int, default=25, help="operations before switching size (default 25)"
    )
    parser.add_argument("--active", type=int, default=60, help="STARTED executions per size")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--explain", action="store_true", help="print every operation's plans")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the bench databases")
    options = parser.parse_args()
    # scripts/with-postgres's defaults (fsync off), as the build wants.
    layers.reexec_under_postgres(__file__, durable=False)

    started = time.perf_counter()
    names = [database(size) for size in SIZES]
    token = prepare(names)
    layers.DATABASE = names[0]
    info = layers.machine()
    pg = info["postgresql"]
    load = os.getloadavg()
    info["load_before"] = [round(value, 2) for value in load]
    print(
        f"== {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB; "
        f"PostgreSQL {pg['server_version']} (fsync={pg['fsync']}, "
        f"synchronous_commit={pg['synchronous_commit']}); Python {info['python']}, "
        f"Django {info['django']}, DRF {info['drf']}, psycopg {info['psycopg']}",
        flush=True,
    )
    print(f"   load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    shapes: dict[str, Shape] = {}
    try:
        for size, rows in (("small", options.small), ("large", options.large)):
            print(f"== building {size}: {rows:,} step rows", flush=True)
            shape_ = build(database(size), rows, options.active)
            shapes[size] = shape_
            print(
                f"   {shape_.instances:,} instances, {shape_.executions:,} executions, "
                f"{shape_.steps:,} steps ({len(shape_.active)} active, {len(shape_.stale)} "
                f"unresolved) in {shape_.seconds:.0f} s; {shape_.bytes / 2**30:.2f} GiB",
                flush=True,
            )
        needed = options.rounds + 2  # a warm-up and a plan each
        for size, shape_ in shapes.items():
            if len(shape_.active) < needed:
                raise SystemExit(f"{size}: {len(shape_.active)} chunk targets, need {needed}")
        bench = Bench(token, shapes, options.n, options.seed)
        # Warm-up: imports, caches, connections; a fifth of a measurement each.
        n, bench.n = bench.n, max(10, options.n // 5)
        for op in OPS:
            bench.measure(op, 0, options.block)
        bench.n = n
        for run in range(1, options.rounds + 1):
            print(f"== round {run}/{options.rounds}", flush=True)
            for op in OPS:
                for s in bench.measure(op, run, options.block):
                    print(f"   {s.size:<5} {op:<11} {s.rate:>8,.0f} ops/s   {s.check}", flush=True)
        table, missed = report(bench, options.rounds)
        for op in OPS if options.explain else missed:
            for size in SIZES:
                bench.explain(size, op)
        failed = [s for s in bench.samples if not s.check.startswith("ok")]
        # Post-run check: the history is what was built (only the targets moved).
        for size, shape_ in shapes.items():
            with layers.admin(database(size)) as connection:
                row = connection.execute(
                    "SELECT (SELECT count(*) FROM ob_step_execution), "
                    "(SELECT count(*) FROM ob_job_execution), "
                    "(SELECT count(*) FROM ob_step_execution WHERE status = 'STARTED')"
                ).fetchone()
            expected = (shape_.steps, shape_.executions, len(shape_.active) + len(shape_.stale))
            if row is None or tuple(row) != expected:
                failed.append(Sample(size, "rows", 0, 0, 0.0, check=f"FAILED: {row} != {expected}"))
        print(
            f"\n== correctness: {len(bench.samples) - len(failed)}/{len(bench.samples)} "
            "measurements verified"
            + "".join(f"\n   {s.size} {s.op} run {s.run}: {s.check}" for s in failed)
        )
    finally:
        close_all()
        if not options.keep:
            with layers.admin() as connection:
                for name in names:
                    connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    result = {
        "machine": info,
        "sizes": {
            size: {
                "steps": s.steps,
                "executions": s.executions,
                "instances": s.instances,
                "active": len(s.active),
                "unresolved": len(s.stale),
                "build_seconds": round(s.seconds, 1),
                "database_bytes": s.bytes,
            }
            for size, s in shapes.items()
        },
        "rounds": options.rounds,
        "n": options.n,
        "table": table,
        "failed": len(failed),
        "seconds": round(time.perf_counter() - started, 1),
        "load_after": [round(value, 2) for value in os.getloadavg()],
    }
    print(
        f"\n== {result['seconds']:.0f} s in all; load average after: "
        + " ".join(f"{value:.2f}" for value in result["load_after"])
    )
    if options.json:
        options.json.write_text(json.dumps(result, indent=2))
    if failed or missed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
