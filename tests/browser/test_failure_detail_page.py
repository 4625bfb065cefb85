"""The case file of a failed execution with its detail (issue 40), as an
operator sees it in a real browser: "Why it failed" shows the type, the
scrubbed message and the traceback collapsed — opened by a click on its
summary (a keyboard works too: it is a ``<details>``) — with no serious or
critical axe violation, light and dark, closed and open.

Screenshots (1440 and 390 px, light and dark, the traceback closed and open)
in ``$OXIDE_BATCH_SCREENSHOTS/failure-detail``. PostgreSQL pass only, like
every browser test."""

from __future__ import annotations

import pytest
from django.test import override_settings

from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.execution import FailureSummary
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.status import FailureCategory
from oxide_batch.repository import DjangoJobRepository, SystemClock
from tests.browser.axe import axe_violations, blocking, describe, node_count
from tests.browser.screens import (
    SCHEMES,
    WIDE,
    WIDTHS,
    dark_scheme_applies,
    emulate_scheme,
    reset,
    screenshot,
    viewport,
)
from tests.helpers import key, launch, move

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TRACEBACK = "\n".join(
    [
        "Traceback (most recent call last):",
        '  File "/srv/jobs/nightly_import.py", line 88, in <module>',
        "    main()",
        '  File "/srv/jobs/nightly_import.py", line 61, in load',
        "    rows = parse(chunk, dsn='postgres://loader:s3cr3t@db/prod')",
        '  File "/srv/jobs/rows.py", line 17, in parse',
        "    raise ValueError(f'bad row {n}: password={password}')",
        "ValueError: bad row 17: password=hunter2",
    ]
)


def failed_with_detail() -> int:
    repo = DjangoJobRepository(SystemClock())
    execution = move(repo, launch(repo, key("nightly_import", "2026-11-30")), BatchStatus.STARTED)
    sent = FailureDetail("ValueError", "bad row 17: password=hunter2", TRACEBACK)
    failure = FailureSummary(FailureCategory.USER_COMPONENT, 4122, sent)
    with override_settings(OXIDE_BATCH_FAILURE_DETAIL="traceback"), repo.begin() as uow:
        uow.transition_job_execution(
            execution.id,
            execution.version,
            LifecycleTransition(BatchStatus.FAILED, failure=failure),
        )
        uow.commit()
    return execution.id


def test_the_case_file_with_a_failure_s_detail(browser, demo_console):
    from selenium.webdriver.common.by import By

    path = f"/admin/oxide_batch/jobexecution/{failed_with_detail()}/change/"
    failures = []
    try:
        for scheme in SCHEMES:
            emulate_scheme(browser, scheme)
            viewport(browser, WIDE, 1000)
            demo_console(path)
            shown = browser.find_element(By.CSS_SELECTOR, ".ob-case").text
            assert "Why it failed" in shown
            assert "bad row 17: password=[redacted]" in shown
            assert "hunter2" not in browser.page_source
            if scheme == "dark":
                assert dark_scheme_applies(browser)
            for state in ("closed", "open"):
                if state == "open":
                    browser.find_element(By.CSS_SELECTOR, ".ob-traceback summary").click()
                    opened = browser.find_element(By.CSS_SELECTOR, ".ob-traceback pre")
                    assert "ValueError: bad row 17: password=[redacted]" in opened.text
                    assert "loader:[redacted]@db" in opened.text
                found = blocking(axe_violations(browser))
                if found:
                    failures.append(
                        f"case file, traceback {state} ({scheme}): "
                        f"{node_count(found)} serious/critical axe node(s)\n{describe(found)}"
                    )
                for width in WIDTHS:
                    screenshot(browser, "failure-detail", f"case file {state}", scheme, width)
                viewport(browser, WIDE, 1000)
    finally:
        reset(browser)
    if failures:
        pytest.fail("\n".join(failures))
