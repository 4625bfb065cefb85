"""A remote chunk-oriented step that retries transient errors and skips bad rows.

    .venv/bin/python examples/skipping_import.py               # against scripts/run
    .venv/bin/python examples/skipping_import.py --replay 42   # execution 42's skipped rows again

One step, ``load`` (``run.run_chunk_step``): read ``--chunk-size`` rows of
``--input`` at a time from the checkpoint's offset, check each (a row without
a name or city is a ``BadRow``; a row whose city is ``-`` is filtered), and
write the good ones to the ``people`` table of ``--output`` (keyed by row
number: a chunk written again replaces itself). A row the CSV reader cannot
split into two fields is reported as a read failure. Bad rows are skipped, at
most ``--skip-limit`` per step execution, each recorded in the skip ledger with
the chunk's commit; a write that times out (``--flaky-every K``: the first
write of every K-th chunk does) is retried. The step ends with exit code
``COMPLETED_WITH_SKIPS`` when it skipped anything; one skip over the limit
fails it. At the end it lists the execution's skipped rows from the ledger.

``--replay ID`` reprocesses the rows execution ``ID`` skipped (read back with
``client.skips(execution_id=ID)``), from ``--input`` as it is now (fixed), in a
run of its own (job ``skipping_import_replay``, parameter ``replay_of``).
Exit status: 0 COMPLETED, 1 FAILED, 2 STOPPED, 3 fenced, 4 refused.
"""

from __future__ import annotations

import argparse
import csv
import logging
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from local_server import add_server_arguments

from oxide_batch.client import (
    ExecutionFenced,
    ReadFailure,
    RetryPolicy,
    RuntimeClient,
    SkipPolicy,
)
from oxide_batch.domain.errors import CompletedInstance, ExecutionAlreadyActive

JOB = "skipping_import"
REPLAY_JOB = "skipping_import_replay"

Row = tuple[int, list[str]]


class BadRow(ValueError):
    """A row that is not a person."""


def numbered_rows(source: Path) -> Iterator[Row]:
    """Every row of ``source`` after its header, with its number (0, 1, …)."""
    with source.open(newline="", encoding="utf-8") as handle:
        rows = csv.reader(handle)
        next(rows)  # the header
        yield from enumerate(rows)


def read_failure_or_row(number: int, fields: list[str]) -> Row | ReadFailure:
    if len(fields) != 2:
        return ReadFailure(BadRow(f"row {number} has {len(fields)} fields"), key=f"row-{number}")
    return number, fields


def check(row: Row) -> Row | None:
    """The processor: a good row as it is, ``None`` (filtered) for a row
    without a city, ``BadRow`` for a row without a name."""
    number, (name, city) = row
    if not name.strip():
        raise BadRow(f"row {number} has no name")
    return None if city.strip() == "-" else row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_arguments(parser)
    parser.add_argument("--input", type=Path, default=Path(__file__).with_name("people.csv"))
    parser.add_argument("--output", type=Path, default=Path("people.sqlite3"))
    parser.add_argument("--business-date", default="2026-07-29")
    parser.add_argument("--chunk-size", type=int, default=100)
    parser.add_argument("--skip-limit", type=int, default=10)
    parser.add_argument("--flaky-every", type=int, default=0, help="a timeout every K chunks")
    parser.add_argument("--replay", type=int, metavar="EXECUTION_ID")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    database = sqlite3.connect(options.output)
    database.execute(
        "CREATE TABLE IF NOT EXISTS people (row_number INTEGER PRIMARY KEY, name TEXT, city TEXT)"
    )
    client = RuntimeClient(options.url, options.token)
    writes = 0

    def write(rows: list[Row]) -> None:
        nonlocal writes
        writes += 1
        if options.flaky_every and writes % options.flaky_every == 0:
            raise TimeoutError("the output timed out")  # the next attempt succeeds
        with database:  # one SQLite transaction per write
            database.executemany(
                "INSERT OR REPLACE INTO people (row_number, name, city) VALUES (?, ?, ?)",
                [(number, fields[0], fields[1]) for number, fields in rows],
            )

    if options.replay is None:
        job, parameters = JOB, {"business_date": options.business_date}
        everything = [read_failure_or_row(n, fields) for n, fields in numbered_rows(options.input)]
    else:
        # The replay recipe: the ledger's keys of the earlier run, read again.
        wanted = {skip.item for skip in client.skips(execution_id=options.replay)}
        job, parameters = REPLAY_JOB, {"replay_of": options.replay}
        everything = [
            read_failure_or_row(n, fields)
            for n, fields in numbered_rows(options.input)
            if f"row-{n}" in wanted
        ]

    def reader(offset: int) -> list[Any]:
        return everything[offset:]  # resumes at the checkpoint's offset

    run = client.job_run(job, {**parameters, "input": options.input.name})
    try:
        with run:
            step = run.run_chunk_step(
                "load",
                reader=reader,
                processor=check,
                writer=write,
                chunk_size=options.chunk_size,
                key=lambda row: f"row-{row[0]}",
                retry=RetryPolicy(exceptions=(TimeoutError,), max_attempts=3, backoff=0.05),
                skip=SkipPolicy(exceptions=(BadRow,), limit=options.skip_limit),
            )
    except ExecutionFenced as fenced:
        print(f"fenced: {fenced}", file=sys.stderr)
        return 3
    except (ExecutionAlreadyActive, CompletedInstance) as refused:
        print(f"refused: {refused}", file=sys.stderr)
        return 4
    except Exception:
        return 1  # the execution is FAILED; the log has the failure id and the text
    execution = run.execution
    for skip in client.skips(execution_id=execution.id):
        print(f"skipped {skip.item} ({skip.phase}): {skip.detail and skip.detail.message}")
    if not step.skipped:
        counts = step.step.counts
        print(
            f"step load: {step.step.exit_code}, read {counts.read}, written {counts.written}, "
            f"filtered {counts.filtered}, skipped {step.step.skip_counts.total}",
            flush=True,
        )
    print(f"execution {execution.id}: {execution.status.value}", flush=True)
    return {"COMPLETED": 0, "STOPPED": 2}.get(execution.status.value, 1)


if __name__ == "__main__":
    sys.exit(main())
