"""Remote partitions: a manager on one host, workers on any host (two-host recipe).

    # host A: plan one partition per city, wait for the workers, aggregate
    .venv/bin/python examples/remote_partitions.py manager --input people.csv
    # hosts B, C, …: as many workers as you like, started in any order
    .venv/bin/python examples/remote_partitions.py worker --input people.csv --output people.sqlite3

The manager runs the job ``remote_import``: its step ``load`` plans one
partition per city and waits (one read per ``--interval``) until every
partition is done, then aggregates. Each worker finds the job's running
execution (or takes ``--execution ID``), claims a city, imports its rows in
chunks keyed by row number (a chunk written again replaces itself) and commits
the city offset as its checkpoint; then it claims the next city. A worker that
dies leaves its city to another worker once its lease expires (the watchdog,
``manage.py batch_watchdog``, fails its worker step): that worker resumes at
the dead one's checkpoint. Every host needs the input file and the output
database (here a SQLite file: one host; use your own store across hosts).

Exit status: manager as csv_import.py (0 COMPLETED, 1 FAILED, 2 STOPPED,
3 fenced, 4 refused); worker 0 when the step is finished, 2 when it is
stopping, 3 when fenced.
"""

from __future__ import annotations

import argparse
import csv
import logging
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from local_server import add_server_arguments

from oxide_batch.client import ExecutionFenced, Partition, RuntimeClient, StepRun
from oxide_batch.domain.errors import CompletedInstance, ExecutionAlreadyActive

JOB = "remote_import"
STEP = "load"
SCHEMA = "CREATE TABLE IF NOT EXISTS people (row_number INTEGER PRIMARY KEY, name TEXT, city TEXT)"


def cities(source: Path) -> list[str]:
    with source.open(newline="", encoding="utf-8") as handle:
        return sorted({row["city"] for row in csv.DictReader(handle)})


@dataclass(frozen=True)
class CityWorker:
    """One partition's work: the city's rows from the checkpoint's offset."""

    source: Path
    output: Path
    chunk_size: int
    pause: float

    def __call__(self, step: StepRun, partition: Partition) -> None:
        offset = int(step.checkpoint.get("offset", 0)) if step.checkpoint else 0
        print(f"partition {partition.key}: starting at offset {offset}", flush=True)
        with self.source.open(newline="", encoding="utf-8") as handle:
            rows = [
                (number, row["name"], row["city"])
                for number, row in enumerate(csv.DictReader(handle))
                if row["city"] == partition.key
            ]
        database = sqlite3.connect(self.output, timeout=30)
        try:
            for start in range(offset, len(rows), self.chunk_size):
                chunk = rows[start : start + self.chunk_size]
                with database:
                    database.executemany(
                        "INSERT OR REPLACE INTO people (row_number, name, city) VALUES (?, ?, ?)",
                        chunk,
                    )
                time.sleep(self.pause)
                step.commit(
                    read=len(chunk), written=len(chunk), checkpoint={"offset": start + len(chunk)}
                )
        finally:
            database.close()


def manager(client: RuntimeClient, options: argparse.Namespace) -> int:
    run = client.job_run(JOB, {"business_date": options.business_date}, poll_interval=2.0)
    try:
        with run:
            print(f"execution {run.execution.id} attempt {run.execution.attempt}", flush=True)
            parent = run.remote_partitioned_step(
                STEP, cities(options.input), interval=options.interval
            )
            print(f"step {parent.id}: {parent.status.value}, read {parent.counts.read}", flush=True)
    except ExecutionFenced as fenced:
        print(f"fenced: {fenced}", file=sys.stderr)
        return 3
    except (ExecutionAlreadyActive, CompletedInstance) as refused:
        print(f"refused: {refused}", file=sys.stderr)
        return 4
    except Exception:
        return 1  # the execution is FAILED; the log has the failure id and the text
    status = run.execution.status.value
    print(f"execution {run.execution.id}: {status}", flush=True)
    return {"COMPLETED": 0, "STOPPED": 2}.get(status, 1)


def running_execution(client: RuntimeClient, wait: float) -> int:
    """The job's running execution, waited for (its manager may start later)."""
    deadline = time.monotonic() + wait
    while True:
        found = next(client.executions(job_name=JOB, status="STARTED"), None)
        if found is not None:
            return found.id
        if time.monotonic() >= deadline:
            raise SystemExit(f"no running execution of {JOB} after {wait:g} s")
        time.sleep(0.5)


def worker(client: RuntimeClient, options: argparse.Namespace) -> int:
    with sqlite3.connect(options.output) as database:
        database.execute(SCHEMA)
    execution = options.execution or running_execution(client, options.wait)
    work = CityWorker(options.input, options.output, options.chunk_size, options.pause)
    report = client.partition_worker(execution, work, step_name=STEP, interval=options.interval)
    print(
        f"worker done ({report.reason}): completed {report.completed}, "
        f"stopped {report.stopped}, failed {report.failed}",
        flush=True,
    )
    return {"finished": 0, "stopping": 2, "fenced": 3}.get(report.reason, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["manager", "worker"])
    add_server_arguments(parser)
    parser.add_argument("--input", type=Path, default=Path(__file__).with_name("people.csv"))
    parser.add_argument("--output", type=Path, default=Path("people-remote.sqlite3"))
    parser.add_argument("--business-date", default="2026-07-29")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between waits")
    parser.add_argument("--execution", type=int, help="worker: the execution to work for")
    parser.add_argument("--wait", type=float, default=60.0, help="worker: seconds to find it")
    parser.add_argument("--chunk-size", type=int, default=10)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds in each chunk")
    parser.add_argument("--name", help="this worker's name, shown beside its steps")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    client = RuntimeClient(options.url, options.token, worker_name=options.name)
    return manager(client, options) if options.role == "manager" else worker(client, options)


if __name__ == "__main__":
    sys.exit(main())
