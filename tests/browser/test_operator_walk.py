"""The operator's task at 3 a.m., end to end in a real browser on the demo data
(issue 14, acceptance): the dashboard → the stuck execution's page (eligible,
inactivity, the allowed parameters) → a failed one's failure link → Recover →
confirm → the result says the new status and links the decision → the
execution page shows the steps resolved and no action offered. Issue 25 adds:
an abandoned failure stays on the failures of the last 24 h (list and
dashboard), marked; a page submitted untouched applies nothing; the recovered
execution keeps its worker's activity and step writes, its timeline shows the
decision, and HISTORY the action.

Every page is looked at 1440 and 390 px wide: at 390 nothing the operator needs
is off-screen (the page never scrolls sideways; the buttons used are inside the
viewport). Screenshots of each page at both widths are kept as test artifacts
in ``$OXIDE_BATCH_SCREENSHOTS`` (``scripts/test``: ``var/test-artifacts/walk``).
PostgreSQL pass only, like the other browser tests."""

from __future__ import annotations

import io
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from oxide_batch import models
from tests.browser.choices import choose

User = get_user_model()

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WIDE, PHONE = 1440, 390
LOGS = "https://logs.example.invalid/search?q=failure_id:{failure_id}"


class Walk:
    """The browser, the pages seen so far and their screenshots."""

    def __init__(self, driver: Any, base: str, shots: Path) -> None:
        self.driver = driver
        self.base = base
        self.shots = shots
        self.seen: list[str] = []

    def viewport(self, width: int, height: int) -> None:
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def look(self, name: str, *, reachable: tuple[str, ...] = ()) -> None:
        """Screenshot the current page at both widths; at phone width the page
        must not scroll sideways and each ``reachable`` element (CSS selector)
        must lie inside the viewport's width."""
        from selenium.webdriver.common.by import By

        driver = self.driver
        for width in (WIDE, PHONE):
            # Device metrics, not the window: a headless window is not always
            # the viewport asked for (a 390 px window can lay out at 500).
            self.viewport(width, 900)
            assert driver.execute_script("return window.innerWidth") == width
            height = driver.execute_script("return document.documentElement.scrollHeight")
            self.viewport(width, min(int(height), 5000))
            driver.save_screenshot(str(self.shots / f"{len(self.seen) + 1:02d}-{name}-{width}.png"))
            if width == PHONE:
                self.viewport(width, 844)
                inner = driver.execute_script("return window.innerWidth")
                scroll = driver.execute_script("return document.documentElement.scrollWidth")
                assert scroll <= inner + 1, f"{name}: the page is {scroll} px wide at {inner}"
                for selector in reachable:
                    element = driver.find_element(By.CSS_SELECTOR, selector)
                    driver.execute_script("arguments[0].scrollIntoView({block:'center'})", element)
                    box = driver.execute_script(
                        "return arguments[0].getBoundingClientRect().toJSON()", element
                    )
                    assert box["left"] >= 0, (name, selector, box)
                    assert box["right"] <= inner + 1, (name, selector, box)
        self.viewport(WIDE, 1000)
        self.seen.append(name)


@pytest.fixture
def walk(browser, live_server, tmp_path, settings):
    settings.OXIDE_BATCH_VISIBLE_PARAMETERS = frozenset({"shard", "business_date"})
    settings.OXIDE_BATCH_FAILURE_URL_TEMPLATE = LOGS
    call_command("demo_workload", stdout=io.StringIO())
    User.objects.create_superuser("opal", "opal@example.invalid", "a-long-password")
    shots = tmp_path / "walk"
    shots.mkdir()
    yield Walk(browser, live_server.url, shots)
    kept = os.environ.get("OXIDE_BATCH_SCREENSHOTS")
    if kept:
        target = Path(kept) / "walk"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(shots, target)


def test_the_operator_finds_understands_and_resolves_the_stuck_job(walk):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    driver = walk.driver
    stuck = models.JobExecution.objects.get(job_name="customer_sync")
    unfinished = list(
        models.StepExecution.objects.filter(
            job_execution_id=stuck.pk, status__in=["STARTING", "STARTED", "STOPPING"]
        ).values_list("pk", flat=True)
    )
    assert unfinished, "the demo's stuck execution has a step left running"
    failed = models.JobExecution.objects.filter(status="FAILED", failure_id__isnull=False)[0]

    driver.get(f"{walk.base}/admin/login/")
    driver.find_element(By.NAME, "username").send_keys("opal")
    password = driver.find_element(By.NAME, "password")
    password.send_keys("a-long-password")
    password.send_keys(Keys.ENTER)
    driver.find_element(By.ID, "site-name")

    # 1. The dashboard lists the stuck execution; its id leads to its page.
    driver.get(f"{walk.base}/admin/oxide_batch/jobexecution/dashboard/")
    page = f"/admin/oxide_batch/jobexecution/{stuck.pk}/change/"
    assert driver.find_element(By.CSS_SELECTOR, f'a[href="{page}"]')
    walk.look("dashboard")
    driver.find_element(By.CSS_SELECTOR, f'a[href="{page}"]').click()

    # 2. Its page is a case file: eligible, how long inactive, which run.
    case = driver.find_element(By.CSS_SELECTOR, ".ob-case").text
    assert "eligible for recovery" in case
    assert re.search(r"inactive \d+ h", case), case
    shard = next(
        p["value"]
        for p in models.JobInstance.objects.get(pk=stuck.job_instance_id).identifying_parameters
        if p["name"] == "shard"
    )
    assert f"shard={shard}" in case
    walk.look("stuck-execution", reachable=(".ob-case a.ob-primary",))

    # 3. A failed execution's page leads to the failure's text in the logs.
    driver.get(f"{walk.base}/admin/oxide_batch/jobexecution/{failed.pk}/change/")
    # "Open the logs (failure N, in your log search)" (decision 316).
    links = driver.find_elements(By.PARTIAL_LINK_TEXT, "Open the logs")
    failure_line = driver.find_element(By.CSS_SELECTOR, ".ob-failure").text
    assert f"failure {failed.failure_id}" in failure_line
    assert LOGS.format(failure_id=failed.failure_id) in [a.get_attribute("href") for a in links]
    walk.look("failed-execution")

    # 3b. Abandon that failure: it is still a failure of the last 24 h, on the
    # list and on the dashboard, marked abandoned by whom (issue 25 point 1).
    driver.get(f"{walk.base}/admin/oxide_batch/jobexecution/act/abandon/?ids={failed.pk}")
    driver.find_element(By.ID, "id_reason_code").send_keys("NOT_NEEDED")
    driver.find_element(By.ID, "confirm").click()
    WebDriverWait(driver, 15).until(lambda d: "/act/" not in d.current_url)
    assert models.JobExecution.objects.get(pk=failed.pk).status == "ABANDONED"
    driver.get(f"{walk.base}/admin/oxide_batch/jobexecution/?triage=failed24h")
    row = driver.find_element(
        By.XPATH, f'//table[@id="result_list"]//a[text()="{failed.pk}"]/ancestor::tr'
    ).text
    assert "abandoned by opal" in row, row
    walk.look("failed-24h-after-abandon")
    driver.get(f"{walk.base}/admin/oxide_batch/jobexecution/dashboard/")
    failures = driver.find_element(By.ID, "content").text
    assert "No execution failed in the last 24 h" not in failures
    category = driver.find_element(
        By.CSS_SELECTOR, f'a[href*="failure_category={failed.failure_category}"]'
    )
    category.click()
    assert str(failed.pk) in driver.find_element(By.ID, "result_list").text

    # 4. Recover from the case file; the confirmation shows the proposal.
    steps = models.StepExecution.objects.filter(job_execution_id=stuck.pk)
    step_writes = {s.pk: s.last_activity_at for s in steps if s.pk in unfinished}
    activity = max([stuck.last_activity_at, *(s.last_activity_at for s in steps)])
    driver.get(f"{walk.base}{page}")
    driver.find_element(By.CSS_SELECTOR, ".ob-case a.ob-primary").click()
    assert "Confirm" in driver.title
    assert "eligible" in driver.find_element(By.ID, "content").text
    # Submitted as it comes, the page applies nothing: no choice is made for the operator.
    driver.find_element(By.ID, "confirm").click()
    assert "/act/" in driver.current_url
    assert not models.RecoveryDecision.objects.filter(job_execution_id=stuck.pk).exists()
    choose(driver, "disposition", "ABANDON")
    driver.find_element(By.ID, "id_reason_code").send_keys("NODE_LOST")
    walk.look("confirm", reachable=("#confirm", ".cancel-link"))
    driver.find_element(By.ID, "confirm").click()
    WebDriverWait(driver, 15).until(lambda d: "/act/" not in d.current_url)

    # 5. The result says the new status, what it was, and links the decision.
    decision = models.RecoveryDecision.objects.get(job_execution_id=stuck.pk)
    message = driver.find_element(By.CSS_SELECTOR, "ul.messagelist").text
    assert f"#{stuck.pk}" in message
    assert "ABANDONED" in message
    assert "was STARTED" in message
    assert f"decision #{decision.pk}" in message
    decision_url = f"/admin/oxide_batch/recoverydecision/{decision.pk}/change/"
    assert driver.find_element(By.CSS_SELECTOR, f'ul.messagelist a[href="{decision_url}"]')
    walk.look("result")

    # 6. The page now: resolved by the decision, its steps resolved, no action.
    case = driver.find_element(By.CSS_SELECTOR, ".ob-case").text
    assert f"decision #{decision.pk}" in case
    assert "Recovery\n" not in case
    assert "(running)" not in driver.find_element(By.ID, "content").text
    assert not driver.find_elements(By.CSS_SELECTOR, 'a[href*="/act/"]')
    assert sorted(decision.resolved_step_ids) == sorted(unfinished)
    statuses = set(
        models.StepExecution.objects.filter(pk__in=unfinished).values_list("status", flat=True)
    )
    assert statuses.isdisjoint({"STARTING", "STARTED", "STOPPING"})
    # The evidence stays the worker's: its last activity and the steps' last
    # runtime writes, not the decision's time; the decision is an event of
    # its own on the timeline (issue 25 point 2).
    facts = driver.find_element(By.CSS_SELECTOR, ".ob-facts").text
    assert f"{activity:%Y-%m-%d %H:%M:%S} UTC" in facts, facts
    timeline = driver.find_element(By.CSS_SELECTOR, ".ob-timeline").text
    for written in step_writes.values():
        assert f"{written:%Y-%m-%d %H:%M:%S}" in timeline, timeline
    assert "last runtime write" in timeline
    assert f"recovery decision #{decision.pk}" in timeline
    assert f"{decision.decided_at:%Y-%m-%d %H:%M:%S}" in timeline
    walk.look("after-recovery")

    # 7. The decision's page links back to the execution.
    driver.get(f"{walk.base}{decision_url}")
    assert driver.find_element(By.CSS_SELECTOR, f'a[href="{page}"]')
    walk.look("decision")

    # 8. The admin's HISTORY of the execution records the action (issue 25 point 7).
    driver.get(f"{walk.base}/admin/oxide_batch/jobexecution/{stuck.pk}/history/")
    history = driver.find_element(By.ID, "content").text
    assert "doesn't have a change history" not in history
    assert f"recovery decision #{decision.pk}" in history
    assert "NODE_LOST" in history
    walk.look("history")

    assert walk.seen == [
        "dashboard",
        "stuck-execution",
        "failed-execution",
        "failed-24h-after-abandon",
        "confirm",
        "result",
        "after-recovery",
        "decision",
        "history",
    ]
    assert len(list(walk.shots.glob("*.png"))) == 2 * len(walk.seen)
