"""The case file of a failed, claimed execution in a real browser (issue 40):
the owner line names the claimant's host, pid and client, the failure links
"Open the logs" (the demo's template), in both colour schemes, with no serious
or critical axe violation. Screenshots at 1440 and 390 px go to
``$OXIDE_BATCH_SCREENSHOTS/owner``. PostgreSQL pass only."""

from __future__ import annotations

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
TEMPLATE = "https://logs.example.com/search?q={failure_id}&host={host}&from={started_at}"


def test_the_owner_line_and_the_log_link_in_either_scheme(browser, demo_console, settings):
    from selenium.webdriver.common.by import By

    settings.OXIDE_BATCH_FAILURE_URL_TEMPLATE = TEMPLATE
    failures = []
    try:
        for scheme in SCHEMES:
            emulate_scheme(browser, scheme)
            viewport(browser, WIDE, 1000)
            billing = models.JobExecution.objects.get(job_name="billing_export", attempt=1)
            demo_console(f"/admin/oxide_batch/jobexecution/{billing.pk}/change/")
            case = browser.find_element(By.CSS_SELECTOR, "section.ob-case")
            text = case.text
            assert "on worker-3, pid 4122, oxide-batch " in text, text
            assert "(worker billing-1)" in text, text
            link = case.find_element(By.LINK_TEXT, "Open the logs")
            assert link.get_attribute("href").startswith(
                f"https://logs.example.com/search?q={billing.failure_id}&host=worker-3&from="
            )
            if scheme == "dark":
                assert dark_scheme_applies(browser)
            found = blocking(axe_violations(browser))
            if found:
                failures.append(f"{scheme}: {node_count(found)} node(s)\n{describe(found)}")
            for width in WIDTHS:
                screenshot(browser, "owner", "case file owner", scheme, width)
    finally:
        reset(browser)
    if failures:
        pytest.fail("\n".join(failures))
