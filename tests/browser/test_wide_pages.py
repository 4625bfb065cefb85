"""Three pages an operator meets first, at 1440 and 390 px, light and dark
(issue 39): the dashboard with a STOP REQUESTED badge in its unresolved table,
the operator requests list (with its reason-code column) and a case file. No
page scrolls sideways (``document.scrollWidth <= window.innerWidth``), and at
1440 px neither the unresolved table nor the requests' results table scrolls
inside its own box (the STOP column was cut). The "Needs attention" link of the
list shown is marked for the eye as well as for a screen reader.

Screenshots in ``$OXIDE_BATCH_SCREENSHOTS/issue39``. PostgreSQL pass only, like
every browser test."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from oxide_batch import models
from oxide_batch.domain.errors import OxideBatchError
from oxide_batch.repository import DjangoJobRepository
from oxide_batch.services import bootstrap
from oxide_batch.services.audit import Actor
from tests.browser.screens import SCHEMES, WIDE, WIDTHS, emulate_scheme, reset, screenshot, viewport

User = get_user_model()
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

_OVERFLOW = """
const page = [document.documentElement.scrollWidth, window.innerWidth];
const box = arguments[0] ? document.querySelector(arguments[0]) : null;
return {page: page, box: box ? [box.scrollWidth, box.clientWidth] : null};
"""


def _stop_the_stuck_run() -> int:
    """The demo's crashed worker, claimed by a runtime's user, with a stop
    requested (through the service, so the operator requests list has the row
    too) — and beside it the requests a busy night leaves: refusals with their
    codes, an abandon with its reason, long actor names. Its id."""
    worker = User.objects.create_user("nightly-runtime-eu-west-1")
    stuck = models.JobExecution.objects.get(job_name="customer_sync")
    repo = DjangoJobRepository()
    # Its worker's claim, as the runtime recorded it (the demo's run was
    # claimed by no one: the claim is taken while STARTING).
    models.JobExecution.objects.filter(pk=stuck.pk).update(
        owner_token=b"\x07" * 16, owner_user_id=worker.pk
    )
    stuck.refresh_from_db()
    service = bootstrap.operator_service(repo, stale_after=timedelta(minutes=15))
    service.stop(
        stuck.pk,
        expected_version=stuck.version,
        actor=Actor("otto"),
        operation_id="issue39-stop",
    )
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    failed = models.JobExecution.objects.filter(status="FAILED").order_by("pk").first()
    assert failed is not None
    night = Actor("watchdog@batch-worker-7.prod.eu-west-1.example.internal")
    for index in range(3):  # refused: an UNKNOWN execution takes no stop
        with contextlib.suppress(OxideBatchError):
            service.stop(
                unknown.pk,
                expected_version=unknown.version,
                actor=night,
                operation_id=f"issue39-refused-{index}",
            )
    service.abandon(
        failed.pk,
        expected_version=failed.version,
        actor=Actor("operator.with.a.long.name@example.internal"),
        reason_code="SUPERSEDED_BY_MANUAL_RERUN",
        operation_id="issue39-abandon",
    )
    assert models.OperatorRequest.objects.filter(outcome="REJECTED").exists()
    assert models.JobExecution.objects.get(pk=stuck.pk).stop_requested_at is not None
    assert stuck.last_activity_at is None or stuck.last_activity_at < timezone.now()
    return int(stuck.pk)


def _measure(browser: Any, name: str, box: str | None) -> list[str]:
    """The overflows of the page (and of ``box``) at each width and scheme, and
    the screenshots."""
    found = []
    try:
        for width in WIDTHS:
            viewport(browser, width)
            for scheme in SCHEMES:
                emulate_scheme(browser, scheme)
                measured = browser.execute_script(_OVERFLOW, box)
                if measured["page"][0] > measured["page"][1]:
                    found.append(f"{name} {width}px {scheme}: page {measured['page']}")
                if width == WIDE and measured["box"] and measured["box"][0] > measured["box"][1]:
                    found.append(f"{name} {width}px {scheme}: {box} {measured['box']}")
                screenshot(browser, "issue39", name, scheme, width)
    finally:
        reset(browser)
    return found


def test_the_dashboard_requests_and_case_file_never_scroll_sideways(browser, demo_console):
    from selenium.webdriver.common.by import By

    stuck = _stop_the_stuck_run()
    overflows = []
    demo_console("/admin/oxide_batch/jobexecution/dashboard/")
    table = browser.find_element(By.CSS_SELECTOR, "#ob-unresolved ~ .ob-scroll")
    assert "STOP REQUESTED" in table.text
    overflows += _measure(browser, "dashboard", "#ob-unresolved ~ .ob-scroll")
    demo_console("/admin/oxide_batch/operatorrequest/")
    headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#result_list thead th")]
    assert any("REASON" in header.upper() for header in headers), headers
    overflows += _measure(browser, "operator requests", "#changelist .results")
    demo_console(f"/admin/oxide_batch/jobexecution/{stuck}/change/")
    browser.find_element(By.CSS_SELECTOR, "section.ob-case")
    assert (
        "nightly-runtime-eu-west-1" in browser.find_element(By.CSS_SELECTOR, "section.ob-case").text
    )
    overflows += _measure(browser, "case file", None)
    assert overflows == []


def test_the_current_needs_attention_link_is_marked_for_the_eye(browser, demo_console):
    from selenium.webdriver.common.by import By

    demo_console("/admin/oxide_batch/jobexecution/?triage=unresolved")
    links = browser.find_elements(By.CSS_SELECTOR, ".ob-triage a")
    current = [a for a in links if a.get_attribute("aria-current")]
    others = [a for a in links if not a.get_attribute("aria-current")]
    assert len(current) == 1
    assert others

    def look(element: Any) -> tuple[str, ...]:
        style = "const s = getComputedStyle(arguments[0]);"
        return tuple(
            browser.execute_script(
                style + "return [s.fontWeight, s.backgroundColor, s.color, s.borderBottomStyle,"
                " s.textDecorationLine];",
                element,
            )
        )

    viewport(browser, WIDE)
    screenshot(browser, "issue39", "needs attention", "light", WIDE)
    reset(browser)
    assert look(current[0]) != look(others[0])
    assert look(current[0])[0] in ("700", "bold")
