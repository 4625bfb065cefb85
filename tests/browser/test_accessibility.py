"""axe-core on the console's pages and the API docs, as an operator sees them
(a superuser on the demo workload): no serious or critical violation (SPEC §5
"accessible"; issue 14 point 9). One test per page, so each page's state is
visible on its own; a failure lists rule, impact and the nodes to fix.

PostgreSQL pass only, like every browser test."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from oxide_batch import models
from tests.browser.axe import axe_violations, blocking, describe, node_count

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def unknown_execution() -> int:
    return models.JobExecution.objects.get(status="UNKNOWN").pk


# page name → (path, a CSS selector present once the page has rendered)
PAGES: dict[str, tuple[Callable[[], str], str]] = {
    "index": (lambda: "/admin/", "#content-main"),
    "dashboard": (lambda: "/admin/oxide_batch/jobexecution/dashboard/", "#content svg"),
    "execution list": (lambda: "/admin/oxide_batch/jobexecution/", "#result_list"),
    "execution detail": (
        lambda: f"/admin/oxide_batch/jobexecution/{unknown_execution()}/change/",
        "#content-main",
    ),
    "recover confirmation": (
        lambda: f"/admin/oxide_batch/jobexecution/act/recover/?ids={unknown_execution()}",
        "#confirm",
    ),
    "audit list": (lambda: "/admin/oxide_batch/operatorrequest/", "#changelist"),
    # The docs render in the browser: wait for the operations to be drawn.
    "swagger": (lambda: "/api/v1/docs/", ".opblock"),
    "redoc": (lambda: "/api/v1/redoc/", ".api-content h1"),
}


@pytest.mark.parametrize("page", list(PAGES))
def test_no_serious_or_critical_axe_violation(page, browser, demo_console):
    from selenium.webdriver.common.by import By

    path, rendered = PAGES[page]
    demo_console(path())
    browser.find_element(By.CSS_SELECTOR, rendered)
    found = blocking(axe_violations(browser))
    if found:
        pytest.fail(f"{page}: {node_count(found)} serious/critical axe node(s)\n{describe(found)}")
