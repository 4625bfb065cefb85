"""The dashboard on a phone (issue 14 point 10): at 390 CSS pixels nothing an
operator needs is off-screen — the page does not scroll sideways, wide tables
scroll inside their own box, charts shrink to the width, and every Recover
button lies inside the viewport. PostgreSQL pass only, like the other browser
tests (the ``browser`` fixture skips when chromium is not installed)."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone

from oxide_batch.conf import batch_settings
from oxide_batch.selectors.unresolved import unresolved_executions

User = get_user_model()

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": False}


def _log_in(driver, base: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    User.objects.create_superuser("opal", "opal@example.invalid", "a-long-password")
    driver.get(f"{base}/admin/login/")
    driver.find_element(By.NAME, "username").send_keys("opal")
    password = driver.find_element(By.NAME, "password")
    password.send_keys("a-long-password")
    password.send_keys(Keys.ENTER)
    driver.find_element(By.ID, "site-name")


def test_the_dashboard_fits_a_390_pixel_phone(browser, live_server, tmp_path):
    from selenium.webdriver.common.by import By

    call_command("demo_workload", stdout=io.StringIO())
    _log_in(browser, live_server.url)
    unresolved = unresolved_executions(
        now=timezone.now(), inactive_for=batch_settings.RECOVERY_STALE_AFTER
    )
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
    browser.get(f"{live_server.url}/admin/oxide_batch/jobexecution/dashboard/")
    assert "Batch dashboard" in browser.title

    width = browser.execute_script("return window.innerWidth")
    assert width == PHONE["width"]
    assert browser.execute_script("return document.documentElement.scrollWidth") <= width + 1

    buttons = browser.find_elements(By.CSS_SELECTOR, "a.ob-recover")
    assert buttons
    assert len(buttons) == len(unresolved)
    for button in buttons:
        box = browser.execute_script("return arguments[0].getBoundingClientRect().toJSON()", button)
        assert box["left"] >= 0, (button.text, box)
        assert box["right"] <= width, (button.text, box)

    for chart in browser.find_elements(By.CSS_SELECTOR, "svg.ob-chart"):
        box = browser.execute_script("return arguments[0].getBoundingClientRect().toJSON()", chart)
        assert 0 <= box["left"] < box["right"] <= width, box

    shots = os.environ.get("OXIDE_BATCH_SCREENSHOTS")
    if shots:
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {**PHONE, "height": height})
        browser.save_screenshot(str(tmp_path / "dashboard-390.png"))
        Path(shots).mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / "dashboard-390.png", Path(shots) / "dashboard-390.png")
