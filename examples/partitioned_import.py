"""A partitioned job: import a CSV file into SQLite, one partition per city.

    .venv/bin/python examples/partitioned_import.py [--processes]   # against scripts/run

The step ``load`` plans one partition per city; each worker (a thread, or a
process with ``--processes``) imports its city's rows in chunks, keyed by row
number (a chunk written again replaces itself), committing the city offset as
its checkpoint. A restart carries the plan: COMPLETED cities are not run again,
the others resume at their worker's checkpoint. Exit status as csv_import.py.
"""

from __future__ import annotations

import argparse
import csv
import logging
import sqlite3
import sys
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from local_server import add_server_arguments

from oxide_batch.client import ExecutionFenced, Partition, RuntimeClient, StepRun
from oxide_batch.domain.errors import CompletedInstance, ExecutionAlreadyActive

JOB = "partitioned_import"
SCHEMA = "CREATE TABLE IF NOT EXISTS people (row_number INTEGER PRIMARY KEY, name TEXT, city TEXT)"


def cities(source: Path) -> list[str]:
    with source.open(newline="", encoding="utf-8") as handle:
        return sorted({row["city"] for row in csv.DictReader(handle)})


@dataclass(frozen=True)
class CityWorker:
    """One partition's work (picklable, for a process pool)."""

    source: Path
    output: Path
    chunk_size: int
    pause: float

    def __call__(self, step: StepRun, partition: Partition) -> None:
        offset = int(step.checkpoint.get("offset", 0)) if step.checkpoint else 0
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
                step.commit(
                    read=len(chunk),
                    written=len(chunk),
                    checkpoint={"offset": start + len(chunk)},
                )
                time.sleep(self.pause)
        finally:
            database.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_arguments(parser)
    parser.add_argument("--input", type=Path, default=Path(__file__).with_name("people.csv"))
    parser.add_argument("--output", type=Path, default=Path("people-by-city.sqlite3"))
    parser.add_argument("--business-date", default="2026-07-29")
    parser.add_argument("--chunk-size", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--processes", action="store_true", help="workers in processes")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds after each chunk")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    with sqlite3.connect(options.output) as database:
        database.execute(SCHEMA)
    worker = CityWorker(options.input, options.output, options.chunk_size, options.pause)
    executor: Executor = (
        ProcessPoolExecutor(options.workers)
        if options.processes
        else ThreadPoolExecutor(options.workers)
    )
    client = RuntimeClient(options.url, options.token)
    run = client.job_run(JOB, {"business_date": options.business_date})
    try:
        with executor, run:
            print(f"execution {run.execution.id} attempt {run.execution.attempt}", flush=True)
            run.partitioned_step("load", cities(options.input), worker, executor=executor)
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


if __name__ == "__main__":
    sys.exit(main())
