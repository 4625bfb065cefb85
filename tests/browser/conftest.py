"""The headless browser (Debian's chromium + chromedriver) for tests/browser.

Skipped with a reason when selenium or chromium is missing (``scripts/test``
installs chromium when running as root)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
