"""The job names present in a table, for the console's job-name filter, without
a ``DISTINCT`` or a ``COUNT`` over the table.

A loose index scan ("skip scan", PostgreSQL wiki "Loose indexscan"): a recursive
query asks the index led by ``job_name`` for the first name after the previous
one, once per distinct name. It reads about one index entry per name (one
B-tree descent each), however many rows each name has — at 10^6 executions of
20 jobs, 21 descents instead of a scan of 10^6 entries. Neither database plans
``SELECT DISTINCT`` this way by itself (PostgreSQL scans the whole table or
index, docs/console.md), so the query is spelled out here, for both.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connections, models, router

JOB_NAMES_MAX = 500

# The scalar subquery form works on both databases (SQLite does not allow a
# parenthesised first member of a compound select). ``n`` bounds the walk: at
# most ``limit + 1`` names, the last one only saying that there are more.
WALK = """
WITH RECURSIVE walk (job_name, n) AS (
    SELECT (SELECT {column} FROM {table} ORDER BY {column} LIMIT 1), 1
    UNION ALL
    SELECT (SELECT {column} FROM {table} WHERE {column} > walk.job_name
            ORDER BY {column} LIMIT 1),
           walk.n + 1
    FROM walk
    WHERE walk.job_name IS NOT NULL AND walk.n <= %s
)
SELECT job_name FROM walk WHERE job_name IS NOT NULL
"""


@dataclass(frozen=True, slots=True)
class JobNames:
    """At most ``limit`` names in index order (the database's collation);
    ``truncated`` when the table holds more."""

    names: tuple[str, ...]
    truncated: bool


def led_by_job_name(model: type[models.Model]) -> bool:
    """Whether a (whole-table) index or unique constraint of ``model`` starts
    with ``job_name``."""
    meta = model._meta
    fields = [index.fields for index in meta.indexes if index.condition is None]
    fields += [
        constraint.fields
        for constraint in meta.constraints
        if isinstance(constraint, models.UniqueConstraint) and constraint.condition is None
    ]
    return any(names and names[0].lstrip("-") == "job_name" for names in fields)


def job_names(model: type[models.Model], *, limit: int = JOB_NAMES_MAX) -> JobNames:
    """The distinct ``job_name`` values of ``model``'s table: one query that
    reads at most ``limit + 1`` index entries.

    Raises ``ValueError`` when ``limit`` is not 1..JOB_NAMES_MAX or when no
    index of ``model`` is led by ``job_name`` (the walk would scan the table
    once per name).
    """
    if not 1 <= limit <= JOB_NAMES_MAX:
        raise ValueError(f"limit must be 1..{JOB_NAMES_MAX}")
    if not led_by_job_name(model):
        raise ValueError(f"{model.__name__} has no index led by job_name")
    field = model._meta.get_field("job_name")
    if not isinstance(field, models.Field) or field.column is None:
        raise ValueError(f"{model.__name__}.job_name is not a column")
    connection = connections[router.db_for_read(model)]
    quote = connection.ops.quote_name
    sql = WALK.format(table=quote(model._meta.db_table), column=quote(field.column))
    with connection.cursor() as cursor:
        cursor.execute(sql, [limit])
        names = tuple(str(name) for (name,) in cursor.fetchall())
    return JobNames(names=names[:limit], truncated=len(names) > limit)
