"""The headless browser (Debian's chromium + chromedriver) for tests/browser,
and a logged-in superuser on the demo workload.

Skipped with a reason when selenium or chromium is missing (``scripts/test``
installs chromium when running as root)."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

User = get_user_model()

CHROMIUM = os.environ.get("OXIDE_BATCH_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("OXIDE_BATCH_CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,1000",
)
# No host but this one resolves: a page that asks for anything off the machine
# gets a failed request (recorded in the network log), never an answer.
OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"
USERNAME, PASSWORD = "opal", "a-long-password"


@pytest.fixture
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip(f"chromium/chromedriver not installed ({CHROMIUM}, {CHROMEDRIVER})")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="oxide-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, OFFLINE, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    # Every request the page makes (tests/browser/network.py reads it).
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(20)
    driver.set_script_timeout(60)
    driver.implicitly_wait(10)  # after a key press the next page may still be loading
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def demo_console(browser: Any, live_server: Any) -> Callable[[str], None]:
    """The demo workload recorded, the browser logged in as a superuser;
    returns ``open(path)``, which loads a page of the live server."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    call_command("demo_workload", stdout=io.StringIO())
    User.objects.create_superuser(USERNAME, f"{USERNAME}@example.invalid", PASSWORD)
    browser.get(f"{live_server.url}/admin/login/")
    browser.find_element(By.NAME, "username").send_keys(USERNAME)
    password = browser.find_element(By.NAME, "password")
    password.send_keys(PASSWORD)
    password.send_keys(Keys.ENTER)
    browser.find_element(By.ID, "site-name")

    def open_page(path: str) -> None:
        browser.get(f"{live_server.url}{path}")

    return open_page
