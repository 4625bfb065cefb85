"""Skipped items in the console (issue 42), as an operator sees them in a real
browser: the case file's "Skipped items" (a count, the first ones with their
step, a link to all), the step page's table and the step list's `skips`
column, and the skip ledger's list that "See all" opens — with no serious or
critical axe violation, light and dark.

Screenshots (1440 and 390 px, light and dark) in
``$OXIDE_BATCH_SCREENSHOTS/skips``. PostgreSQL pass only, like every browser
test."""

from __future__ import annotations

import pytest

from oxide_batch.domain import BatchStatus
from oxide_batch.domain.execution import ExecutionCounts
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.skips import SkipEntry, SkipPhase
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


def skipping_execution() -> tuple[int, int]:
    repo = DjangoJobRepository(SystemClock())
    execution = move(repo, launch(repo, key("nightly_import", "2026-11-30")), BatchStatus.STARTED)
    user = FailureCategory.USER_COMPONENT
    skips = [
        SkipEntry(SkipPhase.READ, "orders.csv:117", user, FailureDetail("csv.Error", "bad quote")),
        SkipEntry(
            SkipPhase.PROCESS,
            "order-88412",
            user,
            FailureDetail("ValueError", "amount '12,5' is not a number: token=abc123def456"),
        ),
        SkipEntry(
            SkipPhase.WRITE,
            "order-88519",
            FailureCategory.TRANSIENT_INFRASTRUCTURE,
            FailureDetail("psycopg.errors.DeadlockDetected", "deadlock detected"),
        ),
    ]
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load_orders", started=True)
        counts = ExecutionCounts(read=500, processed=499, written=497, committed=1)
        uow.commit_chunk(step.id, step.version, counts, skips=skips)
        uow.commit()
    return execution.id, step.id


def test_the_skipped_items_pages(browser, demo_console):
    from selenium.webdriver.common.by import By

    execution, step = skipping_execution()
    pages = (
        ("case file", f"/admin/oxide_batch/jobexecution/{execution}/change/", ".ob-case"),
        ("step", f"/admin/oxide_batch/stepexecution/{step}/change/", "#content"),
        ("step list", "/admin/oxide_batch/stepexecution/", "#result_list"),
        ("ledger", f"/admin/oxide_batch/skip/?execution={execution}", "#result_list"),
    )
    failures = []
    try:
        for scheme in SCHEMES:
            emulate_scheme(browser, scheme)
            for name, path, region in pages:
                viewport(browser, WIDE, 1000)
                demo_console(path)
                shown = browser.find_element(By.CSS_SELECTOR, region).text
                if name == "step list":
                    assert "3 (read 1, process 1, write 1)" in shown
                else:
                    assert "order-88412" in shown
                    assert "token=[redacted]" in shown
                    assert "abc123def456" not in browser.page_source
                if scheme == "dark":
                    assert dark_scheme_applies(browser)
                found = blocking(axe_violations(browser))
                if found:
                    failures.append(
                        f"{name} ({scheme}): {node_count(found)} serious/critical axe node(s)\n"
                        f"{describe(found)}"
                    )
                for width in WIDTHS:
                    screenshot(browser, "skips", name, scheme, width)
        viewport(browser, WIDE, 1000)
        demo_console(f"/admin/oxide_batch/jobexecution/{execution}/change/")
        browser.find_element(By.LINK_TEXT, "See all").click()
        assert f"execution={execution}" in browser.current_url
        assert "order-88519" in browser.find_element(By.CSS_SELECTOR, "#result_list").text
    finally:
        reset(browser)
    if failures:
        pytest.fail("\n".join(failures))
