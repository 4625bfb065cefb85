"""A throwaway PgBouncer (Debian's ``pgbouncer``) in transaction pooling in front
of the PostgreSQL test database, and two gunicorn servers behind it: the
scale-out deployment of docs/scale-out.md, started and stopped by context
managers. Used by tests/scaleout/ (races, connection count, restart, soak)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from tests.live import database_url, free_port, gunicorn

PGBOUNCER = "/usr/sbin/pgbouncer"
# Server connections PgBouncer opens to the test database, at most
# (default_pool_size = max_db_connections, reserve_pool_size = 0): the ceiling
# the connection-count test holds PostgreSQL to.
POOL_SIZE = 8
MAX_CLIENT_CONN = 400
START_TIMEOUT = 15.0
# What gunicorn behind the pooler needs (project/settings.py, docs/scale-out.md).
POOLED_ENVIRONMENT = {"OXIDE_BATCH_PG_POOLER": "transaction"}


def pgbouncer_binary() -> str:
    """The pgbouncer executable, or a skip with the reason (scripts/test installs it)."""
    found = shutil.which("pgbouncer") or (PGBOUNCER if os.access(PGBOUNCER, os.X_OK) else None)
    if found is None:
        pytest.skip("pgbouncer not installed (apt-get install pgbouncer; scripts/test does)")
    return found


@dataclass(frozen=True)
class PgBouncer:
    port: int
    database: str
    log: Path

    def url(self, settings_dict: Mapping[str, Any] | None = None) -> str:
        """The test database's URL through the pooler."""
        return database_url(settings_dict, host="127.0.0.1", port=self.port)


def _ini(directory: Path, port: int, db: Mapping[str, Any], pool_size: int) -> str:
    statement_ms = int(settings.STATEMENT_TIMEOUT.total_seconds() * 1000)
    lock_ms = int(settings.LOCK_TIMEOUT.total_seconds() * 1000)
    # The timeouts the app sends as startup options when it talks to PostgreSQL
    # directly are set here, once per server connection (project/settings.py).
    connect_query = f"SET statement_timeout = {statement_ms}; SET lock_timeout = {lock_ms}"
    target = (
        f"host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432} dbname={db['NAME']} "
        f"user={db['USER']} connect_query='{connect_query}'"
    )
    return "\n".join(
        [
            "[databases]",
            f"{db['NAME']} = {target}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {port}",
            "unix_socket_dir =",
            "auth_type = trust",
            # SHOW POOLS on the admin console (the connection-count test).
            f"stats_users = {db['USER']}",
            f"auth_file = {directory / 'userlist.txt'}",
            "pool_mode = transaction",
            f"default_pool_size = {pool_size}",
            "min_pool_size = 0",
            "reserve_pool_size = 0",
            f"max_db_connections = {pool_size}",
            f"max_client_conn = {MAX_CLIENT_CONN}",
            # A client waits for a server connection at most 5 s (lock_timeout's
            # order): past it PgBouncer drops it with an error the app answers 503
            # unavailable. With the 120 s default a request that arrives as
            # PostgreSQL goes down waits in the pooler (fast-fail spares only
            # clients that arrive after a failed login): 20 s in the restart test,
            # until its HTTP client gave up.
            "query_wait_timeout = 5",
            # Reconnect soon after PostgreSQL comes back (the restart test).
            "server_login_retry = 0.25",
            f"logfile = {directory / 'pgbouncer.log'}",
            f"pidfile = {directory / 'pgbouncer.pid'}",
            "",
        ]
    )


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@contextmanager
def pgbouncer(
    settings_dict: Mapping[str, Any] | None = None, *, pool_size: int = POOL_SIZE
) -> Iterator[PgBouncer]:
    """PgBouncer in transaction pooling before the test database (default:
    pytest-django's, which must exist), on a free port; always stopped."""
    binary = pgbouncer_binary()
    db = settings_dict if settings_dict is not None else connection.settings_dict
    as_postgres: dict[str, Any] = {}
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        as_postgres = {"user": "postgres", "group": "postgres", "extra_groups": []}
    with tempfile.TemporaryDirectory(prefix="oxide-batch-pgbouncer.") as name:
        directory = Path(name)
        directory.chmod(0o755)
        port = free_port()
        (directory / "userlist.txt").write_text(f'"{db["USER"]}" ""\n')
        ini = directory / "pgbouncer.ini"
        ini.write_text(_ini(directory, port, db, pool_size))
        if as_postgres:
            shutil.chown(directory, "postgres", "postgres")
        process = subprocess.Popen(  # nosec B603 # fixed arguments
            [binary, str(ini)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **as_postgres,
        )
        log = directory / "pgbouncer.log"
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while not _listening(port):
                if process.poll() is not None or time.monotonic() > deadline:
                    text = log.read_text() if log.exists() else "(no log)"
                    pytest.fail(f"pgbouncer did not start:\n{text}")
                time.sleep(0.05)
            yield PgBouncer(port=port, database=str(db["NAME"]), log=log)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


@dataclass(frozen=True)
class ScaledOut:
    """Two app servers on one PgBouncer: ``urls`` to spread requests over."""

    bouncer: PgBouncer
    urls: tuple[str, ...]


@contextmanager
def scaled_out(
    *,
    servers: int = 2,
    workers: int = 2,
    threads: int = 4,
    environment: Mapping[str, str] | None = None,
) -> Iterator[ScaledOut]:
    """PgBouncer and ``servers`` gunicorn servers behind it (the pooler settings on)."""
    with ExitStack() as stack:
        bouncer = stack.enter_context(pgbouncer())
        urls = tuple(
            stack.enter_context(
                gunicorn(
                    database=bouncer.url(),
                    workers=workers,
                    threads=threads,
                    environment={**POOLED_ENVIRONMENT, **(environment or {})},
                )
            )
            for _ in range(servers)
        )
        yield ScaledOut(bouncer=bouncer, urls=urls)
