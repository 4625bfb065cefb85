"""The console's frame: it says it is oxide_batch's console, puts the batch
metadata first, links nothing that does not exist, and has its own icon."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.templatetags.static import static
from django.test import Client
from django.urls import reverse

pytestmark = [pytest.mark.django_db, pytest.mark.standalone]

FAVICON = static("oxide_batch/favicon.svg")


class _Links(HTMLParser):
    """Every href and src of a page, with the tag that carries it."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in {"href", "src"} and value is not None:
                self.found.append((tag, value, dict(attrs)))


def links(html: str) -> list[tuple[str, str, dict[str, str | None]]]:
    parser = _Links()
    parser.feed(html)
    return parser.found


def page(client: Client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, path
    return response.content.decode()


@pytest.mark.parametrize(
    "path", ["/admin/", "/admin/oxide_batch/jobexecution/dashboard/"], ids=["index", "dashboard"]
)
def test_every_link_on_the_index_and_dashboard_leads_somewhere(admin_client, demo, path):
    """Each href/src of the page answers (static files are found): no 404, no 500."""
    targets = {urljoin(path, value) for _, value, _ in links(page(admin_client, path))}
    targets = {t.split("#")[0] for t in targets if not t.startswith(("mailto:", "javascript:"))}
    assert len(targets) > 10, targets  # the parser did read the page
    broken = []
    for target in sorted(targets - {""}):
        parts = urlsplit(target)
        assert not parts.netloc, f"{path} links off the site: {target}"
        if parts.path.startswith(settings.STATIC_URL):
            if finders.find(parts.path.removeprefix(settings.STATIC_URL)) is None:
                broken.append((target, "no such static file"))
            continue
        status = admin_client.get(target).status_code
        if status not in (200, 301, 302):
            broken.append((target, status))
    assert broken == []


def test_the_site_is_titled_oxide_batch_console(admin_client):
    text = page(admin_client, "/admin/")
    assert "<title>Batch metadata and administration | oxide_batch console</title>" in text
    assert '<div id="site-name"><a href="/admin/">oxide_batch console</a></div>' in text
    assert "Django administration" not in text
    assert "Django site admin" not in text
    login = page(Client(), "/admin/login/")
    assert "oxide_batch console" in login
    assert "Django" not in login


def test_header_links_the_dashboard_and_the_api_docs_not_a_missing_site(admin_client):
    text = page(admin_client, "/admin/")
    hrefs = {value for tag, value, _ in links(text) if tag == "a"}
    assert reverse("admin:oxide_batch_dashboard") in hrefs
    assert reverse("oxide_batch:api:docs") in hrefs
    assert "/" not in hrefs
    assert "View site" not in text


def test_batch_metadata_comes_first_on_the_index(admin_client):
    response = admin_client.get("/admin/")
    apps = response.context["app_list"]
    labels = [app["app_label"] for app in apps]
    assert labels[0] == "oxide_batch"
    assert len(labels) >= 2
    names = [app["name"].lower() for app in apps[1:]]
    assert names == sorted(names)  # the rest in Django's order
    text = response.content.decode()
    assert text.index('class="app-oxide_batch') < min(
        text.index(f'class="app-{label}') for label in labels[1:]
    )


@pytest.mark.parametrize(
    "path",
    ["/admin/", "/admin/login/", "/admin/oxide_batch/jobexecution/", "/api/v1/redoc/"],
)
def test_favicon_is_linked_and_served(admin_client, path):
    client = Client() if path == "/admin/login/" else admin_client
    icons = [
        attrs
        for tag, value, attrs in links(page(client, path))
        if tag == "link" and attrs.get("rel") == "icon"
    ]
    assert [(icon["href"], icon["type"]) for icon in icons] == [(FAVICON, "image/svg+xml")]
    found = finders.find("oxide_batch/favicon.svg")
    assert found is not None
    with open(found, encoding="utf-8") as svg:
        assert svg.read().startswith("<svg ")


def test_favicon_ico_leads_to_the_icon(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"] == FAVICON


FRAME = static("oxide_batch/frame.css")
CONSOLE = static("oxide_batch/console.css")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        # The site's frame alone on a page that is not the app's.
        ("/admin/auth/user/", [FRAME]),
        ("/admin/", [FRAME]),
        # The app's pages bring both (oxide_batch/templates/admin/oxide_batch/styles.html),
        # and the site's frame is not linked a second time.
        ("/admin/oxide_batch/", [FRAME, CONSOLE]),
        ("/admin/oxide_batch/jobexecution/", [FRAME, CONSOLE]),
        ("/admin/oxide_batch/jobexecution/dashboard/", [FRAME, CONSOLE]),
    ],
)
def test_each_page_links_the_console_stylesheets_once(admin_client, path, expected):
    sheets = [
        value
        for tag, value, attrs in links(page(admin_client, path))
        if tag == "link" and attrs.get("rel") == "stylesheet" and "oxide_batch/" in value
    ]
    assert sheets == expected


def test_the_app_index_opens_the_dashboard_and_the_api_docs(admin_client):
    hrefs = {value for tag, value, _ in links(page(admin_client, "/admin/oxide_batch/"))}
    assert reverse("admin:oxide_batch_dashboard") in hrefs
    assert reverse("oxide_batch:api:docs") in hrefs
