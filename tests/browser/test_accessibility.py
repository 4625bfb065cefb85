"""axe-core on the console's pages and the API docs, as an operator sees them
(a superuser on the demo workload): no serious or critical violation (contract §5.4;
issue 14 point 9), in both colour schemes (issue 25 point 9): the admin follows
the system's ``prefers-color-scheme``, so each page is checked with the light
and the dark scheme emulated. One test per page, so each page's state is
visible on its own; a failure lists scheme, rule, impact and the nodes
to fix.

Each page is also photographed at 1440 and 390 px in both schemes, kept as test
artifacts in ``$OXIDE_BATCH_SCREENSHOTS/schemes`` (``scripts/test``:
``var/test-artifacts``). PostgreSQL pass only, like every browser test."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from oxide_batch import models
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

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def unknown_execution() -> int:
    return models.JobExecution.objects.get(status="UNKNOWN").pk


def execution_of(job_name: str, attempt: int = 1) -> int:
    return models.JobExecution.objects.get(job_name=job_name, attempt=attempt).pk


# page name → (path, a CSS selector present once the page has rendered)
PAGES: dict[str, tuple[Callable[[], str], str]] = {
    "index": (lambda: "/admin/", "#content-main"),
    "app index": (lambda: "/admin/oxide_batch/", "#content-main"),
    "dashboard": (lambda: "/admin/oxide_batch/jobexecution/dashboard/", "#content svg"),
    "execution list": (lambda: "/admin/oxide_batch/jobexecution/", "#result_list"),
    "execution detail": (
        lambda: f"/admin/oxide_batch/jobexecution/{unknown_execution()}/change/",
        "#content-main",
    ),
    # Issue 40: a STOPPED execution's restart plan; a restart attempt's skipped steps.
    "restart plan": (
        lambda: f"/admin/oxide_batch/jobexecution/{execution_of('report_build')}/change/",
        ".ob-plan table",
    ),
    "restart attempt": (
        lambda: f"/admin/oxide_batch/jobexecution/{execution_of('billing_export', 2)}/change/",
        "#content-main",
    ),
    "recover confirmation": (
        lambda: f"/admin/oxide_batch/jobexecution/act/recover/?ids={unknown_execution()}",
        "#confirm",
    ),
    "audit list": (lambda: "/admin/oxide_batch/operatorrequest/", "#changelist"),
    # Issue 39: the console's 404 for a row id that is no row.
    "not found": (lambda: "/admin/oxide_batch/jobexecution/987654/change/", ".ob-refusal"),
    "needs attention": (
        lambda: "/admin/oxide_batch/jobexecution/?triage=unresolved",
        "nav.ob-triage",
    ),
    # The docs render in the browser: wait for the operations to be drawn.
    "swagger": (lambda: "/api/v1/docs/", ".opblock"),
    "redoc": (lambda: "/api/v1/redoc/", ".api-content h1"),
}


@pytest.mark.parametrize("page", list(PAGES))
def test_no_serious_or_critical_axe_violation_in_either_scheme(page, browser, demo_console):
    from selenium.webdriver.common.by import By

    path, rendered = PAGES[page]
    failures = []
    try:
        for scheme in SCHEMES:
            emulate_scheme(browser, scheme)
            viewport(browser, WIDE, 1000)
            demo_console(path())
            browser.find_element(By.CSS_SELECTOR, rendered)
            if scheme == "dark" and page not in ("swagger", "redoc"):
                # The emulation did reach the page: the admin's dark colours apply.
                assert dark_scheme_applies(browser), f"{page}: the dark scheme was not applied"
            found = blocking(axe_violations(browser))
            if found:
                failures.append(
                    f"{page} ({scheme}): {node_count(found)} serious/critical axe node(s)\n"
                    f"{describe(found)}"
                )
            for width in WIDTHS:
                screenshot(browser, "schemes", page, scheme, width)
    finally:
        reset(browser)
    if failures:
        pytest.fail("\n".join(failures))
