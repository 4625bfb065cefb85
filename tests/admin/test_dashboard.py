"""The dashboard page (issue 14 points 7 and 10): an absolute "as of" time, a
refresh the operator controls, no link inside an image, charts that scale,
tables that scroll in their own box, the Recover button in the first column,
and a bounded query count whatever is asked for."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from html.parser import HTMLParser

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from oxide_batch import models
from oxide_batch.conf import batch_settings
from oxide_batch.selectors.unresolved import unresolved_executions

pytestmark = pytest.mark.django_db

URL = "admin:oxide_batch_dashboard"
# Session and user, unresolved, per day, failures, the newest failures with
# their detail's type (issue 40), the timeline, the partition lookups and the
# grid: 11 on the demo.
QUERY_BOUND = 11

VOID = {"meta", "link", "input", "br", "img", "hr", "rect", "circle", "path", "line"}


class Tree(HTMLParser):
    """Each start tag with its attributes and the (tag, attributes) of its ancestors."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict[str, str]]] = []
        self.elements: list[tuple[str, dict[str, str], list[tuple[str, dict[str, str]]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self.elements.append((tag, attributes, list(self.stack)))
        if tag not in VOID:
            self.stack.append((tag, attributes))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}, list(self.stack)))

    def handle_endtag(self, tag: str) -> None:
        if any(open_tag == tag for open_tag, _ in self.stack):  # else a stray end tag
            while self.stack.pop()[0] != tag:
                pass


def page(client: Client, query: str = "") -> str:
    response = client.get(reverse(URL) + query)
    assert response.status_code == 200
    return response.content.decode()


def tree(html: str) -> Tree:
    parsed = Tree()
    parsed.feed(html)
    return parsed


def test_as_of_is_the_absolute_utc_time_of_the_read(admin_client, demo):
    before = datetime.now(UTC).replace(microsecond=0)
    html = page(admin_client)
    after = datetime.now(UTC)
    line = re.search(r'<p class="ob-as-of">(.*?)</p>', html, re.DOTALL)
    assert line
    found = re.search(
        r'As of <time datetime="([^"]+)">(\d\d:\d\d:\d\d) UTC</time> on (\d{4}-\d\d-\d\d)',
        line.group(1),
    )
    assert found
    moment = datetime.fromisoformat(found.group(1))
    assert before <= moment <= after
    assert found.group(2) == moment.strftime("%H:%M:%S")
    assert found.group(3) == moment.date().isoformat()
    assert "ago" not in line.group(1)


def test_a_refresh_link_and_an_opt_in_periodic_reload(admin_client, demo):
    html = page(admin_client, "?execution=3")
    assert 'http-equiv="refresh"' not in html  # WCAG 2.2.1: not without the operator
    assert '<a href="?execution=3">Refresh</a>' in html
    assert '<a href="?execution=3&amp;refresh=60">Reload every minute</a>' in html

    reloading = page(admin_client, "?execution=3&refresh=60")
    assert '<meta http-equiv="refresh" content="60">' in reloading
    assert '<a href="?execution=3">stop reloading</a>' in reloading
    assert '<input type="hidden" name="refresh" value="60">' in reloading  # the form keeps it


def test_no_link_or_focusable_element_inside_an_svg_image(admin_client, demo):
    execution = models.JobExecution.objects.get(job_name="warehouse_load", attempt=1)
    elements = tree(page(admin_client, f"?execution={execution.pk}")).elements
    images = [attrs for tag, attrs, _ in elements if tag == "svg" and attrs.get("role") == "img"]
    assert len(images) == 2  # per day, timeline
    for tag, attrs, ancestors in elements:
        in_image = any(t == "svg" and a.get("role") == "img" for t, a in ancestors)
        if in_image:
            assert tag != "a"
            assert "tabindex" not in attrs


def test_charts_scale_to_the_width_they_get(admin_client, demo):
    for tag, attrs, _ in tree(page(admin_client)).elements:
        if tag == "svg" and attrs.get("role") == "img":
            assert "ob-chart" in attrs["class"].split()  # width:100%; height:auto
            assert re.fullmatch(r"0 0 \d+(\.\d+)? \d+(\.\d+)?", attrs["viewbox"])
            assert re.fullmatch(r"max-width:\d+px", attrs["style"])


def test_every_table_scrolls_inside_its_own_box(admin_client, demo):
    execution = models.JobExecution.objects.get(job_name="warehouse_load", attempt=1)
    tables = [
        ancestors
        for tag, _, ancestors in tree(page(admin_client, f"?execution={execution.pk}")).elements
        if tag == "table" and ("div", {"id": "content", "class": "colM"}) in ancestors
    ]
    assert len(tables) == 5  # unresolved, per day, failures, newest failures, steps
    for ancestors in tables:
        assert any(t == "div" and "ob-scroll" in a.get("class", "").split() for t, a in ancestors)


def test_the_recover_button_is_the_first_cell_of_its_row(admin_client, demo):
    html = page(admin_client)
    table = html[html.index('id="ob-unresolved"') :].split("</table>", 1)[0]
    rows = re.findall(r"<tr>\s*<td>(.*?)</td>", table, re.DOTALL)
    unresolved = unresolved_executions(
        now=timezone.now(), inactive_for=batch_settings.RECOVERY_STALE_AFTER
    )
    assert unresolved
    assert len(rows) == len(unresolved)
    for cell, view in zip(rows, unresolved, strict=True):
        assert 'class="button ob-recover"' in cell
        assert f">Recover #{view.id}…</a>" in cell


@pytest.mark.parametrize("query", ["", "?refresh=60", "?execution={warehouse}", "?step={step}"])
def test_the_query_count_is_bounded_whatever_is_asked(admin_client, demo, query):
    execution = models.JobExecution.objects.get(job_name="warehouse_load", attempt=1)
    step = models.StepPartition.objects.order_by("id").values_list("step_execution_id", flat=True)[
        0
    ]
    url = reverse(URL) + query.format(warehouse=execution.pk, step=step)
    admin_client.get(url)  # fills process-wide caches (content types)
    with CaptureQueriesContext(connection) as captured:
        assert admin_client.get(url).status_code == 200
    assert len(captured.captured_queries) <= QUERY_BOUND


def test_the_timeline_of_an_unknown_execution_never_reads_running(admin_client, demo):
    """A step left STARTED under an UNKNOWN execution: its outcome is unknown,
    it is not running (the same rule as the execution page's steps table)."""
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    assert models.StepExecution.objects.filter(
        job_execution_id=unknown.pk, ended_at__isnull=True
    ).exists()
    html = admin_client.get(
        reverse("admin:oxide_batch_dashboard") + f"?execution={unknown.pk}"
    ).content.decode()
    timeline = html.split("Step timeline of execution", 1)[1].split("Partition grid", 1)[0]
    assert "running" not in timeline
    assert "so far" not in timeline
    assert "(outcome unknown)" in timeline


@pytest.mark.parametrize("query", ["?execution=%C2%B2", "?step=99999999999999999999999"])
def test_odd_ids_on_the_dashboard_are_no_500(admin_client, demo, query):
    assert admin_client.get(reverse("admin:oxide_batch_dashboard") + query).status_code == 200


def test_the_unresolved_caption_names_expired_leases(admin_client, demo, settings):
    """The list holds claimed executions past their owner's lease as well as
    unowned ones past the stale threshold: its caption says both (issue 39)."""
    settings.OXIDE_BATCH_LEASE_TTL = "90s"
    html = page(admin_client)
    caption = html[html.index('id="ob-unresolved"') :].split("</p>", 1)[0]
    assert "past its owner's lease (1m 30s, expired leases)" in caption
    assert "longer than the stale threshold (15m 00s)" in caption
    assert "UNKNOWN" in caption
