"""Keep an SQLite table's AUTOINCREMENT high-water mark across a table rebuild.

On SQLite, adding a constraint (or a column Django cannot add in place)
rebuilds the table: copy, drop, rename. The copy keeps the rows, constraints
and indexes but not the ``sqlite_sequence`` mark (the copy only knows the
surviving ids), so ids of purged rows could be handed out again. A migration
that rebuilds ``table`` runs ``RunPython(*keep_high_water(table))`` around its
operations: the first half remembers the mark, the second puts it back.
(Not a migration: the loader skips modules whose name starts with ``_``.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Step = Callable[[Any, Any], None]


def keep_high_water(table: str) -> tuple[Step, Step]:
    """(remember, restore) for ``table``; no-ops on other databases."""
    saved: dict[str, int] = {}

    def remember(apps: Any, schema_editor: Any) -> None:
        connection = schema_editor.connection
        if connection.vendor != "sqlite":
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT seq FROM sqlite_sequence WHERE name = %s", [table])
            row = cursor.fetchone()
        saved[connection.alias] = 0 if row is None else int(row[0])

    def restore(apps: Any, schema_editor: Any) -> None:
        connection = schema_editor.connection
        if connection.vendor != "sqlite":
            return
        mark = saved.pop(connection.alias, 0)
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE sqlite_sequence SET seq = MAX(seq, %s) WHERE name = %s", [mark, table]
            )
            if cursor.rowcount == 0:
                cursor.execute(
                    "INSERT INTO sqlite_sequence (name, seq) VALUES (%s, %s)", [table, mark]
                )

    return remember, restore
