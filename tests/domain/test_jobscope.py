"""Job scopes (contract §4.1, ``oxide_batch.domain.jobscope``): a pattern matches the
whole job name; ``*`` is any run of characters (none included), ``?`` exactly
one character (code point); everything else — brackets, regular-expression
and SQL wildcards, spaces, backslashes — stands for itself, with no case
folding. For patterns without brackets that is ``fnmatch.fnmatchcase``."""

from __future__ import annotations

import fnmatch
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxide_batch.domain.errors import DomainError, JobNotPermitted
from oxide_batch.domain.jobscope import (
    MAX_PATTERNS,
    check_scope,
    in_scope,
    pattern_regex,
    validate_patterns,
)

# (patterns, job name, in scope)
MATCHES = [
    (["nightly_*"], "nightly_import", True),
    (["nightly_*"], "nightly_", True),  # * matches nothing too
    (["nightly_*"], "nightly", False),
    (["nightly_*"], "Nightly_import", False),  # no case folding
    (["nightly_*"], "xnightly_import", False),  # anchored at the start
    (["*_import"], "nightly_import", True),
    (["*_import"], "nightly_import_x", False),  # anchored at the end
    (["*"], "anything at all", True),
    (["*"], "*", True),
    (["a*b*c"], "abc", True),
    (["a*b*c"], "aXXbYYc", True),
    (["a*b*c"], "acb", False),
    (["report-??"], "report-01", True),
    (["report-??"], "report-1", False),
    (["report-??"], "report-001", False),
    (["?"], "é", True),  # one code point
    (["?"], "e\u0301", False),  # two code points (e + combining acute)
    (["a.b"], "a.b", True),
    (["a.b"], "aXb", False),  # . is literal
    (["a+"], "a+", True),
    (["a+"], "aa", False),
    (["(x)|y"], "(x)|y", True),
    (["(x)|y"], "y", False),
    (["^a$"], "^a$", True),
    (["^a$"], "a", False),
    (["[ab]"], "[ab]", True),  # brackets are literal, not a class
    (["[ab]"], "a", False),
    (["a[!b]c"], "a[!b]c", True),
    (["a[!b]c"], "axc", False),
    (["a\\d"], "a\\d", True),  # a backslash is literal, not an escape
    (["a\\d"], "a1", False),
    (["a\\*"], "a\\xyz", True),  # and escapes no wildcard
    (["100%"], "100%", True),  # SQL LIKE wildcards are literal
    (["100%"], "1000", False),
    (["a_c"], "abc", False),
    (["{a,b}"], "a", False),
    (["{a,b}"], "{a,b}", True),
    (["daily run"], "daily run", True),
    (["daily run"], "daily  run", False),
    (["ß"], "SS", False),
    (["k"], "\u212a", False),  # KELVIN SIGN is not k
    (["été*"], "été 2026", True),
    (["été*"], "ete 2026", False),
    (["a*", "b?"], "b1", True),  # any pattern may match
    (["a*", "b?"], "b12", False),
    (["a*", "b?"], "c", False),
]


@pytest.mark.parametrize(("patterns", "name", "expected"), MATCHES)
def test_what_a_pattern_matches(patterns: list[str], name: str, expected: bool) -> None:
    assert in_scope(patterns, name) is expected


def test_the_database_regex_is_anchored_and_ors_the_patterns() -> None:
    regex = pattern_regex(["a*", "b?.c"])
    assert regex.startswith("^(")
    assert regex.endswith(")$")
    assert re.search(regex, "xa") is None
    assert re.search(regex, "bz.c") is not None
    assert re.search(regex, "bz-c") is None


# Every character a name may hold that is special to a regular expression, to
# SQL LIKE, to fnmatch's escaping, plus letters with case pairs — no brackets
# (fnmatch reads those as a class; a scope reads them literally).
LITERALS = [*"aAbB1.+()\\^$|%_ {}-#'\"/,", "é", "ß", "İ", "σ", "Σ", "\u212a"]
PATTERN = st.text(st.sampled_from([*LITERALS, "*", "?"]), min_size=1, max_size=8)
NAME = st.text(st.sampled_from(LITERALS), min_size=1, max_size=10)


@settings(max_examples=300, deadline=None)
@given(pattern=PATTERN, name=NAME)
def test_without_brackets_a_pattern_is_fnmatchcase(pattern: str, name: str) -> None:
    assert in_scope([pattern], name) is fnmatch.fnmatchcase(name, pattern)


@settings(max_examples=100, deadline=None)
@given(patterns=st.lists(PATTERN, min_size=1, max_size=4), name=NAME)
def test_several_patterns_match_when_one_does(patterns: list[str], name: str) -> None:
    assert in_scope(patterns, name) is any(in_scope([p], name) for p in patterns)


def test_check_scope_names_the_job_and_the_patterns() -> None:
    check_scope(None, "anything")  # an unlimited token
    check_scope(["nightly_*"], "nightly_import")
    with pytest.raises(JobNotPermitted) as refused:
        check_scope(["nightly_*", "adhoc"], "weekly_report")
    assert (refused.value.job_name, refused.value.patterns) == (
        "weekly_report",
        ["nightly_*", "adhoc"],
    )
    assert refused.value.code == "job_not_permitted"
    assert str(refused.value) == (
        "this token is limited to jobs matching 'nightly_*', 'adhoc' and may not touch "
        "job 'weekly_report'"
    )


def test_patterns_are_validated_like_job_names() -> None:
    assert validate_patterns(["b*", "a*", "b*"]) == ("b*", "a*")  # duplicates dropped, in order
    assert validate_patterns(["*"]) == ("*",)
    assert len(validate_patterns([f"job{n}*" for n in range(MAX_PATTERNS)])) == MAX_PATTERNS
    for refused in (
        [],
        [f"job{n}*" for n in range(MAX_PATTERNS + 1)],
        [""],
        [" nightly_*"],
        ["nightly_*\n"],
        ["night\x00ly"],
        ["x" * 129],
    ):
        with pytest.raises(DomainError):
            validate_patterns(refused)
