"""The step page of a partitioned step run by claimed remote workers (issue
43) in a real browser: the partitions table with retries, the current
worker (host, pid), its lease and the earlier workers, in both colour
schemes, with no serious or critical axe violation. Screenshots at 1440 and
390 px go to ``$OXIDE_BATCH_SCREENSHOTS/partitions``. PostgreSQL pass only."""

from __future__ import annotations

import pytest

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
from tests.console_support_i43 import remote_run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_the_partitions_and_their_workers_in_either_scheme(browser, demo_console):
    from selenium.webdriver.common.by import By

    run = remote_run("browser")
    failures = []
    try:
        for scheme in SCHEMES:
            emulate_scheme(browser, scheme)
            viewport(browser, WIDE, 1000)
            demo_console(f"/admin/oxide_batch/stepexecution/{run.parent_id}/change/")
            table = browser.find_element(By.CSS_SELECTOR, ".field-partitions table")
            text = table.text
            assert "on worker-2, pid 2002" in text, text
            assert "on worker-1, pid 1001" in text, text
            assert "expires" in text, text
            assert "not assigned" in text, text
            if scheme == "dark":
                assert dark_scheme_applies(browser)
            found = blocking(axe_violations(browser))
            if found:
                failures.append(f"{scheme}: {node_count(found)} node(s)\n{describe(found)}")
            for width in WIDTHS:
                screenshot(browser, "partitions", "step partitions", scheme, width)
    finally:
        reset(browser)
    if failures:
        pytest.fail("\n".join(failures))
