"""A pg_auto_failover formation for tests: a monitor and two PostgreSQL nodes
(a primary and a synchronous standby), each node run by its own keeper
(``pg_autoctl run``) in a process group of its own, so a test can kill a whole
node — keeper and PostgreSQL — with SIGKILL, as when its machine dies.

Debian's ``postgresql-15-auto-failover`` provides ``pg_autoctl`` and the
monitor's extension (``scripts/test`` installs it). The monitor's health checks
are tightened so the failover takes seconds instead of about a minute
(:data:`MONITOR_SETTINGS`; docs/deployment.md gives the defaults and why a
deployment keeps them). Everything lives in a temporary directory, on free
ports, and runs as the ``postgres`` user when the tests run as root.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests.live import free_port

PG_AUTOCTL = "pg_autoctl"
FORMATION_DATABASE = "oxide"
#: The monitor's settings in the tests (milliseconds). pg_auto_failover's
#: defaults: health checks every 5 s, 5 s timeout, 2 retries 2 s apart, a node
#: unhealthy after 20 s without a report, 30 s for a primary to demote itself.
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": 500,
    "pgautofailover.health_check_timeout": 1000,
    "pgautofailover.health_check_max_retries": 1,
    "pgautofailover.health_check_retry_delay": 250,
    "pgautofailover.node_considered_unhealthy_timeout": 1500,
    "pgautofailover.primary_demote_timeout": 2000,
}
START_TIMEOUT = 60.0


def available() -> Path:
    """The server binaries pg_autoctl drives, or skip (no pg_auto_failover, not
    on the PostgreSQL pass)."""
    bindir = os.environ.get("OXIDE_BATCH_PG_BINDIR")
    if not bindir or connection.vendor != "postgresql":
        pytest.skip("needs the test cluster of scripts/with-postgres (OXIDE_BATCH_PG_BINDIR)")
    if shutil.which(PG_AUTOCTL) is None:
        pytest.skip("needs pg_auto_failover (Debian's postgresql-15-auto-failover; scripts/test)")
    return Path(bindir)


@dataclass
class Node:
    name: str
    port: int
    pgdata: Path
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    def kill(self) -> None:
        """SIGKILL the node's keeper and PostgreSQL (its whole process group)."""
        if self.process is not None:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        # A postmaster that outlived its keeper (it should not) dies too.
        pid_file = self.pgdata / "postmaster.pid"
        if pid_file.exists():
            with suppress(ProcessLookupError, ValueError, PermissionError):
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)


@dataclass
class Formation:
    directory: Path
    bindir: Path
    monitor: Node
    nodes: list[Node] = field(default_factory=list)

    @property
    def monitor_uri(self) -> str:
        return f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover?sslmode=disable"

    def database_url(self) -> str:
        """The service's DATABASE_URL: every node, the primary found by libpq."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"postgres://postgres@{hosts}/{FORMATION_DATABASE}?target_session_attrs=read-write"

    def connect(self, **options: Any) -> psycopg.Connection[Any]:
        """An autocommit connection to the formation's primary, wherever it is."""
        return psycopg.connect(
            host=",".join("127.0.0.1" for _ in self.nodes),
            port=",".join(str(node.port) for node in self.nodes),
            user="postgres",
            dbname=FORMATION_DATABASE,
            target_session_attrs="read-write",
            autocommit=True,
            connect_timeout=2,
            **options,
        )

    def states(self) -> dict[str, tuple[str, str]]:
        """Each node's (reported, assigned) state, as the monitor sees them."""
        with psycopg.connect(
            host="127.0.0.1",
            port=self.monitor.port,
            user="postgres",
            dbname="pg_auto_failover",
            autocommit=True,
        ) as monitor:
            rows = monitor.execute(
                "SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node"
            ).fetchall()
        return {name: (reported, goal) for name, reported, goal in rows}

    def wait_for_states(self, wanted: dict[str, str], timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        seen: dict[str, tuple[str, str]] = {}
        while time.monotonic() < deadline:
            seen = self.states()
            if all(seen.get(name) == (state, state) for name, state in wanted.items()):
                return
            time.sleep(0.1)
        pytest.fail(f"the formation did not reach {wanted}: {seen}\n{self.logs()}")

    def primary(self) -> Node:
        # A dead primary keeps its last reported state; its goal moves on.
        states = self.states()
        for node in self.nodes:
            reported, goal = states.get(node.name, ("", ""))
            if reported == goal and goal in {"primary", "wait_primary", "single"}:
                return node
        pytest.fail(f"no primary in {states}")

    def logs(self) -> str:
        parts = []
        for node in [self.monitor, *self.nodes]:
            if node.log is not None and node.log.exists():
                parts.append(f"--- {node.name}\n{node.log.read_text()[-3000:]}")
        return "\n".join(parts)


def _as_owner() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _environment(directory: Path, bindir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{bindir}:{os.environ.get('PATH', '')}",
        # pg_autoctl keeps its configuration and state under the XDG directories.
        "XDG_CONFIG_HOME": str(directory / "config"),
        "XDG_DATA_HOME": str(directory / "share"),
        "XDG_RUNTIME_DIR": str(directory / "run"),
        "PGHOST": "127.0.0.1",
    }


def _autoctl(formation: Formation, *arguments: str) -> None:
    done = subprocess.run(
        [*_as_owner(), PG_AUTOCTL, *arguments],
        env=_environment(formation.directory, formation.bindir),
        cwd=formation.directory,
        capture_output=True,
        text=True,
        check=False,
        timeout=START_TIMEOUT,
    )
    if done.returncode != 0:
        pytest.fail(f"pg_autoctl {arguments[0:2]} failed:\n{done.stdout}{done.stderr}")


def _run(formation: Formation, node: Node) -> None:
    """``pg_autoctl run`` for ``node`` in a process group of its own."""
    node.log = formation.directory / f"{node.name}.log"
    with node.log.open("wb") as log:
        node.process = subprocess.Popen(
            [*_as_owner(), PG_AUTOCTL, "run", "--pgdata", str(node.pgdata)],
            env=_environment(formation.directory, formation.bindir),
            cwd=formation.directory,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(node: Node) -> None:
    if node.process is not None and node.process.poll() is None:
        node.kill()


def _copy_schema(formation: Formation) -> None:
    """The test database's schema and rows (migrated, with the users and tokens
    the test made) into the formation's database, on its primary."""
    source = connection.settings_dict
    dump = subprocess.run(
        [str(formation.bindir / "pg_dump"), "-h", str(source["HOST"] or "127.0.0.1"),
         "-p", str(source["PORT"]), "-U", str(source["USER"] or "postgres"),
         "--no-owner", "--no-privileges", str(source["NAME"])],
        capture_output=True,
        check=True,
        timeout=START_TIMEOUT,
    )  # fmt: skip
    restore = subprocess.run(
        [str(formation.bindir / "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
         "-p", str(formation.primary().port), "-U", "postgres", FORMATION_DATABASE],
        input=dump.stdout,
        capture_output=True,
        check=False,
        timeout=START_TIMEOUT,
    )  # fmt: skip
    if restore.returncode != 0:
        pytest.fail(f"restoring the test database failed:\n{restore.stderr.decode()[-3000:]}")


@contextmanager
def formation() -> Iterator[Formation]:
    """A monitor, a primary and a synchronous standby, healthy; the test
    database copied onto it (so copy after making the users the test needs)."""
    bindir = available()
    directory = Path(tempfile.mkdtemp(prefix="oxide-batch-failover."))
    directory.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    monitor = Node("monitor", free_port(), directory / "monitor")
    running = Formation(directory, bindir, monitor)
    with ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, directory, True)
        _autoctl(running, "create", "monitor", "--pgdata", str(monitor.pgdata),
                 "--pgport", str(monitor.port), "--hostname", "127.0.0.1",
                 "--auth", "trust", "--no-ssl")  # fmt: skip
        _run(running, monitor)
        cleanup.callback(_stop, monitor)
        _wait_for_port(monitor.port, running)
        with psycopg.connect(
            host="127.0.0.1", port=monitor.port, user="postgres", dbname="pg_auto_failover",
            autocommit=True,
        ) as admin:  # fmt: skip
            for name, value in MONITOR_SETTINGS.items():
                admin.execute(f"ALTER SYSTEM SET {name} = {int(value)}")
            admin.execute("SELECT pg_reload_conf()")
        for number in (1, 2):
            node = Node(f"node{number}", free_port(), directory / f"node{number}")
            running.nodes.append(node)
            _autoctl(running, "create", "postgres", "--pgdata", str(node.pgdata),
                     "--pgport", str(node.port), "--hostname", "127.0.0.1",
                     "--listen", "127.0.0.1", "--name", node.name,
                     "--monitor", running.monitor_uri, "--auth", "trust", "--no-ssl",
                     "--dbname", FORMATION_DATABASE)  # fmt: skip
            _run(running, node)
            cleanup.callback(_stop, node)
            if number == 1:
                running.wait_for_states({"node1": "single"})
                _wait_for_port(node.port, running)
                _copy_schema(running)
        running.wait_for_states({"node1": "primary", "node2": "secondary"})
        yield running


def _wait_for_port(port: int, running: Formation) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        with suppress(psycopg.OperationalError), psycopg.connect(
            host="127.0.0.1", port=port, user="postgres", dbname="postgres", connect_timeout=1
        ):  # fmt: skip
            return
        time.sleep(0.1)
    pytest.fail(f"nothing answers on port {port}:\n{running.logs()}")
