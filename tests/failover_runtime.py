"""A runtime for the failover test, run as its own process (no Django):

    python -m tests.failover_runtime URL TOKEN RUNTIME JOBS CHUNKS SIZE LEDGER

It runs ``JOBS`` jobs of one step, each step ``CHUNKS`` chunks of ``SIZE``
records, with the high-level client (``job_run``, ``run.step``, ``commit``),
and appends a JSON line to ``LEDGER`` for every write the repository
acknowledged: each chunk (its step, the version the answer carried, the records
it processed) and each job's end — the checker compares them with what the new
primary stores. Nothing here knows about the failover: the client's retries
carry the runtime through it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from oxide_batch.client import RuntimeClient

JOB_NAME = "failover_job"


def main(arguments: list[str]) -> int:
    url, token, runtime, jobs, chunks, size, ledger_path = arguments
    client = RuntimeClient(url, token, timeout=10)
    with Path(ledger_path).open("a", buffering=1) as ledger:

        def note(**entry: object) -> None:
            ledger.write(json.dumps({"at": time.time(), "runtime": runtime, **entry}) + "\n")

        for job in range(int(jobs)):
            parameters = {"runtime": runtime, "job": str(job)}
            run = client.job_run(JOB_NAME, parameters, poll_interval=2.0)
            with run, run.step("load") as step:
                offset = 0
                for _ in range(int(chunks)):
                    records = list(range(offset, offset + int(size)))
                    committed = step.commit(
                        read=len(records),
                        processed=len(records),
                        written=len(records),
                        checkpoint={"offset": offset + len(records)},
                    )
                    note(
                        kind="chunk",
                        execution=run.execution.id,
                        step=committed.id,
                        version=committed.version,
                        first=records[0],
                        last=records[-1],
                    )
                    offset += len(records)
            note(kind="job", execution=run.execution.id, status=run.execution.status.value)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
