"""The API docs (Swagger UI, Redoc) load in a browser that cannot resolve any
host but this one, render the schema, and fetch nothing elsewhere: every
resource the page loaded is same-origin (or a data:/blob: URL of the page), and
every request it started for another origin was refused by the page's
Content-Security-Policy before anything was sent — Redoc's sidebar logo
(``cdn.redoc.ly``) is the one such request its bundle makes.

PostgreSQL pass only, like every browser test."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests.browser.network import requests_started, resources_loaded

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# page → where the schema's title is drawn
DOCS = {"/api/v1/docs/": ".info .title", "/api/v1/redoc/": ".api-content h1"}


def same_origin(url: str, origin: str) -> bool:
    parts, home = urlsplit(url), urlsplit(origin)
    if parts.scheme in {"data", "blob"}:
        return True
    return (parts.scheme, parts.netloc) == (home.scheme, home.netloc)


@pytest.mark.parametrize("path", list(DOCS))
def test_docs_page_fetches_nothing_off_the_machine(path, browser, live_server):
    from selenium.webdriver.common.by import By

    browser.get(f"{live_server.url}{path}")
    assert "oxide_batch API" in browser.find_element(By.CSS_SELECTOR, DOCS[path]).text

    loaded = resources_loaded(browser)
    assert any(url.endswith(".js") for url in loaded), loaded  # timing did see the bundle
    assert [url for url in loaded if not same_origin(url, live_server.url)] == []

    started = requests_started(browser)
    assert any(r.url.endswith(".js") for r in started), started  # the log did see the page
    sent_elsewhere = [
        r.url for r in started if not same_origin(r.url, live_server.url) and r.blocked != "csp"
    ]
    assert sent_elsewhere == [], f"{path} sent requests off the machine: {sent_elsewhere}"
