"""Job scopes: a token limited to some job names (contract §4.1).

A scope is a tuple of shell-style patterns on the job name: ``*`` stands for any
run of characters (none included), ``?`` for exactly one; every other character
stands for itself, compared code point for code point (no case folding, no
bracket classes — a job name may contain ``[``). A job is in scope when one
pattern matches the whole name.

The same pattern is matched in Python (:func:`in_scope`) and by the database
(:func:`pattern_regex`, a regular expression both PostgreSQL's ``~`` and
SQLite's Python ``REGEXP`` read alike), so a list filtered in SQL shows exactly
the jobs a single read lets through (``tests/domain/test_jobscope.py`` and
``tests/api/test_job_scope.py`` check the two agree).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from oxide_batch.domain.errors import InvalidCharacters, JobNotPermitted
from oxide_batch.domain.names import NameKind, validate_new_name

#: At most this many patterns per token.
MAX_PATTERNS = 32


def validate_pattern(pattern: str) -> str:
    """A pattern is written like a job name (1–128 UTF-8 bytes, no surrounding
    whitespace, no control character) and holds at least one character that is
    not a wildcard or stands for a name (``*`` alone: every job)."""
    validate_new_name(pattern, NameKind.JOB)
    return pattern


def validate_patterns(patterns: Iterable[str]) -> tuple[str, ...]:
    """Each pattern valid, duplicates dropped in their order, 1–32 of them."""
    found: list[str] = []
    for pattern in patterns:
        if validate_pattern(pattern) not in found:
            found.append(pattern)
    if not 1 <= len(found) <= MAX_PATTERNS:
        raise InvalidCharacters(kind="job patterns", allowed=f"1 to {MAX_PATTERNS} patterns")
    return tuple(found)


def _translate(pattern: str) -> str:
    parts = []
    for character in pattern:
        if character == "*":
            parts.append(".*")
        elif character == "?":
            parts.append(".")
        elif character.isalnum() or ord(character) > 0x7F:
            parts.append(character)
        else:
            # ASCII punctuation and space: escaped, a literal in both dialects.
            parts.append("\\" + character)
    return "".join(parts)


def pattern_regex(patterns: Sequence[str]) -> str:
    """One anchored regular expression matching a job name any pattern matches."""
    return "^(" + "|".join(_translate(pattern) for pattern in patterns) + ")$"


def in_scope(patterns: Sequence[str], job_name: str) -> bool:
    """Whether ``job_name`` matches one of ``patterns`` (the whole name)."""
    return re.fullmatch(pattern_regex(patterns)[1:-1], job_name, flags=re.DOTALL) is not None


def check_scope(patterns: Sequence[str] | None, job_name: str) -> None:
    """``JobNotPermitted`` unless ``job_name`` is in scope (``None``: every job)."""
    if patterns is not None and not in_scope(patterns, job_name):
        raise JobNotPermitted(job_name=job_name, patterns=list(patterns))
