"""The production start command over HTTP: ``scripts/serve`` (migrate,
collectstatic, gunicorn with gunicorn.conf.py) on a fresh PostgreSQL database
with DEBUG off serves the console styled — every stylesheet and script its
pages link, from whitenoise, compressed and cached for a year under their
hashed names — logs each request with the id it answered, and refuses to start
without its settings.

One server for the module (collectstatic is most of its start-up), on a
database of its own on the test cluster, dropped afterwards."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib import error as urlerror
from urllib import request as urlrequest
from urllib.parse import urlsplit

import pytest

from tests.live import free_port, fresh_database, stop_process_group, wait_until_answering

ROOT = Path(__file__).resolve().parents[1]
SERVE = ROOT / "scripts" / "serve"
START_TIMEOUT = 120.0  # migrate from nothing, then collectstatic
YEAR = 365 * 24 * 3600
HASHED = re.compile(r"\.[0-9a-f]{12}\.\w+$")  # ManifestStaticFilesStorage's names


@dataclass(frozen=True)
class Server:
    url: str
    log: Path

    def get(self, path: str, headers: dict[str, str] | None = None) -> Response:
        call = urlrequest.Request(self.url + path, headers=headers or {})
        try:
            with urlrequest.urlopen(call, timeout=10) as answer:
                return Response(answer.status, dict(answer.headers.items()), answer.read())
        except urlerror.HTTPError as refused:
            return Response(refused.code, dict(refused.headers.items()), refused.read())

    def access_log_line(self, marker: str) -> str:
        """The access-log line that contains ``marker`` (gunicorn writes it once
        the response is sent)."""
        deadline = time.monotonic() + 5
        while True:
            lines = [line for line in self.log.read_text().splitlines() if marker in line]
            if lines or time.monotonic() > deadline:
                assert len(lines) == 1, lines
                return lines[0]
            time.sleep(0.05)


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


class _Assets(HTMLParser):
    """The stylesheets (``<link rel=stylesheet href>``) and scripts (``<script src>``)."""

    def __init__(self) -> None:
        super().__init__()
        self.stylesheets: list[str] = []
        self.scripts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "link" and found.get("rel") == "stylesheet" and found.get("href"):
            self.stylesheets.append(str(found["href"]))
        if tag == "script" and found.get("src"):
            self.scripts.append(str(found["src"]))


def assets(page: bytes) -> _Assets:
    parser = _Assets()
    parser.feed(page.decode())
    return parser


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    """A database of its own on the test cluster: the server migrates it from nothing."""
    with fresh_database("oxb_serve") as url:
        yield url


@pytest.fixture(scope="module")
def server(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``scripts/serve`` with DEBUG off, two workers, on a free port."""
    work = tmp_path_factory.mktemp("serve")
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database,
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DEBUG": "false",
        "ALLOWED_HOSTS": "127.0.0.1",
        "ADDRESS": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "2",
        "STATIC_ROOT": str(work / "static"),
        "PROMETHEUS_MULTIPROC_DIR": str(work / "metrics"),
        "PYTHON": sys.executable,
        "OXIDE_BATCH_EVENTS_LEVEL": "WARNING",
    }
    log = work / "serve.log"
    with log.open("wb") as output:
        # A session of its own: stopping it stops migrate or collectstatic too,
        # should the test give up before the shell has become gunicorn.
        process = subprocess.Popen(
            [str(SERVE)],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    running = Server(f"http://127.0.0.1:{port}", log)
    try:
        wait_until_answering(running.url, process, log, START_TIMEOUT, "scripts/serve")
        yield running
    finally:
        stop_process_group(process, grace=30)


def assert_served_for_a_year(server: Server, url: str, content_type: str) -> None:
    path = urlsplit(url).path
    assert HASHED.search(path), f"{url} is not a hashed name"
    answer = server.get(path, {"Accept-Encoding": "gzip"})
    assert answer.status == 200, url
    assert content_type in answer.headers["Content-Type"], (url, answer.headers)
    assert answer.headers.get("Content-Encoding") == "gzip", url
    cache = answer.headers["Cache-Control"]
    directives = dict(d.strip().partition("=")[::2] for d in cache.split(","))
    assert int(directives["max-age"]) >= YEAR, (url, cache)
    assert "immutable" in directives, (url, cache)


@pytest.mark.postgres
@pytest.mark.parametrize("path", ["/admin/login/", "/api/v1/docs/", "/api/v1/redoc/"])
def test_every_stylesheet_and_script_of_the_page_is_served(server, path):
    page = server.get(path)
    assert page.status == 200, page.body[:500]
    linked = assets(page.body)
    assert linked.stylesheets
    assert linked.scripts
    for url in linked.stylesheets:
        assert_served_for_a_year(server, url, "text/css")
    for url in linked.scripts:
        assert_served_for_a_year(server, url, "javascript")


@pytest.mark.postgres
def test_the_console_styles_are_its_own_and_the_admins(server):
    linked = assets(server.get("/admin/login/").body)
    names = {HASHED.sub("", urlsplit(url).path) for url in linked.stylesheets}
    assert {
        "/static/admin/css/base",
        "/static/admin/css/login",
        "/static/oxide_batch/frame",
    } <= names


@pytest.mark.postgres
def test_the_access_log_line_carries_the_request_id_of_the_response(server):
    marker = uuid.uuid4().hex
    answer = server.get(f"/healthz?probe={marker}")
    assert answer.status == 200
    request_id = answer.headers["X-Request-ID"]
    line = server.access_log_line(marker)
    assert line.endswith(f"request_id={request_id}")
    assert f'"GET /healthz?probe={marker} HTTP/1.1" 200 ' in line

    # A static file (answered by whitenoise, inside the request-id middleware)
    # and an id the client sent.
    stylesheet = assets(server.get("/admin/login/").body).stylesheets[0]
    sent = f"probe-{marker}"
    answer = server.get(urlsplit(stylesheet).path, {"X-Request-ID": sent})
    assert answer.headers["X-Request-ID"] == sent
    assert server.access_log_line(f"request_id={sent}").startswith("127.0.0.1 ")


@pytest.mark.postgres
@pytest.mark.parametrize(
    "path", ["/static/oxide_batch/missing.css", "/static/admin/css/base.0123456789ab.css"]
)
def test_a_missing_static_file_is_not_found(server, path):
    answer = server.get(path)
    assert answer.status == 404
    assert answer.headers["X-Request-ID"]


@pytest.mark.postgres
def test_metrics_add_up_the_requests_of_every_worker(server):
    """Two workers, one exposition (PROMETHEUS_MULTIPROC_DIR, set by scripts/serve);
    a static file is counted under the route ``static``."""
    for _ in range(6):
        assert server.get("/readyz").status == 200
    stylesheet = assets(server.get("/admin/login/").body).stylesheets[0]
    assert server.get(urlsplit(stylesheet).path).status == 200
    exposition = server.get("/metrics").body.decode()

    def count(route: str, status_class: str) -> float:
        (found,) = re.findall(
            rf'^oxide_batch_api_requests_total\{{method="GET",route="{route}",'
            rf'status_class="{status_class}"\}} (\S+)$',
            exposition,
            re.MULTILINE,
        )
        return float(found)

    assert count("readyz", "2xx") == 6
    assert count("static", "2xx") >= 1


@pytest.mark.postgres
def test_scripts_serve_runs_the_lease_watchdog_beside_gunicorn(server):
    """OXIDE_BATCH_WATCHDOG is on by default: the master runs batch_watchdog, whose
    passes reach the service's /metrics (the shared PROMETHEUS_MULTIPROC_DIR)."""

    def passes() -> float:
        exposition = server.get("/metrics").body.decode()
        found = re.findall(
            r'^oxide_batch_watchdog_passes_total\{outcome="(?:holding|ok)"\} (\S+)$',
            exposition,
            re.MULTILINE,
        )
        return sum(float(value) for value in found)

    deadline = time.monotonic() + 30
    # The watchdog's own first line (the master's lines may be written later).
    while passes() < 1 or "batch_watchdog as watchdog@" not in server.log.read_text():
        assert time.monotonic() < deadline, server.log.read_text()[-4000:]
        time.sleep(0.2)


@pytest.mark.postgres
def test_scripts_serve_runs_the_notifier_beside_gunicorn_and_the_watchdog(server):
    """OXIDE_BATCH_NOTIFIER is on by default: the master runs batch_notify as a
    third process of its own (decision 282), alive while the server serves."""
    started = re.compile(r"batch_notify started \(pid (\d+)\)")
    deadline = time.monotonic() + 30
    while not started.search(server.log.read_text()):
        assert time.monotonic() < deadline, server.log.read_text()[-4000:]
        time.sleep(0.2)
    pid = int(started.search(server.log.read_text()).group(1))
    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"batch_notify" in command
    watchdog = re.search(r"batch_watchdog started \(pid (\d+)\)", server.log.read_text())
    assert watchdog is not None
    assert int(watchdog.group(1)) != pid
    time.sleep(1)  # not a process that exits at once, restarted in a loop
    assert Path(f"/proc/{pid}").exists(), server.log.read_text()[-4000:]
    assert "batch_notify exited" not in server.log.read_text()


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({}, "set DATABASE_URL"),
        ({"DATABASE_URL": "sqlite:///db.sqlite3"}, "DATABASE_URL must be a PostgreSQL URL"),
        ({"DATABASE_URL": "postgres://localhost/x"}, "set SECRET_KEY"),
        (
            {"DATABASE_URL": "postgres://localhost/x", "SECRET_KEY": "k" * 50, "DEBUG": " True"},
            "DEBUG is on",
        ),
    ],
)
def test_scripts_serve_refuses_to_start_without_its_settings(environment, message):
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    result = subprocess.run(
        [str(SERVE)],
        cwd=ROOT,
        env={**env, **environment},
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"scripts/serve: {message}"), result.stderr
