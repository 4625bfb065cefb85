"""Each derived fact of an execution (``oxide_batch/facts.py``) has one value
whichever form computes it: the ORM expression the selectors and the
repository's ORM reads annotate, the SQL fragment the repository's explicit
statements embed, and the Python form the domain's values and the pages use —
on the same rows, on both databases, edge cases included: no steps, several
steps written at the same instant, a step never written, an execution row
without its own activity (a NULL heartbeat, written outside the adapter)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils.dateparse import parse_datetime

from oxide_batch import models
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.facts import (
    last_activity_of,
    newest_step_write,
    newest_step_write_sql,
    owner_recorded,
    owner_recorded_of,
    silent_since,
    silent_since_of,
)
from oxide_batch.repository import DjangoJobRepository
from tests.helpers import key, launch

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 7, 29, 12, 0, 0, 250_000, tzinfo=UTC)
SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class Case:
    """An execution's own columns and its steps' ``last_activity_at``."""

    name: str
    last_activity_at: datetime | None
    updated_at: datetime
    steps: tuple[datetime | None, ...] = ()
    owner_token: bytes | None = None


CASES = (
    Case("no steps", T0, T0 - SECOND),
    Case("no steps, no own activity (NULL heartbeat)", None, T0 - 5 * SECOND),
    Case("steps written at the same instant", T0, T0, (T0 + SECOND, T0 + SECOND)),
    Case("a step never written and an older one", T0, T0, (None, T0 - 3 * SECOND)),
    Case("no step ever written", T0, T0, (None, None)),
    Case("owner recorded, a newer step", T0, T0, (T0 + 2 * SECOND,), b"\x01" * 16),
    Case("NULL heartbeat, a newer step", None, T0 - SECOND, (T0 + 4 * SECOND,)),
    Case("NULL heartbeat, an older step", None, T0, (T0 - SECOND,)),
    Case("own activity equal to the step write", T0, T0, (T0,)),
)


def build(repo: DjangoJobRepository) -> dict[int, Case]:
    """One execution per case, its columns then written as the case says (as
    a row written outside the adapter could be)."""
    built = {}
    for n, case in enumerate(CASES):
        execution = launch(repo, key(run=f"facts-{n}"))
        with repo.begin() as uow:
            for i in range(len(case.steps)):
                step = uow.create_step_execution(execution.id, f"step-{i}")
                uow.transition_step_execution(step.id, 0, LifecycleTransition(BatchStatus.STARTED))
            uow.commit()
        models.JobExecution.objects.filter(pk=execution.id).update(
            last_activity_at=case.last_activity_at,
            updated_at=case.updated_at,
            owner_token=case.owner_token,
        )
        step_ids = models.StepExecution.objects.filter(job_execution_id=execution.id).order_by("id")
        for pk, written in zip(step_ids.values_list("pk", flat=True), case.steps, strict=True):
            models.StepExecution.objects.filter(pk=pk).update(last_activity_at=written)
        built[execution.id] = case
    return built


def instant(value: Any) -> datetime | None:
    """A raw cursor's timestamp as an aware instant (SQLite's is naive UTC)."""
    if value is None:
        return None
    parsed = value if isinstance(value, datetime) else parse_datetime(value)
    assert parsed is not None, value
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def expected_newest(case: Case) -> datetime | None:
    written = [moment for moment in case.steps if moment is not None]
    return max(written) if written else None


def test_the_newest_step_write_is_one_value_in_the_orm_the_sql_and_python(repo):
    built = build(repo)
    orm = dict(
        models.JobExecution.objects.annotate(newest=newest_step_write()).values_list("pk", "newest")
    )
    quote = connection.ops.quote_name
    fragment = newest_step_write_sql(connection, f"e.{quote('id')}")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT e.{quote('id')}, {fragment} FROM {quote('ob_job_execution')} e")  # nosec B608
        explicit = {pk: instant(value) for pk, value in cursor.fetchall()}
    for pk, case in built.items():
        assert orm[pk] == explicit[pk] == expected_newest(case), case.name


def test_owner_recorded_is_one_value_in_the_orm_and_python(repo):
    built = build(repo)
    rows = models.JobExecution.objects.annotate(flag=owner_recorded()).values(
        "pk", "flag", "owner_token"
    )
    for row in rows:
        case = built[row["pk"]]
        assert bool(row["flag"]) is owner_recorded_of(row) is (case.owner_token is not None)


def test_last_activity_and_inactivity_agree_in_the_orm_and_python(repo):
    """``silent_since(cutoff)`` — the predicate the unresolved lists filter on —
    holds for exactly the rows whose Python last activity is before the
    cutoff, at every instant of the data and a microsecond either side (the
    cutoff is exclusive for the activity, inclusive for a step write)."""
    built = build(repo)
    rows = models.JobExecution.objects.annotate(newest=newest_step_write()).values(
        "pk", "last_activity_at", "updated_at", "newest"
    )
    activity = {
        row["pk"]: last_activity_of(row["last_activity_at"], row["updated_at"], row["newest"])
        for row in rows
    }
    for pk, case in built.items():
        own = case.updated_at if case.last_activity_at is None else case.last_activity_at
        newest = expected_newest(case)
        assert activity[pk] == (own if newest is None else max(own, newest)), case.name
    moments = {m for case in CASES for m in (case.last_activity_at, case.updated_at, *case.steps)}
    tick = timedelta(microseconds=1)
    cutoffs = sorted({c + d for c in moments if c is not None for d in (-tick, 0 * tick, tick)})
    for cutoff in cutoffs:
        silent = set(
            models.JobExecution.objects.filter(silent_since(cutoff)).values_list("pk", flat=True)
        )
        expected = {pk for pk in built if silent_since_of(activity[pk], cutoff)}
        assert silent == expected, cutoff
