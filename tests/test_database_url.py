"""``DATABASE_URL`` with several hosts, as libpq reads it (issue 26 point 1):
the service starts on ``postgres://u@h1:5432,h2:5433/db?target_session_attrs=
read-write`` and reaches the server that answers, wherever it is in the list."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from oxide_batch.db.url import parse_database_url
from tests.live import database_url, free_port

ROOT = Path(__file__).resolve().parents[1]


def test_a_host_list_becomes_libpqs_host_and_port_lists():
    config = parse_database_url(
        "postgres://u:p%40ss@db-1.example:5432,db-2.example:5433/batch"
        "?target_session_attrs=read-write&connect_timeout=3"
    )
    assert (config["HOST"], config["PORT"]) == ("db-1.example,db-2.example", "5432,5433")
    assert (config["USER"], config["PASSWORD"], config["NAME"]) == ("u", "p@ss", "batch")
    assert config["OPTIONS"] == {"target_session_attrs": "read-write", "connect_timeout": 3}
    assert config["ENGINE"] == "django.db.backends.postgresql"


@pytest.mark.parametrize(
    ("netloc", "host", "port"),
    [
        ("h1,h2", "h1,h2", ""),  # no port: libpq's default for each
        ("h1:6000,h2", "h1,h2", "6000,5432"),  # one per host, as libpq wants
        ("[::1]:6000,h2:6001", "::1,h2", "6000,6001"),  # IPv6 without brackets
        ("h1:6000", "h1", 6000),  # one host: dj-database-url's own reading
    ],
)
def test_hosts_and_ports_as_libpq_reads_them(netloc, host, port):
    config = parse_database_url(f"postgres://u@{netloc}/db")
    assert (config["HOST"], config["PORT"]) == (host, port)


@pytest.mark.parametrize(
    ("netloc", "says"),
    [
        ("h1,,h2", "an empty host"),
        ("h1:x,h2", "'h1:x' in the host list is not host[:port]"),
        ("h1:99999,h2", "'h1:99999' in the host list is not host[:port]"),
        ("h1,:5432", "':5432' in the host list is not host[:port]"),
    ],
)
def test_a_bad_host_list_is_a_configuration_error_naming_the_entry(netloc, says):
    with pytest.raises(ImproperlyConfigured, match=re.escape(says)):
        parse_database_url(f"postgres://u@{netloc}/db")


def test_a_url_nobody_can_read_is_a_configuration_error():
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL cannot be read"):
        parse_database_url("postgres://u@h1:notaport/db")


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_service_starts_and_reaches_the_server_that_answers():
    """The first host refuses connections (nothing listens there), the second is
    the test cluster: ``manage.py`` starts, connects to the second and reads."""
    good = database_url()
    single = good.removeprefix("postgres://")
    credentials, _, rest = single.partition("@")
    address, _, name = rest.partition("/")
    url = (
        f"postgres://{credentials}@127.0.0.1:{free_port()},{address}/{name}"
        "?target_session_attrs=read-write&connect_timeout=3"
    )
    program = (
        "from django.db import connection\n"
        "with connection.cursor() as cursor:\n"
        "    cursor.execute('SELECT inet_server_port(), pg_is_in_recovery()')\n"
        "    print(*cursor.fetchone())\n"
        "print(connection.settings_dict['HOST'], connection.settings_dict['PORT'])\n"
    )
    environment = {**os.environ, "DATABASE_URL": url}
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", program],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    port = address.rpartition(":")[2]
    server, hosts = done.stdout.splitlines()[-2:]
    assert server == f"{port} False"  # the cluster that answers, a primary
    assert hosts.startswith("127.0.0.1,")
