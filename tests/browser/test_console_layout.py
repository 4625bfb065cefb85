"""The console's layout in a real browser (issue 25 point 9), on the demo data:

- the execution list fits 1440 px: neither the page nor the results table
  scrolls sideways;
- at 390 px every row's status and stale badges are in sight (inside the
  screen, not behind a sideways scroll);
- the confirmation's buttons are touch targets (at least 44 px tall) on one
  line each, at both widths;
- a user without the permission sees the console's 403 page, in its frame,
  naming the permission, in both colour schemes with no serious or critical
  axe violation.

Screenshots (1440 and 390 px, light and dark) in
``$OXIDE_BATCH_SCREENSHOTS/layout``. PostgreSQL pass only, like every browser test."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command

from oxide_batch import models
from oxide_batch.roles import VIEWER, ensure_roles
from tests.browser.axe import axe_violations, blocking, describe, node_count
from tests.browser.screens import (
    PHONE,
    SCHEMES,
    WIDE,
    WIDTHS,
    dark_scheme_applies,
    emulate_scheme,
    reset,
    screenshot,
    viewport,
)

User = get_user_model()

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TOUCH = 44  # px: the smallest touch target (WCAG 2.5.5)
LIST = "/admin/oxide_batch/jobexecution/"

# Each element's box, and whether its text sits on one line (the tops of its
# text's line boxes; an <input> button's label is one line when it does not wrap).
_BOXES = """
return Array.from(document.querySelectorAll(arguments[0])).map((el) => {
    const box = el.getBoundingClientRect();
    const range = document.createRange();
    range.selectNodeContents(el);
    const tops = new Set(Array.from(range.getClientRects()).map((r) => Math.round(r.top)));
    const style = getComputedStyle(el);
    return {
        text: el.textContent.trim() || el.value,
        left: box.left, right: box.right, top: box.top, bottom: box.bottom,
        height: box.height, width: box.width,
        lines: el.tagName === "INPUT" ? (style.whiteSpace.startsWith("pre") ||
            style.whiteSpace === "nowrap" ? 1 : 0) : tops.size,
        visible: box.width > 0 && box.height > 0,
    };
});
"""

# Whether the element at the centre of each element is that element (or inside
# it): false when a scroll box, the screen's edge or another element hides it.
_IN_SIGHT = """
return Array.from(document.querySelectorAll(arguments[0])).map((el) => {
    el.scrollIntoView({block: "center", inline: "nearest"});
    const box = el.getBoundingClientRect();
    const x = box.left + box.width / 2, y = box.top + box.height / 2;
    const hit = document.elementFromPoint(x, y);
    return {text: el.textContent.trim(), left: box.left, right: box.right,
            shown: hit !== null && (hit === el || el.contains(hit))};
});
"""


def boxes(driver: Any, selector: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = driver.execute_script(_BOXES, selector)
    return found


def log_in(driver: Any, base: str, username: str, password: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(f"{base}/admin/login/")
    driver.find_element(By.NAME, "username").send_keys(username)
    field = driver.find_element(By.NAME, "password")
    field.send_keys(password)
    field.send_keys(Keys.ENTER)
    driver.find_element(By.ID, "site-name")


def test_the_execution_list_fits_1440_pixels(browser, demo_console):
    """No sideways scroll at 1440: not the page, not the results table."""
    from selenium.webdriver.common.by import By

    viewport(browser, WIDE)
    demo_console(LIST)
    browser.find_element(By.ID, "result_list")
    try:
        page = browser.execute_script(
            "const s = document.scrollingElement; return [s.scrollWidth, s.clientWidth]"
        )
        results = browser.execute_script(
            "const r = document.querySelector('#changelist .results');"
            "return [r.scrollWidth, r.clientWidth]"
        )
        columns = browser.execute_script(
            "return Array.from(document.querySelectorAll('#result_list thead th'))"
            ".map((th) => th.textContent.trim())"
        )
        for scheme in SCHEMES:
            emulate_scheme(browser, scheme)
            screenshot(browser, "layout", "execution list", scheme, WIDE)
    finally:
        reset(browser)
    assert page[0] <= page[1], f"the page scrolls sideways: {page} ({columns})"
    assert results[0] <= results[1], f"the results table scrolls sideways: {results} ({columns})"


def test_status_and_stale_badges_are_in_sight_at_390_pixels(browser, demo_console):
    from selenium.webdriver.common.by import By

    viewport(browser, PHONE, 844)
    demo_console(LIST)
    browser.find_element(By.ID, "result_list")
    try:
        assert browser.execute_script("return window.innerWidth") == PHONE
        badges = browser.execute_script(_IN_SIGHT, "#result_list tbody .ob-badge")
        texts = [badge["text"] for badge in badges]
        assert any(text.startswith("stale") for text in texts), texts  # the demo's stuck run
        assert len(badges) >= models.JobExecution.objects.count()  # one status badge a row
        hidden = [b for b in badges if not (b["shown"] and 0 <= b["left"] < b["right"] <= PHONE)]
        page = browser.execute_script(
            "const s = document.scrollingElement; return [s.scrollWidth, s.clientWidth]"
        )
        for scheme in SCHEMES:
            emulate_scheme(browser, scheme)
            screenshot(browser, "layout", "execution list", scheme, PHONE)
    finally:
        reset(browser)
    assert hidden == [], hidden
    assert page[0] <= page[1], f"the page scrolls sideways at 390: {page}"


def test_the_confirmation_buttons_are_touch_targets_on_one_line(browser, demo_console):
    from selenium.webdriver.common.by import By

    unknown = models.JobExecution.objects.get(status="UNKNOWN").pk
    demo_console(f"/admin/oxide_batch/jobexecution/act/recover/?ids={unknown}")
    browser.find_element(By.ID, "confirm")
    problems = []
    try:
        for width in WIDTHS:
            viewport(browser, width)
            buttons = boxes(browser, "#content .submit-row input, #content .submit-row a")
            assert [b["text"] for b in buttons][1:] == ["No, take me back"], buttons
            for button in buttons:
                if button["height"] < TOUCH:
                    problems.append((width, button["text"], "height", button["height"]))
                if button["lines"] != 1:
                    problems.append((width, button["text"], "lines", button["lines"]))
                if not (button["left"] >= 0 and button["right"] <= width):
                    problems.append((width, button["text"], "off-screen", button))
            for scheme in SCHEMES:
                emulate_scheme(browser, scheme)
                screenshot(browser, "layout", "confirmation", scheme, width)
    finally:
        reset(browser)
    assert problems == []


def test_a_user_without_the_permission_sees_the_console_s_403(browser, live_server):
    """A viewer opening a recovery: the console's page, naming recover_execution
    and the group that grants it, with a way back; axe-clean in both schemes."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    call_command("demo_workload", stdout=io.StringIO())
    ensure_roles()
    viewer = User.objects.create_user("vera", password="a-long-password", is_staff=True)
    viewer.groups.add(Group.objects.get(name=VIEWER))
    unknown = models.JobExecution.objects.get(status="UNKNOWN").pk
    log_in(browser, live_server.url, "vera", "a-long-password")
    page = f"/admin/oxide_batch/jobexecution/{unknown}/change/"
    refused = f"/admin/oxide_batch/jobexecution/act/recover/?ids={unknown}"
    failures = []
    try:
        for scheme in SCHEMES:
            emulate_scheme(browser, scheme)
            # From the execution's page, as a link would (the Referer is that page).
            browser.get(f"{live_server.url}{page}")
            browser.find_element(By.CSS_SELECTOR, ".ob-case")
            browser.execute_script("window.location.href = arguments[0]", refused)
            WebDriverWait(browser, 15).until(lambda d: "/act/" in d.current_url)
            assert browser.find_element(By.CSS_SELECTOR, "#content h1").text == "Permission needed"
            if scheme == "dark":
                assert dark_scheme_applies(browser)
            text = browser.find_element(By.ID, "content").text
            assert "oxide_batch.recover_execution" in text
            assert "batch-operator" in text
            assert "Permission needed" in browser.find_element(By.CSS_SELECTOR, ".breadcrumbs").text
            found = blocking(axe_violations(browser))
            if found:
                failures.append(f"403 ({scheme}): {node_count(found)} node(s)\n{describe(found)}")
            for width in WIDTHS:
                screenshot(browser, "layout", "refused", scheme, width)
        back = browser.find_element(By.LINK_TEXT, "Back to the previous page")
        assert back.get_attribute("href") == f"{live_server.url}{page}"
        assert back.size["height"] >= TOUCH
    finally:
        reset(browser)
    assert failures == [], "\n".join(failures)
