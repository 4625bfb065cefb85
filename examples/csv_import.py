"""A real job: import a CSV file into SQLite, restartable from its checkpoint.

    .venv/bin/python examples/csv_import.py       # against scripts/run (its runtime token)

One step, ``load``: read ``--chunk-size`` rows at a time from the checkpoint's
offset, write them to the ``people`` table of ``--output`` (keyed by row number,
so a chunk written again after a crash replaces itself: every record exactly
once), then commit the chunk with the new offset. A restart (the previous
attempt STOPPED, or FAILED by an operator's recovery) resumes at that offset.
Exit status: 0 COMPLETED, 1 FAILED, 2 STOPPED, 3 fenced, 4 refused (already
running / completed).
"""

from __future__ import annotations

import argparse
import csv
import logging
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from local_server import add_server_arguments

from oxide_batch.client import ExecutionFenced, RuntimeClient, StepRun
from oxide_batch.domain.errors import CompletedInstance, ExecutionAlreadyActive

JOB = "csv_import"


T = TypeVar("T")


def read_chunks(source: Path, start: int, size: int) -> Iterator[list[tuple[int, list[str]]]]:
    """Rows ``start``… of ``source`` (after its header) as (row number, fields)."""
    with source.open(newline="", encoding="utf-8") as handle:
        rows = csv.reader(handle)
        next(rows)  # the header
        chunk: list[tuple[int, list[str]]] = []
        for number, row in enumerate(rows):
            if number < start:
                continue
            chunk.append((number, row))
            if len(chunk) == size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


def with_last(chunks: Iterator[T]) -> Iterator[tuple[T, bool]]:
    """Each chunk with whether it is the last one (a one-chunk lookahead): the
    last chunk's commit ends the step, so a run is K + 3 requests."""
    following = next(chunks, None)
    while following is not None:
        current, following = following, next(chunks, None)
        yield current, following is None


def write(database: sqlite3.Connection, chunk: list[tuple[int, list[str]]]) -> None:
    with database:  # one SQLite transaction per chunk
        database.executemany(
            "INSERT OR REPLACE INTO people (row_number, name, city) VALUES (?, ?, ?)",
            [(number, row[0], row[1]) for number, row in chunk],
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_arguments(parser)
    parser.add_argument("--input", type=Path, default=Path(__file__).with_name("people.csv"))
    parser.add_argument("--output", type=Path, default=Path("people.sqlite3"))
    parser.add_argument("--business-date", default="2026-07-29")
    parser.add_argument("--chunk-size", type=int, default=100)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds after each chunk")
    parser.add_argument(
        "--chunk-seconds", type=float, default=0.0, help="seconds a chunk's work takes"
    )
    parser.add_argument("--poll-interval", type=float, default=10.0)
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    database = sqlite3.connect(options.output)
    database.execute(
        "CREATE TABLE IF NOT EXISTS people (row_number INTEGER PRIMARY KEY, name TEXT, city TEXT)"
    )
    client = RuntimeClient(options.url, options.token)
    run = client.job_run(
        JOB,
        {"business_date": options.business_date, "input": options.input.name},
        poll_interval=options.poll_interval,
    )
    offset = 0

    def load(step: StepRun) -> None:
        nonlocal offset
        offset = int(step.checkpoint.get("offset", 0)) if step.checkpoint else 0
        print(
            f"execution {run.execution.id} attempt {run.execution.attempt}: "
            f"starting at offset {offset}",
            flush=True,
        )
        chunks = read_chunks(options.input, start=offset, size=options.chunk_size)
        for chunk, last in with_last(chunks):
            time.sleep(options.chunk_seconds)  # the chunk's work (its lease is kept alive)
            write(database, chunk)
            offset = chunk[-1][0] + 1
            step.commit(
                read=len(chunk), written=len(chunk), checkpoint={"offset": offset}, last=last
            )
            time.sleep(options.pause)

    try:
        with run:
            run.run_step("load", load)  # skipped on a restart once it COMPLETED
    except ExecutionFenced as fenced:
        print(f"fenced: {fenced}", file=sys.stderr)
        return 3
    except (ExecutionAlreadyActive, CompletedInstance) as refused:
        print(f"refused: {refused}", file=sys.stderr)
        return 4
    except Exception:
        return 1  # the execution is FAILED; the log has the failure id and the text
    status = run.execution.status.value
    print(f"execution {run.execution.id}: {status} at offset {offset}", flush=True)
    return {"COMPLETED": 0, "STOPPED": 2}.get(status, 1)


if __name__ == "__main__":
    sys.exit(main())
