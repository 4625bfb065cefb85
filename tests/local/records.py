"""The table the local runtime's test jobs write to: one row per record, and
deliberately no unique constraint (a duplicate must show). A test-only model
with an explicit app label, outside ``INSTALLED_APPS`` and outside the app's
migrations: the tests create and drop its table themselves (:func:`table`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

from django.db import connection, models


class Record(models.Model):
    """A record the job imported: its key, and the process that wrote it."""

    key = models.IntegerField()
    pid = models.IntegerField(default=0)

    # Declared: the app is not installed, so the type checker's plugin adds none.
    objects: ClassVar[models.Manager[Record]] = models.Manager()

    class Meta:
        app_label = "local_records"
        db_table = "local_records_record"

    def __str__(self) -> str:
        return f"record {self.key}"


@contextmanager
def table() -> Iterator[type[Record]]:
    """The records' table, created for the block and dropped after it."""
    with connection.schema_editor() as editor:
        editor.create_model(Record)
    try:
        yield Record
    finally:
        with connection.schema_editor() as editor:
            editor.delete_model(Record)


def duplicates() -> dict[int, int]:
    """Keys written more than once: key → how many times."""
    counted = (
        Record.objects.values("key")
        .annotate(times=models.Count("id"))
        .filter(times__gt=1)
        .values_list("key", "times")
    )
    return dict(counted)
