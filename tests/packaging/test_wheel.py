"""The wheel is the product (issue 17): what a team gets from ``pip install``
of the built wheel — not the editable checkout — is a working app.

The repository's tracked files are copied out and built (sdist and wheel);
both pass ``twine check --strict``, and the wheel holds every template, static
file and migration of the source tree and nothing of the service or its tests.
The wheel is installed with its dependencies into a fresh virtualenv, and the
host project (tests/host/hostsite, copied out too) runs from it with nothing of
the repository on its path: migrate, collectstatic, check, the demo workload, a
superuser and an API token, then gunicorn, whose probes, API, docs and console
pages answer — the console styled, every stylesheet it links served.

One module-scoped chain of fixtures (build, install, database, host, server),
all of it in one temporary directory and a database of its own, removed
afterwards; PostgreSQL pass only, so it runs once per ``scripts/test``."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.cookiejar import CookieJar
from pathlib import Path, PurePosixPath
from urllib import error as urlerror
from urllib import request as urlrequest
from urllib.parse import urlencode, urljoin

import pytest

from tests.live import (
    START_TIMEOUT,
    free_port,
    fresh_database,
    stop_process_group,
    wait_until_answering,
)
from tests.test_production_serving import assets

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
HOST_PROJECT = ROOT / "tests" / "host" / "hostsite"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DISTRIBUTION = PROJECT["name"]
VERSION = PROJECT["version"]
PACKAGE = "oxide_batch"
# The package data a page needs: a missing template is a 500, a missing
# stylesheet an unstyled console.
DATA_DIRS = (f"{PACKAGE}/templates/", f"{PACKAGE}/static/")
NOT_SHIPPED = ("project/", "tests/", "scripts/")
COMMAND_TIMEOUT = 180
ADMIN = "/backoffice/"
APP_ADMIN = f"{ADMIN}{PACKAGE}/"
CONSOLE_CSS = f"{PACKAGE}/console.css"
SUPERUSER = {"username": "wheel-admin", "password": secrets.token_urlsafe(16)}


# -- running things ----------------------------------------------------------


def run(
    command: list[str | Path], *, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` to completion; fail the test with its output if it fails."""
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        shown = " ".join(str(part) for part in command)
        pytest.fail(
            f"{shown} exited {done.returncode}\n"
            f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
        )
    return done


def repository_free_environ() -> dict[str, str]:
    """This process's environment without what would put the checkout (or its
    settings) in a child's way; pip's and the harness's variables stay."""
    return {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"} and not key.startswith("DJANGO_")
    }


# -- 1. build ---------------------------------------------------------------


@dataclass(frozen=True)
class Dists:
    wheel: Path
    sdist: Path
    tracked: frozenset[str]  # the source tree that was built (git ls-files)

    def wheel_names(self) -> set[str]:
        with zipfile.ZipFile(self.wheel) as archive:
            return {name for name in archive.namelist() if not name.endswith("/")}

    def sdist_names(self) -> set[str]:
        """Paths inside the sdist's top directory (``oxide_batch-0.2.0/``)."""
        with tarfile.open(self.sdist) as archive:
            return {
                str(PurePosixPath(*PurePosixPath(member.name).parts[1:]))
                for member in archive.getmembers()
                if member.isfile()
            }

    def expected_data(self) -> set[str]:
        return {name for name in self.tracked if name.startswith(DATA_DIRS)}


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    """Everything the module makes on disk: removed at the end, pass or fail."""
    with tempfile.TemporaryDirectory(prefix="oxide-wheel-") as name:
        yield Path(name)


@pytest.fixture(scope="module")
def dists(workdir: Path) -> Dists:
    """The sdist and the wheel, built by ``python -m build`` from a copy of the
    tracked files (their working-tree contents): the build writes its build/
    and egg-info there, never into the repository. The build is isolated:
    setuptools>=69 comes from the package index (the venv's is older)."""
    listed = run(["git", "ls-files", "-z"], cwd=ROOT).stdout.split("\0")
    # A tracked file deleted in the working tree is not part of it.
    tracked = frozenset(name for name in listed if name and (ROOT / name).is_file())
    source = workdir / "source"
    for name in tracked:
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    out = workdir / "dist"
    run(
        [sys.executable, "-m", "build", "--outdir", out, source],
        cwd=source,
        env=repository_free_environ(),
    )
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return Dists(wheel=wheel, sdist=sdist, tracked=tracked)


def test_both_distributions_pass_twine_check_strict(dists):
    run(
        [sys.executable, "-m", "twine", "check", "--strict", dists.wheel, dists.sdist],
        cwd=dists.wheel.parent,
    )


def test_the_wheel_holds_every_template_static_file_and_migration(dists):
    names = dists.wheel_names()
    migrations = {
        name
        for name in dists.tracked
        if name.startswith(f"{PACKAGE}/migrations/") and name.endswith(".py")
    }
    assert dists.expected_data(), "the source tree has no templates or static files?"
    assert migrations
    assert sorted(dists.expected_data() - names) == []
    assert sorted(migrations - names) == []
    assert f"{PACKAGE}/py.typed" in names


def test_the_wheel_holds_the_app_alone(dists):
    names = dists.wheel_names()
    assert sorted(name for name in names if name.startswith(NOT_SHIPPED)) == []
    top = {name.split("/", 1)[0] for name in names}
    assert top == {PACKAGE, f"{PACKAGE}-{VERSION}.dist-info"}


def test_the_sdist_holds_the_same_templates_and_static_files(dists):
    assert sorted(dists.expected_data() - dists.sdist_names()) == []


# -- 2. install ---------------------------------------------------------------


@dataclass(frozen=True)
class Venv:
    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"


@pytest.fixture(scope="module")
def venv(workdir: Path, dists: Dists) -> Venv:
    """A fresh virtualenv with the wheel file installed (not editable), its
    dependencies and the host project's, from the index pip is configured with (the cache is warm).
    The interpreter is the tests' own: the one requires-python accepts."""
    made = Venv(workdir / "venv")
    run([sys.executable, "-m", "venv", made.root], cwd=workdir)
    run(
        # The host project's own requirements beside the app: PostgreSQL
        # (the app's extra), its settings' dj-database-url, its server and
        # its static files.
        [
            made.python,
            "-m",
            "pip",
            "install",
            "--no-input",
            "--quiet",
            f"{dists.wheel}[postgresql]",
            "dj-database-url",
            "gunicorn",
            "whitenoise",
        ],
        cwd=workdir,
        env=repository_free_environ(),
    )
    return made


# -- 3. the host project -------------------------------------------------------


@dataclass(frozen=True)
class Host:
    venv: Venv
    cwd: Path  # holds the package hostsite
    env: dict[str, str]

    def django(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run([self.venv.python, "-m", "django", *args], cwd=self.cwd, env=self.env)


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    """A database of its own on the test cluster (scripts/with-postgres's)."""
    with fresh_database("wheel") as url:
        yield url


def host_environment(venv: Venv, cwd: Path, database: str, workdir: Path) -> dict[str, str]:
    """Built from nothing, so no variable of this process (the checkout on
    PYTHONPATH, project.settings) reaches the host project."""
    return {
        "PATH": os.pathsep.join([str(venv.bin), "/usr/local/bin", "/usr/bin", "/bin"]),
        # gunicorn (>= 27) puts its control socket under $HOME/.gunicorn: a home
        # of its own keeps this server's apart from other workers' servers.
        "HOME": str(workdir / "home"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(cwd),
        "DJANGO_SETTINGS_MODULE": "hostsite.settings",
        "DATABASE_URL": database,
        "HOST_STATIC_ROOT": str(workdir / "static"),
        "DJANGO_SUPERUSER_USERNAME": SUPERUSER["username"],
        "DJANGO_SUPERUSER_PASSWORD": SUPERUSER["password"],
        "DJANGO_SUPERUSER_EMAIL": "wheel-admin@example.com",
    }


@pytest.fixture(scope="module")
def host(workdir: Path, venv: Venv, database: str) -> Host:
    """The host project set up from the installed wheel as the README tells a
    team to: migrate, collectstatic, check, then the demo data and a superuser."""
    cwd = workdir / "host"
    shutil.copytree(
        HOST_PROJECT,
        cwd / "hostsite",
        ignore=shutil.ignore_patterns("__pycache__", "*.sqlite3*", "collected-static"),
    )
    (workdir / "home").mkdir()
    made = Host(venv=venv, cwd=cwd, env=host_environment(venv, cwd, database, workdir))
    made.django("migrate", "--noinput")
    made.django("collectstatic", "--noinput")
    made.django("check", "--fail-level", "ERROR")
    made.django("demo_workload")
    made.django("createsuperuser", "--noinput")
    return made


@pytest.fixture(scope="module")
def token(host: Host) -> str:
    """A runtime's API token, as an operator issues one."""
    issued = host.django(
        "batch_token",
        "create",
        "--user",
        "wheel-runtime",
        "--name",
        "wheel-test",
        "--group",
        "batch-runtime",
        "--create-user",
        "--json",
    )
    return str(json.loads(issued.stdout)["token"])


INSTALLED = """
import importlib.metadata, json, sysconfig
import oxide_batch
distribution = importlib.metadata.distribution("oxide-batch")
print(json.dumps({
    "file": oxide_batch.__file__,
    "purelib": sysconfig.get_paths()["purelib"],
    "version": importlib.metadata.version("oxide-batch"),
    "direct_url": json.loads(distribution.read_text("direct_url.json") or "{}"),
}))
"""


def test_the_host_imports_the_installed_wheel_not_the_checkout(host):
    found = json.loads(run([host.venv.python, "-c", INSTALLED], cwd=host.cwd, env=host.env).stdout)
    module = Path(found["file"]).resolve()
    assert module.is_relative_to(Path(found["purelib"]).resolve())
    assert module.is_relative_to(host.venv.root.resolve())
    assert not module.is_relative_to(ROOT)
    assert found["version"] == VERSION
    # pip's record of a wheel file, where an editable install has dir_info.
    assert "archive_info" in found["direct_url"], found["direct_url"]


# -- 4. the server -------------------------------------------------------------


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "")

    def text(self) -> str:
        return self.body.decode()


@dataclass(frozen=True)
class Client:
    """A urllib opener on the server; ``session`` keeps cookies."""

    base: str
    opener: urlrequest.OpenerDirector

    @classmethod
    def anonymous(cls, base: str) -> Client:
        return cls(base, urlrequest.build_opener())

    @classmethod
    def session(cls, base: str) -> Client:
        return cls(base, urlrequest.build_opener(urlrequest.HTTPCookieProcessor(CookieJar())))

    def get(self, path: str, headers: Mapping[str, str] | None = None) -> Response:
        return self._send(urlrequest.Request(urljoin(self.base, path), headers=dict(headers or {})))

    def post_form(self, path: str, fields: Mapping[str, str]) -> Response:
        body = urlencode(fields).encode()
        return self._send(urlrequest.Request(urljoin(self.base, path), data=body, method="POST"))

    def _send(self, call: urlrequest.Request) -> Response:
        try:
            with self.opener.open(call, timeout=20) as answer:
                return Response(answer.status, dict(answer.headers.items()), answer.read())
        except urlerror.HTTPError as refused:
            return Response(refused.code, dict(refused.headers.items()), refused.read())


@pytest.fixture(scope="module")
def server(host: Host, workdir: Path) -> Iterator[str]:
    """gunicorn from the new virtualenv serving the host project on a free port."""
    port = free_port()
    log = workdir / "gunicorn.log"
    command = [
        host.venv.bin / "gunicorn",
        "hostsite.wsgi",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "2",
        "--graceful-timeout",
        "5",
    ]
    with log.open("wb") as output:
        # A session of its own: the whole group (master and workers) is stopped.
        process = subprocess.Popen(
            [str(part) for part in command],
            cwd=host.cwd,
            env=host.env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(f"{base}/batch", process, log, START_TIMEOUT, "gunicorn")
        yield base
    finally:
        stop_process_group(process, grace=15)


def test_the_probe_answers(server):
    assert Client.anonymous(server).get("/batch/healthz").status == 200


def test_the_descriptor_reports_the_installed_version(server, token):
    answer = Client.anonymous(server).get(
        "/batch/api/v1/descriptor", {"Authorization": f"Token {token}"}
    )
    assert answer.status == 200, answer.body[:500]
    assert answer.content_type.startswith("application/json")
    assert json.loads(answer.body)["version"] == VERSION


def test_the_api_refuses_an_anonymous_caller_with_a_problem(server):
    answer = Client.anonymous(server).get("/batch/api/v1/descriptor")
    assert answer.status == 401
    assert answer.content_type.startswith("application/problem+json")


def test_the_api_docs_and_their_swagger_ui_bundle_are_served(server):
    client = Client.anonymous(server)
    page = client.get("/batch/api/v1/docs/")
    assert page.status == 200, page.body[:500]
    bundles = [src for src in assets(page.body).scripts if "swagger-ui-bundle" in src]
    assert bundles, assets(page.body).scripts
    for src in bundles:
        url = urljoin(server + "/", src)
        assert url.startswith(server + "/"), f"{src}: not served by the app"
        assert client.get(url).status == 200, url


# -- 5. the console ------------------------------------------------------------

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def logged_in(server: str) -> Client:
    client = Client.session(server)
    form = client.get(f"{ADMIN}login/")
    assert form.status == 200
    match = CSRF.search(form.text())
    assert match, "no CSRF token in the login form"
    done = client.post_form(
        f"{ADMIN}login/?next={ADMIN}",
        {**SUPERUSER, "csrfmiddlewaretoken": match.group(1), "next": ADMIN},
    )
    # Followed to the index: the login form again would mean refused.
    assert done.status == 200
    assert 'id="login-form"' not in done.text(), "the superuser's login was refused"
    return client


def links(page: Response, pattern: re.Pattern[str]) -> list[str]:
    """The page's ``href``s that match ``pattern`` (document order, once each)."""
    found = re.findall(r'href="([^"]+)"', page.text())
    return list(dict.fromkeys(href for href in found if pattern.fullmatch(href)))


def assert_styled_app_page(client: Client, path: str) -> Response:
    page = client.get(path)
    assert page.status == 200, (path, page.body[:500])
    stylesheets = assets(page.body).stylesheets
    assert any(href.endswith(CONSOLE_CSS) for href in stylesheets), (path, stylesheets)
    return page


def test_every_console_page_renders_styled(server):
    client = logged_in(server)
    index = client.get(ADMIN)
    assert index.status == 200

    app_index = assert_styled_app_page(client, APP_ADMIN)
    changelists = links(app_index, re.compile(rf"{re.escape(APP_ADMIN)}\w+/"))
    executions = f"{APP_ADMIN}jobexecution/"
    assert executions in changelists, changelists
    for path in changelists:
        assert_styled_app_page(client, path)

    listed = client.get(executions)
    change_pages = links(listed, re.compile(rf"{re.escape(executions)}\d+/change/"))
    assert change_pages, "no job execution in the changelist (demo_workload recorded some)"
    assert_styled_app_page(client, change_pages[0])

    dashboard = assert_styled_app_page(client, f"{executions}dashboard/")
    stylesheets = assets(dashboard.body).stylesheets
    for href in stylesheets:
        sheet = client.get(href)
        assert sheet.status == 200, href
        assert sheet.content_type.startswith("text/css"), (href, sheet.content_type)
