"""A real job with the local runtime: import a CSV file into a Django model,
each chunk's rows committed in one transaction with the chunk — exactly once.

    DJANGO_SETTINGS_MODULE=project.settings .venv/bin/python examples/local_import.py

It runs inside the Django project that has oxide_batch installed (here the
standalone service's settings, on its ``DATABASE_URL``), as a management command
or a Celery task would. One step, ``load``: read ``--chunk-size`` rows from the
checkpoint's offset, insert them with the ORM (plain inserts: no key to make a
second write replace the first, none needed), and commit the chunk with the new
offset — rows, counts and checkpoint in one transaction. A crash, a refusal or
an exception leaves none of the chunk's rows; the restart resumes at the
offset. ``--fail-at N`` raises at row N (after writing the rows before it in
its chunk), to see them rolled back. ``--user``: a ``batch-runtime`` user to
run as (default: none). Exit status: 0 COMPLETED, 1 FAILED, 2 STOPPED,
3 fenced, 4 refused (already running / completed).

The model (``Person``) stands for one of your app's models; its table is made
here when missing so the example runs on its own.
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import sys
from pathlib import Path
from typing import Any

import django

JOB = "local_import"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=Path(__file__).with_name("people.csv"))
    parser.add_argument("--business-date", default="2026-07-29")
    parser.add_argument("--chunk-size", type=int, default=100)
    parser.add_argument("--user", help="the batch-runtime user to run as (default: none)")
    parser.add_argument("--fail-at", type=int, help="raise at this row number")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    django.setup()
    from django.db import connection, models

    from oxide_batch.client import ExecutionFenced, StepRun
    from oxide_batch.domain.errors import CompletedInstance, ExecutionAlreadyActive
    from oxide_batch.local import LocalRuntime

    class Person(models.Model):
        """One of your app's models (here with a label of its own)."""

        row_number = models.IntegerField()
        name = models.CharField(max_length=100)
        city = models.CharField(max_length=100)

        objects: Any = models.Manager()

        class Meta:
            app_label = "examples_people"
            db_table = "examples_person"

        def __str__(self) -> str:
            return f"{self.name} ({self.city})"

    if Person._meta.db_table not in connection.introspection.table_names():
        with connection.schema_editor() as editor:
            editor.create_model(Person)

    with options.input.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))[1:]  # after the header

    runtime = LocalRuntime(user=options.user)
    run = runtime.job_run(
        JOB,
        {"business_date": options.business_date, "input": options.input.name},
        poll_interval=10.0,
    )
    offset = 0

    def load(step: StepRun) -> None:
        nonlocal offset
        offset = int(step.checkpoint.get("offset", 0)) if step.checkpoint else 0
        print(f"execution {run.execution.id}: starting at offset {offset}", flush=True)
        while offset < len(rows):
            end = min(offset + options.chunk_size, len(rows))
            for number in range(offset, end):
                if number == options.fail_at:
                    raise ValueError(f"row {number} is bad")
                name, city = rows[number]
                Person.objects.create(row_number=number, name=name, city=city)
            step.commit(
                read=end - offset,
                written=end - offset,
                checkpoint={"offset": end},
                last=end == len(rows),
            )
            offset = end

    try:
        with run:
            run.run_step("load", load)  # skipped on a restart once it COMPLETED
    except ExecutionFenced as fenced:
        print(f"fenced: {fenced}", file=sys.stderr)
        return 3
    except (ExecutionAlreadyActive, CompletedInstance) as refused:
        print(f"refused: {refused}", file=sys.stderr)
        return 4
    except Exception as failed:
        print(f"failed: {failed}", file=sys.stderr)
        return 1  # the execution is FAILED; the log has the failure id and the text
    status = run.execution.status.value
    print(f"execution {run.execution.id}: {status} at offset {offset}", flush=True)
    return {"COMPLETED": 0, "STOPPED": 2}.get(status, 1)


if __name__ == "__main__":
    sys.exit(main())
