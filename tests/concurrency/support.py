"""Real threads with their own database connections, for race and fault tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import connection, connections


@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def run_in_threads(count: int, work: Callable[[int], Any], timeout: float = 60) -> list[Outcome]:
    """Run ``work(i)`` in ``count`` threads (each with its own connection) and
    collect what each returned or raised."""
    outcomes = [Outcome() for _ in range(count)]

    def target(index: int) -> None:
        try:
            outcomes[index].value = work(index)
        except BaseException as error:  # the test inspects it
            outcomes[index].error = error
        finally:
            connections.close_all()

    threads = [threading.Thread(target=target, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        assert not thread.is_alive(), "a worker thread hung"
    return outcomes


def admin_connection() -> psycopg.Connection[Any]:
    """A plain psycopg connection to the test database, outside Django."""
    settings = connection.settings_dict
    return psycopg.connect(
        host=settings["HOST"],
        port=settings["PORT"],
        user=settings["USER"],
        dbname=settings["NAME"],
        autocommit=True,
    )


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def terminate(pid: int) -> None:
    with admin_connection() as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def waiting_on_locks(count: int = 1, timeout: float = 10) -> bool:
    """Wait until ``count`` sessions of the test database wait for a lock;
    ``False`` when that did not happen within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    with admin_connection() as watcher:
        while time.monotonic() < deadline:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            if row is not None and row[0] >= count:
                return True
            time.sleep(0.005)
    return False
