"""The console in a real headless browser (Debian's chromium + chromedriver):
log in, find a stuck execution on the dashboard, recover it through the
confirmation page with the keyboard, and see the applied message and the badge.

PostgreSQL pass only; skipped with a reason when chromium is not installed
(``scripts/test`` installs it when running as root; the browser is in conftest.py)."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from oxide_batch import models
from tests.browser.choices import choose

User = get_user_model()

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_recover_a_stuck_execution_from_the_dashboard(browser, live_server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    call_command("demo_workload", stdout=io.StringIO())
    User.objects.create_superuser("opal", "opal@example.invalid", "a-long-password")
    unknown = models.JobExecution.objects.get(status="UNKNOWN")

    browser.get(f"{live_server.url}/admin/login/")
    browser.find_element(By.NAME, "username").send_keys("opal")
    password = browser.find_element(By.NAME, "password")
    password.send_keys("a-long-password")
    password.send_keys(Keys.ENTER)
    browser.find_element(By.ID, "site-name")

    browser.get(f"{live_server.url}/admin/")
    browser.find_element(By.PARTIAL_LINK_TEXT, "batch dashboard").click()
    assert "Batch dashboard" in browser.title
    browser.save_screenshot(str(tmp_path / "dashboard.png"))
    assert browser.find_element(By.CSS_SELECTOR, 'svg[aria-label^="Executions created per day"]')

    browser.find_element(By.PARTIAL_LINK_TEXT, f"Recover #{unknown.pk}").click()
    assert "Confirm" in browser.title
    # Nothing is chosen for the operator (issue 25 point 4): each choice is made here.
    reason = browser.find_element(By.ID, "id_reason_code")
    assert reason.get_attribute("value") == ""
    choose(browser, "disposition", "MARK_FAILED")
    choose(browser, "failure_category", "UNKNOWN_COMMIT")
    reason.send_keys("UNKNOWN_EFFECT")
    browser.save_screenshot(str(tmp_path / "confirm.png"))
    # Keyboard: from the reason code, Tab reaches the confirm button; Enter submits.
    reason.send_keys(Keys.TAB)
    active = browser.switch_to.active_element
    assert active.get_attribute("id") == "confirm"
    active.send_keys(Keys.ENTER)
    WebDriverWait(browser, 15).until(lambda b: "/act/" not in b.current_url)

    messages = browser.find_element(By.CSS_SELECTOR, "ul.messagelist").text.lower()
    assert f"#{unknown.pk}" in messages
    assert "failed" in messages
    assert "decision #" in messages
    badges = [b.text for b in browser.find_elements(By.CSS_SELECTOR, ".ob-badge")]
    assert "FAILED" in badges
    assert "RECOVER" in browser.page_source  # the audit row on the execution page
    shots = os.environ.get("OXIDE_BATCH_SCREENSHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        for name in ("dashboard.png", "confirm.png"):
            shutil.copy(tmp_path / name, Path(shots) / name)
    assert (tmp_path / "dashboard.png").stat().st_size > 1000
