"""The notification pages (issue 41 point 6) at 1440 and 390 px, light and
dark: the rules list, the deliveries list with a dead delivery, a case
file with its notifications, the add-rule form (empty, then with its
errors, then the page showing the generated secret once) and the deadlines
form. No page scrolls sideways
(``document.scrollWidth <= window.innerWidth``) and axe finds no serious or
critical violation in either scheme.

Screenshots in ``$OXIDE_BATCH_SCREENSHOTS/issue41``. PostgreSQL pass only,
like every browser test."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.services.deadlines import Deadlines
from oxide_batch.services.notify_rules import NotificationRules, new_rule
from tests.browser.axe import axe_violations, blocking, describe, node_count
from tests.browser.screens import SCHEMES, WIDE, WIDTHS, emulate_scheme, reset, screenshot, viewport

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

_OVERFLOW = "return [document.documentElement.scrollWidth, window.innerWidth];"
# A list's results table at 1440 px: no column cut off inside its own box.
_BOX = """
const box = document.querySelector('.results');
return box ? [box.scrollWidth, box.clientWidth] : [0, 0];
"""


def _notifications() -> int:
    """Two rules (one disabled), and the demo's failed run's event delivered to
    one, dead at the other with a long error; its execution's id."""
    rules = NotificationRules()
    for name, options in (
        ("oncall-webhook", {"webhook": "https://hooks.example.com/oxide", "secret": None}),
        ("team-mail", {"email": ["oncall@example.com", "team-batch-operations@example.com"]}),
    ):
        made = new_rule(
            name=name,
            jobs=["nightly_*", "customer_sync"],
            events=["execution.failed", "execution.recovered", "job.missing"],
            **options,  # type: ignore[arg-type]
        )
        rules.add(made, by=ChangeBy("otto"))
    rules.disable("team-mail", by=ChangeBy("otto"))
    Deadlines().set(
        "nightly_import", by=ChangeBy("otto"), expect_every="1d", at="06:00", zone="Europe/Paris"
    )
    failed = models.JobExecution.objects.filter(status="FAILED").order_by("-pk")[0]
    event = models.NotificationEvent.objects.create(
        kind="execution.failed",
        job_name=failed.job_name,
        job_execution_id=failed.pk,
        status="FAILED",
        occurred_at=failed.ended_at or failed.created_at,
        dispatched_at=failed.created_at,
    )
    at = failed.created_at
    for rule, state, error in (
        ("oncall-webhook", "dead", "timed out after 10 s (attempt 8 of 8): " + "x" * 120),
        ("team-mail", "delivered", ""),
    ):
        models.NotificationDelivery.objects.create(
            event=event,
            rule=models.NotificationRule.objects.get(name=rule),
            webhook_id=f"msg_{rule.replace('-', '')}{event.pk:020d}",
            state=state,
            attempts=8 if state == "dead" else 1,
            next_attempt_at=at + timedelta(minutes=20),
            last_error=error,
            created_at=at,
            settled_at=at + timedelta(minutes=21),
        )
    return int(failed.pk)


PAGES: dict[str, tuple[Callable[[int], str], str]] = {
    "rules list": (lambda _: "/admin/oxide_batch/notificationrule/", "#result_list"),
    "deliveries list": (
        lambda _: "/admin/oxide_batch/notificationdelivery/?state=dead",
        "#result_list",
    ),
    "case file notifications": (
        lambda pk: f"/admin/oxide_batch/jobexecution/{pk}/change/",
        ".ob-case",
    ),
    "add rule form": (lambda _: "/admin/oxide_batch/notificationrule/new/", "#id_webhook"),
    "deadlines form": (
        lambda _: "/admin/oxide_batch/jobdeadline/set/?job=nightly_import",
        "#id_expect_every",
    ),
}


def test_the_notification_pages_fit_and_pass_axe(browser: Any, demo_console: Any) -> None:
    from selenium.webdriver.common.by import By

    execution = _notifications()
    failures: list[str] = []
    try:
        for page, (path, rendered) in PAGES.items():
            for scheme in SCHEMES:
                emulate_scheme(browser, scheme)
                viewport(browser, WIDE, 1000)
                demo_console(path(execution))
                browser.find_element(By.CSS_SELECTOR, rendered)
                text = browser.find_element(By.ID, "content").text
                if page == "deliveries list":
                    assert "DEAD" in text
                    assert "timed out" in text
                if page == "case file notifications":
                    assert "oncall-webhook" in text
                found = blocking(axe_violations(browser))
                if found:
                    failures.append(
                        f"{page} ({scheme}): {node_count(found)} serious/critical axe node(s)\n"
                        f"{describe(found)}"
                    )
                for width in WIDTHS:
                    viewport(browser, width)
                    scroll, inner = browser.execute_script(_OVERFLOW)
                    if scroll > inner:
                        failures.append(f"{page} ({scheme}, {width} px): scrolls sideways")
                    box, shown = browser.execute_script(_BOX)
                    if width == WIDE and box > shown:
                        failures.append(f"{page} ({scheme}): its table scrolls in its box")
                    screenshot(browser, "issue41", page, scheme, width)
    finally:
        reset(browser)
    if failures:
        pytest.fail("\n".join(failures))


def test_adding_a_rule_in_the_browser_shows_errors_then_the_secret_once(
    browser: Any, demo_console: Any
) -> None:
    """The form sent with no kind, then with a plain-http URL, shows each
    refusal beside its field, nothing written; corrected, the rule is added
    and its generated secret shown on the page the POST answered. Each page
    passes axe in both schemes."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    failures: list[str] = []

    def answered(driver: Any) -> bool:
        """The page the POST answered has loaded (the marker set on the form's
        page is gone). Asked while the browser navigates, chromedriver may
        refuse the question itself (an inspector error rather than a stale
        element): not loaded yet."""
        try:
            return bool(
                driver.execute_script(
                    "return window.obFormPage === undefined && document.readyState === 'complete'"
                )
            )
        except WebDriverException:
            return False

    def submit() -> str:
        """Send the form; the text of the page answered."""
        browser.execute_script("window.obFormPage = true")
        browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        WebDriverWait(browser, 10).until(answered)
        return str(browser.find_element(By.ID, "content").text)

    def check(page: str) -> None:
        for scheme in SCHEMES:
            emulate_scheme(browser, scheme)
            viewport(browser, WIDE, 1000)
            # A POST's answer is not loaded again: the links' colour transition
            # (0.15 s in the admin's CSS) ends before axe reads the colours.
            time.sleep(0.5)
            found = blocking(axe_violations(browser))
            if found:
                failures.append(
                    f"{page} ({scheme}): {node_count(found)} serious/critical axe node(s)\n"
                    f"{describe(found)}"
                )
            screenshot(browser, "issue41", page, scheme, WIDE)

    try:
        demo_console("/admin/oxide_batch/notificationrule/new/")
        browser.find_element(By.ID, "id_name").send_keys("oncall")
        browser.find_element(By.ID, "id_jobs").send_keys("nightly_*")
        browser.find_element(By.ID, "id_webhook").send_keys("http://hooks.example.com/x")
        # The service refuses one field at a time, in the command's order.
        text = submit()
        assert "Nothing was written" in text
        assert "name at least one event kind" in text
        browser.find_element(By.CSS_SELECTOR, "input[value='execution.failed']").click()
        assert "https required" in submit()
        assert browser.find_element(By.ID, "id_name").get_attribute("value") == "oncall"
        ticked = browser.find_element(By.CSS_SELECTOR, "input[value='execution.failed']")
        assert ticked.is_selected()
        assert not models.NotificationRule.objects.filter(name="oncall").exists()
        check("add rule form errors")
        webhook = browser.find_element(By.ID, "id_webhook")
        webhook.clear()
        webhook.send_keys("https://hooks.example.com/oxide")
        assert "shown this once" in submit()
        secret = browser.find_element(By.ID, "ob-secret-value").get_attribute("value")
        assert secret.startswith("whsec_")
        assert models.NotificationRule.objects.filter(name="oncall").exists()
        check("rule added secret once")
    finally:
        reset(browser)
    if failures:
        pytest.fail("\n".join(failures))
