"""Failure categories explained, failure ids turned into links (contract §5.5),
and when an execution first failed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from oxide_batch.domain.execution import failed_at_after
from oxide_batch.domain.failures import (
    FAILURE_HELP,
    failure_help,
    failure_url,
    validate_failure_url_template,
)
from oxide_batch.domain.status import BatchStatus, FailureCategory


def test_every_category_says_what_it_means_and_what_to_do():
    assert set(FAILURE_HELP) == set(FailureCategory)
    for category, help_ in FAILURE_HELP.items():
        assert help_.meaning.endswith("."), category
        assert help_.action.endswith("."), category
        assert failure_help(category.value) == help_
    assert failure_help("NOT_A_CATEGORY") is None


@pytest.mark.parametrize(
    "template",
    [
        "",
        "https://logs.example.com/search?q=failure_id:{failure_id}",
        "http://sentry.internal/issues/?query={failure_id}&job={job_name}&run={execution_id}",
        "https://x.example/{failure_id}?literal={{braces}}",
    ],
)
def test_accepted_templates(template):
    assert validate_failure_url_template(template) == template


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("https://x.example/{nope}", "unknown placeholder"),
        ("https://x.example/{}", "unknown placeholder"),
        ("https://x.example/{0}", "unknown placeholder"),
        ("https://x.example/{failure_id!r}", "no format spec"),
        ("https://x.example/{failure_id:>9}", "no format spec"),
        ("https://x.example/{failure_id", "not a valid template"),
        ("https://x.example/search", "must use {failure_id}"),
        ("ftp://x.example/{failure_id}", "absolute http(s)"),
        ("/relative/{failure_id}", "absolute http(s)"),
        ("javascript:alert({failure_id})", "absolute http(s)"),
    ],
)
def test_refused_templates_say_why(template, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        validate_failure_url_template(template)


def test_values_are_url_quoted():
    url = failure_url(
        "https://logs.example/?q={failure_id}&job={job_name}&e={execution_id}",
        failure_id=9006,
        execution_id=7,
        job_name="nightly import&x=<1>",
    )
    assert url == "https://logs.example/?q=9006&job=nightly%20import%26x%3D%3C1%3E&e=7"
    assert failure_url("", failure_id=1, execution_id=1, job_name="j") is None


def test_only_what_a_policy_may_retry_or_skip_is_policy_eligible():
    """The seed's fault-policy rule: infrastructure, the job's own components, a
    lost race and a timeout may be retried or skipped; everything else — an
    unknown commit, a definition or invariant fault, a recovery — fails closed."""
    eligible = {category for category in FailureCategory if category.is_policy_eligible}
    assert eligible == {
        FailureCategory.TRANSIENT_INFRASTRUCTURE,
        FailureCategory.PERMANENT_INFRASTRUCTURE,
        FailureCategory.USER_COMPONENT,
        FailureCategory.OPTIMISTIC_CONFLICT,
        FailureCategory.TIMEOUT,
    }
    assert not FailureCategory.UNKNOWN_COMMIT.is_policy_eligible
    assert not FailureCategory.STALE_RECOVERED.is_policy_eligible


FIRST = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 1, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    ("failed_at", "status", "expected"),
    [
        (None, BatchStatus.FAILED, NOW),  # the first move to FAILED records it
        (FIRST, BatchStatus.FAILED, FIRST),  # failing again keeps the first
        (FIRST, BatchStatus.STARTING, FIRST),  # a restart's moves never clear it
        (None, BatchStatus.COMPLETED, None),
        (None, BatchStatus.ABANDONED, None),
    ],
)
def test_failed_at_is_recorded_by_the_first_move_to_failed_only(failed_at, status, expected):
    assert failed_at_after(failed_at, status, NOW) == expected
