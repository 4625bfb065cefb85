"""A lookup the selectors filter with."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from django.db.models import Lookup

_CODE = re.compile(r"[A-Z_]{1,32}")

# Generic only for the type checker: without django_stubs_ext's monkeypatch
# (a host project's settings) Django's class is not subscriptable at run time.
if TYPE_CHECKING:
    _Lookup = Lookup[str]
else:
    _Lookup = Lookup


class InLiterals(_Lookup):
    """``column IN ('A', 'B', …)`` with the values written into the statement,
    not bound as parameters — for fixed code values only (checked).

    Bound, ``status IN ($1, …)`` is fine for a custom plan, but after five runs
    of a prepared statement on one connection PostgreSQL may switch to its
    generic plan, which cannot prove a partial index's predicate from
    parameters: the unresolved list then walked the whole execution table
    (bench/size.py, docs/performance.md). With literals the generic plan keeps
    the partial index."""

    lookup_name = "in_literals"
    prepare_rhs = False

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, params = self.process_lhs(compiler, connection)
        values = list(self.rhs)
        if not values or not all(_CODE.fullmatch(value) for value in values):
            raise ValueError(f"in_literals takes code values only, not {values!r}")
        literals = ", ".join(f"'{value}'" for value in values)
        return f"{lhs} IN ({literals})", list(params)
