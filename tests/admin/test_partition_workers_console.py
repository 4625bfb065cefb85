"""The step page of a partitioned step run by claimed remote workers (issue
43): each partition with its retries, its current worker (host, pid) and its
lease, and the earlier workers a claim replaced — in a constant number of
queries whatever the plan and its workers."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.console_support_i43 import remote_run

pytestmark = pytest.mark.django_db


def cells(text: str, key: str) -> str:
    """The row of partition ``key`` in the page's partitions table."""
    start = text.index(f">{key}</a>")
    return text[start : text.index("</tr>", start)]


def test_each_partition_shows_its_workers_retries_and_lease(admin_client) -> None:
    run = remote_run()
    page = admin_client.get(reverse("admin:oxide_batch_stepexecution_change", args=[run.parent_id]))
    assert page.status_code == 200
    text = page.content.decode()
    for header in ("retries", "worker", "lease", "earlier workers"):
        assert f'<th scope="col">{header}</th>' in text
    a = cells(text, "a")
    assert "on worker-2, pid 2002" in a  # its current worker
    assert "on worker-1, pid 1001" in a  # the lost one, earlier
    assert "FAILED" in a
    assert "<td>1</td>" in a  # one retry
    assert "expires" in a
    assert "(in " in a
    b = cells(text, "b")
    assert "on worker-3, pid 3003" in b
    assert "<td>0</td>" in b
    assert "worker-1" not in b
    c = cells(text, "c")
    assert "not assigned" in c
    assert "expires" not in c
    # The lost worker's own page says it failed.
    lost = admin_client.get(
        reverse("admin:oxide_batch_stepexecution_change", args=[run.lost_worker_id])
    ).content.decode()
    assert "STALE_RECOVERED" in lost


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured.captured_queries)


def test_the_step_page_reads_the_workers_in_constant_queries(admin_client) -> None:
    small = remote_run("small")
    large = remote_run("large", extra_partitions=6)
    urls = [
        reverse("admin:oxide_batch_stepexecution_change", args=[run.parent_id])
        for run in (small, large)
    ]
    admin_client.get(urls[0])  # process-wide caches first
    assert _queries(admin_client, urls[0]) == _queries(admin_client, urls[1])
