"""Find instances by one identifying parameter's exact value, for the console's
search box (``business_date=2026-11-30``).

Only names listed in ``OXIDE_BATCH_VISIBLE_PARAMETERS`` may be searched: a
search on a hidden parameter would tell its value by trial (an oracle), so it
is refused before any query. The values are stored as JSON strings (integers as
decimal strings, ``domain/parameters.py``), so the match is on the text.

PostgreSQL answers with ``@>`` (jsonb containment) on the GIN index
``ob_instance_parameters`` (migration 0014); SQLite, which has no containment
operator, walks each row's array with ``json_each``. Either way one statement,
at most ``limit`` ids, newest first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.db import connections, models, router

from oxide_batch.conf import batch_settings

PARAMETER_MATCHES_MAX = 500

POSTGRESQL = (
    "SELECT id FROM ob_job_instance WHERE identifying_parameters @> %s::jsonb "
    "ORDER BY id DESC LIMIT %s"
)
SQLITE = (
    "SELECT id FROM ob_job_instance WHERE EXISTS ("
    "SELECT 1 FROM json_each(ob_job_instance.identifying_parameters) AS item "
    "WHERE json_extract(item.value, '$.name') = %s "
    "AND json_extract(item.value, '$.value') = %s) "
    "ORDER BY id DESC LIMIT %s"
)


@dataclass(frozen=True, slots=True)
class ParameterTerm:
    name: str
    value: str


def parse_term(term: str) -> ParameterTerm | None:
    """``name=value`` (spaces around either part ignored) or ``None``."""
    name, sep, value = term.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value:
        return None
    return ParameterTerm(name, value)


def is_searchable(name: str) -> bool:
    return name in batch_settings.VISIBLE_PARAMETERS


@dataclass(frozen=True, slots=True)
class Matches:
    ids: tuple[int, ...]
    truncated: bool


def instances_with(
    instance_model: type[models.Model],
    term: ParameterTerm,
    *,
    limit: int = PARAMETER_MATCHES_MAX,
) -> Matches:
    """The ids of the instances (``ob_job_instance``, the model passed in) whose
    parameter ``term.name`` is ``term.value`` (newest first, at most ``limit``;
    ``truncated`` when there are more). The caller checks :func:`is_searchable`
    first."""
    alias = router.db_for_read(instance_model)
    connection = connections[alias]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            probe = json.dumps([{"name": term.name, "value": term.value}])
            cursor.execute(POSTGRESQL, [probe, limit + 1])
        else:
            cursor.execute(SQLITE, [term.name, term.value, limit + 1])
        ids = [int(row[0]) for row in cursor.fetchall()]
    return Matches(tuple(ids[:limit]), len(ids) > limit)
