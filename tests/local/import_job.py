"""The exactly-once harness's job, in a process of its own (Django set up from
the environment: ``DJANGO_SETTINGS_MODULE``, ``DATABASE_URL``)::

    python -m tests.local.import_job --records 400 --chunk 8 --run r1 --user importer
    python -m tests.local.import_job ... --url http://127.0.0.1:8000 --token …
    python -m tests.local.import_job --fork ...   # a run per line read ("run")

imports records ``0 … records-1`` into ``local_records_record`` (one ORM insert
each, a short pause between them), committing a chunk with its checkpoint every
``--chunk`` records: with ``LocalRuntime`` (no ``--url``) each chunk is one
transaction with its rows; with the HTTP client (``--url``) the rows are
written in autocommit and the chunk is committed by a request after them — the
at-least-once case. It prints ``started <offset>`` once its step has started
(the harness kills it at random moments after that line) and ``done`` at the end.

``--fork``: Django is set up once (no connection opened) and each line read
from stdin forks a process that runs the job — a real process of its own,
killed with SIGKILL, without paying Python's and Django's start-up each time.
Each run's process prints ``started <offset> <pid>``; ``exit <status>`` follows
once it ended.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import django


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--chunk", type=int, required=True)
    parser.add_argument("--run", required=True, help="the job instance's identifying parameter")
    parser.add_argument("--pause", type=float, default=0.001, help="seconds between two records")
    parser.add_argument("--user", help="the local runtime's user (default: none)")
    parser.add_argument("--url", help="the API's base URL: the HTTP client instead")
    parser.add_argument("--token")
    parser.add_argument("--fork", action="store_true", help="a forked run per line read")
    options = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    django.setup()
    if not options.fork:
        return job(options)
    # Imported once, before the forks (none of them connects to the database).
    from django.urls import reverse

    import oxide_batch.local  # noqa: F401
    import tests.local.records  # noqa: F401

    reverse("oxide_batch:api:descriptor")  # the URLconf, its views and serializers

    for _ in sys.stdin:
        sys.stdout.flush()
        child = os.fork()
        if child == 0:
            try:
                code = job(options)
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(child, 0)
        print(f"exit {os.waitstatus_to_exitcode(status)}", flush=True)
    return 0


def job(options: argparse.Namespace) -> int:
    """One run of the job, to its end."""
    from oxide_batch.client import RuntimeClient, StepRun
    from oxide_batch.local import LocalRuntime
    from tests.local.records import Record

    client: RuntimeClient
    if options.url:
        client = RuntimeClient(options.url, options.token or "", timeout=10)
    else:
        client = LocalRuntime(user=options.user)
    pid = os.getpid()

    def load(step: StepRun) -> None:
        offset = int((step.checkpoint or {}).get("offset", 0))
        print(f"started {offset} {pid}", flush=True)
        while offset < options.records:
            size = min(options.chunk, options.records - offset)
            for key in range(offset, offset + size):
                Record.objects.create(key=key, pid=pid)
                time.sleep(options.pause)
            offset += size
            step.commit(
                read=size,
                written=size,
                checkpoint={"offset": offset},
                last=offset >= options.records,
            )

    with client.job_run("exactly_once", {"run": options.run}, poll_interval=1.0) as run:
        run.run_step("load", load)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
