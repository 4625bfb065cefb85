"""Throwaway PostgreSQL servers that replicate: a streaming standby of the
test cluster, a copy of it that stands alone (a primary of its own), and the
standby's controls (cut its WAL stream, promote it, kill its primary).

The test cluster is the one ``scripts/with-postgres`` started
(``OXIDE_BATCH_PG_BINDIR``); every server made here is a ``pg_basebackup`` of
a running server, so it holds the migrated test databases at once. Servers run
as the ``postgres`` user when the tests run as root (``initdb`` and the
postmaster refuse root), each in its own temporary directory on a free port,
and are stopped with ``-m immediate`` when their context ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests.live import free_port

START_TIMEOUT = 60


def bindir() -> Path:
    """The test cluster's server binaries, or skip (not under scripts/with-postgres)."""
    found = os.environ.get("OXIDE_BATCH_PG_BINDIR")
    if not found or connection.vendor != "postgresql":
        pytest.skip("needs the test cluster of scripts/with-postgres (OXIDE_BATCH_PG_BINDIR)")
    return Path(found)


def _as_owner() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _run(command: list[str], what: str, log: Path | None = None) -> None:
    done = subprocess.run(  # fixed binaries of the test cluster
        [*_as_owner(), *command], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = log.read_text()[-4000:] if log is not None and log.exists() else ""
        pytest.fail(f"{what} failed ({done.returncode}):\n{done.stdout}{done.stderr}{tail}")


@dataclass
class Server:
    """One PostgreSQL server in ``directory``/data on ``port`` (127.0.0.1)."""

    directory: Path
    port: int
    bin: Path

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    def settings_dict(self, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The test database's Django settings, on this server."""
        settings = dict(base if base is not None else connection.settings_dict)
        settings.update(HOST="127.0.0.1", PORT=str(self.port))
        return settings

    def connect(self, dbname: str | None = None, **options: Any) -> psycopg.Connection[Any]:
        """An autocommit connection to ``dbname`` (default: the test database)."""
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=connection.settings_dict["USER"] or "postgres",
            dbname=dbname or connection.settings_dict["NAME"],
            autocommit=True,
            connect_timeout=5,
            **options,
        )

    def start(self, *settings: str) -> None:
        """Start the server; ``settings`` are ``name=value`` server settings."""
        options = " ".join(
            [
                f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1",
                "-c max_connections=200 -c fsync=off -c full_page_writes=off",
                *(f"-c {setting}" for setting in settings),
            ]
        )
        _run(
            [str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
             "-t", str(START_TIMEOUT), "-o", options, "start"],
            f"starting the server on port {self.port}",
            self.log,
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(  # fixed binaries of the test cluster
            [*_as_owner(), str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w",
             "stop"],
            capture_output=True,
            check=False,
        )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend: the machine is gone."""
        pid_file = self.data / "postmaster.pid"
        if not pid_file.exists():
            return
        postmaster = int(pid_file.read_text().split()[0])
        children = subprocess.run(
            ["pgrep", "-P", str(postmaster)], capture_output=True, text=True, check=False
        ).stdout.split()
        for pid in [postmaster, *map(int, children)]:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(postmaster, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)

    def promote(self) -> None:
        _run(
            [str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-t", str(START_TIMEOUT),
             "promote"],
            f"promoting the server on port {self.port}",
            self.log,
        )  # fmt: skip

    def wait_for(self, query: str, expected: Any, timeout: float = 30.0) -> None:
        """Poll ``query`` (first column of the first row) until it is ``expected``."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                with self.connect("postgres") as admin:
                    row = admin.execute(query).fetchone()
                    last = row[0] if row else None
            except psycopg.OperationalError as error:
                last = error
            if last == expected:
                return
            time.sleep(0.05)
        pytest.fail(f"{query!r} on port {self.port} gave {last!r}, not {expected!r}")


@contextmanager
def _directory(prefix: str) -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    directory.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def base_backup(
    source_port: int,
    *,
    standby: bool,
    settings: tuple[str, ...] = (),
    name: str = "replica",
) -> Iterator[Server]:
    """A running ``pg_basebackup`` of the server on ``source_port``: a streaming
    standby of it (``standby``; its ``application_name`` is ``name``) or a copy
    that stands alone."""
    binaries = bindir()
    with _directory(f"oxide-batch-{name}.") as directory:
        server = Server(directory, free_port(), binaries)
        command = [str(binaries / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(source_port),
                   "-U", connection.settings_dict["USER"] or "postgres", "-D", str(server.data),
                   "-X", "stream", "--no-sync", "-c", "fast"]  # fmt: skip
        if standby:
            command += ["-R", "-d", f"application_name={name}"]
        _run(command, f"pg_basebackup of port {source_port}")
        try:
            server.start(*settings)
            yield server
        finally:
            server.stop("immediate")


def test_cluster_port() -> int:
    return int(connection.settings_dict["PORT"])


@contextmanager
def streaming_replica(*settings: str) -> Iterator[Server]:
    """A hot standby of the test cluster, streaming from it, caught up."""
    with base_backup(test_cluster_port(), standby=True, settings=settings) as replica:
        replica.wait_for("SELECT pg_is_in_recovery()", True)
        yield replica


@contextmanager
def primary_and_standby(*, synchronous: bool) -> Iterator[tuple[Server, Server]]:
    """A primary of its own (a copy of the test cluster, so its databases are
    migrated) and a streaming standby of it, replicating synchronously or
    asynchronously. Killing the primary is the test's business."""
    with ExitStack() as servers:
        primary = servers.enter_context(
            base_backup(test_cluster_port(), standby=False, name="primary")
        )
        standby = servers.enter_context(base_backup(primary.port, standby=True, name="standby"))
        standby.wait_for("SELECT pg_is_in_recovery()", True)
        primary.wait_for("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'", 1)
        if synchronous:
            with primary.connect("postgres") as admin:
                admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'standby'")
                admin.execute("ALTER SYSTEM SET synchronous_commit = 'on'")
                admin.execute("SELECT pg_reload_conf()")
            primary.wait_for("SELECT sync_state FROM pg_stat_replication", "sync", timeout=10)
        yield primary, standby
