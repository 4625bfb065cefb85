"""A real server for tests over HTTP: gunicorn serving the app on the
PostgreSQL test database (or any database URL), started and stopped by a
context manager. Used by the HTTP races, the fault-injection tests and the soak.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib import error as urlerror
from urllib import request as urlrequest
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.urls import reverse

from oxide_batch.roles import ensure_roles
from tests.helpers import api_token

User = get_user_model()

ROOT = Path(__file__).resolve().parents[1]
GUNICORN = Path(sys.executable).with_name("gunicorn")
START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def database_url(
    settings_dict: Mapping[str, Any] | None = None,
    *,
    host: str | None = None,
    port: int | str | None = None,
) -> str:
    """The test database (pytest-django's) as a URL the settings read;
    ``host``/``port`` replace the real ones (e.g. a fault-injection proxy)."""
    db = settings_dict if settings_dict is not None else connection.settings_dict
    user = quote(db["USER"] or "", safe="")
    password = quote(db["PASSWORD"] or "", safe="")
    credentials = f"{user}:{password}@" if password else f"{user}@"
    # A socket directory is %2F-quoted.
    host_part = quote(host if host is not None else (db["HOST"] or "localhost"), safe="")
    chosen_port = port if port is not None else db["PORT"]
    port_part = f":{chosen_port}" if chosen_port else ""
    return f"postgres://{credentials}{host_part}{port_part}/{quote(db['NAME'], safe='')}"


def answers(url: str) -> bool:
    try:
        with urlrequest.urlopen(url + "/healthz", timeout=2):
            return True
    except urlerror.HTTPError:
        return True  # something answered
    except OSError:
        return False


@contextmanager
def fresh_database(prefix: str) -> Iterator[str]:
    """A database of its own on the test cluster (scripts/with-postgres's
    ``DATABASE_URL``), as a URL; dropped afterwards."""
    cluster = os.environ["DATABASE_URL"]
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(cluster)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(cluster, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_until_answering(
    url: str, process: subprocess.Popen[bytes], log: Path, timeout: float, what: str
) -> None:
    """Until ``url`` answers (:func:`answers`); the log's tail if ``process``
    exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not answers(url):
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{what} did not start:\n{log.read_text()[-6000:]}")
        time.sleep(0.1)


def stop_process_group(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the process's group (started with ``start_new_session``),
    then SIGKILL after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def gunicorn(
    *,
    database: str | None = None,
    workers: int = 2,
    threads: int = 4,
    environment: Mapping[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
) -> Iterator[str]:
    """Serve the app with gunicorn on a free port; yield its base URL.

    ``database`` is a DATABASE_URL (default: the test database, directly).
    ``environment`` adds or overrides settings (e.g. throttle rates)."""
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DATABASE_URL": database or database_url(),
        "SECRET_KEY": settings.SECRET_KEY,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DEBUG": "0",
        "LOG_LEVEL": "WARNING",
        "OXIDE_BATCH_EVENTS_LEVEL": "WARNING",
        **(environment or {}),
    }
    command = [
        str(GUNICORN),
        "project.wsgi",
        "-w",
        str(workers),
        "--threads",
        str(threads),
        "-b",
        f"127.0.0.1:{port}",
        "--graceful-timeout",
        "5",
        *extra_args,
    ]
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while not answers(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    output = log.read().decode(errors="replace")
                    pytest.fail(f"gunicorn did not start:\n{output}")
                time.sleep(0.1)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


def token_for(username: str, group: str) -> str:
    """A user of ``group`` with a token, committed (a server process reads it)."""
    ensure_roles()  # transactional tests flush the groups
    user = User.objects.create_user(username)
    user.groups.add(Group.objects.get(name=group))
    return api_token(user)


def api_base_url(live_server: Any) -> str:
    """The base URL a runtime is given (README): the live server, plus the
    prefix the project mounts oxide_batch.urls under (none in the service,
    ``/batch`` in the host project of tests/host)."""
    root = reverse("oxide_batch:api:descriptor").removesuffix("/api/v1/descriptor")
    return str(live_server.url) + root
