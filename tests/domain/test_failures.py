"""Failure categories explained, failure ids turned into links (contract §5.5),
and when an execution first failed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

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
        # Decision 316's fields.
        "https://x.example/?q={failure_id}&s={step_execution_id}&h={host}"
        "&from={started_at}&to={ended_at}",
    ],
)
def test_accepted_templates(template):
    assert validate_failure_url_template(template) == template


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("https://x.example/{nope}", "unknown placeholder"),
        ("https://x.example/{failure_id}&pid={pid}", "unknown placeholder(s) {pid}; use"),
        ("https://x.example/{failure_id}&w={worker_name}", "{step_execution_id}, {host}"),
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


def test_the_new_fields_are_escaped_rfc3339_utc_and_empty_when_unknown():
    template = "https://logs.example/?q={failure_id}&s={step_execution_id}&h={host}&f={started_at}&t={ended_at}"
    berlin = timezone(timedelta(hours=1))
    url = failure_url(
        template,
        failure_id=9006,
        execution_id=7,
        job_name="j",
        step_execution_id=12,
        host="rack 1&2/b",
        started_at=datetime(2026, 12, 6, 22, 0, 0, 123456, tzinfo=berlin),
        ended_at=datetime(2026, 12, 6, 21, 30, tzinfo=UTC),
    )
    assert url == (
        "https://logs.example/?q=9006&s=12&h=rack%201%262%2Fb"
        "&f=2026-12-06T21%3A00%3A00.123Z&t=2026-12-06T21%3A30%3A00.000Z"
    )
    unknown = failure_url(template, failure_id=1, execution_id=1, job_name="j")
    assert unknown == "https://logs.example/?q=1&s=&h=&f=&t="


def test_the_demo_template_of_scripts_run_is_valid():
    text = (Path(__file__).parents[2] / "scripts" / "run").read_text()
    line = next(x for x in text.splitlines() if x.startswith("export OXIDE_BATCH_FAILURE_URL"))
    template = line.split("-'", 1)[1].rsplit("'}", 1)[0]
    assert validate_failure_url_template(template) == template
    assert "{host}" in template
    assert "{started_at}" in template


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
