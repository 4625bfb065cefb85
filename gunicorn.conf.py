"""gunicorn's settings for production (``scripts/serve``; docs/deployment.md).

``gunicorn -c gunicorn.conf.py project.wsgi:application``. Environment:
``ADDRESS`` (``[host:]port`` or ``unix:PATH``, default ``127.0.0.1:8000``),
``WEB_CONCURRENCY`` (worker processes, default ``2 × cores + 1``),
``OXIDE_BATCH_WATCHDOG`` (``on``: the master also runs ``manage.py
batch_watchdog`` beside the workers, restarting it should it exit; stopped with
the server — ``scripts/serve`` turns it on), ``OXIDE_BATCH_NOTIFIER`` (the same
for ``manage.py batch_notify``, the notification deliveries). Any other setting can be
overridden with ``GUNICORN_CMD_ARGS`` (``"--timeout 120"``), which gunicorn
applies over this file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any


def _cores() -> int:
    # The CPUs this process may run on (a container's cpuset), not the host's.
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _workers() -> int:
    value = os.environ.get("WEB_CONCURRENCY", "").strip()
    if not value:
        # gunicorn's rule of thumb: while one worker waits on PostgreSQL,
        # another has the core (docs/deployment.md).
        return 2 * _cores() + 1
    if not value.isdigit() or int(value) < 1:
        raise SystemExit(f"WEB_CONCURRENCY: expected a number of workers ≥ 1, got {value!r}")
    return int(value)


def _bind(address: str) -> str:
    # As scripts/run takes it: a bare port listens on localhost.
    if address.isdigit():
        return f"127.0.0.1:{address}"
    return address


bind = [_bind(os.environ.get("ADDRESS", "").strip() or "127.0.0.1:8000")]
workers = _workers()
# Sync workers (one request at a time each) behind a proxy or load balancer that
# buffers slow clients; each keeps one persistent database connection.
worker_class = "sync"
# A request still running after this long is killed with its worker. Above the
# statement timeout (OXIDE_BATCH_STATEMENT_TIMEOUT, 30 s), so a slow query is
# cancelled by PostgreSQL and answered 503 before the worker is killed.
timeout = 60
# On SIGTERM, requests in progress may finish for this long (under Kubernetes'
# default 30 s grace period before SIGKILL).
graceful_timeout = 25
# Seconds an idle keep-alive connection is kept open, by a worker class that
# keeps connections (GUNICORN_CMD_ARGS="--worker-class gthread --threads 4");
# sync workers close each one. Behind a balancer that reuses connections, set
# it above the balancer's idle timeout, so that the balancer closes first.
keepalive = 5
# No max_requests: recycling workers would bound a memory leak the app is not
# known to have, and with PROMETHEUS_MULTIPROC_DIR each new worker leaves its
# sample files behind for /metrics to read until the next start.
max_requests = 0
# The heartbeat file on tmpfs: a container's /tmp may be a slow overlay.
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
proc_name = "oxide_batch"
# No control socket (gunicornc, gunicorn ≥ 25.1): its default path is one per
# user, so a second server of the same user would take it over. Signals still
# work: TERM stops gracefully, HUP reloads, TTIN/TTOU add or remove a worker.
control_socket_disable = True

# One line per request on stdout, with the X-Request-ID the app answered
# (RequestObservabilityMiddleware): the id the client sent, or the one the app
# generated and also put on the request's event lines. %(M)s: milliseconds.
accesslog = "-"
access_log_format = (
    '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" '
    "%(M)sms request_id=%({x-request-id}o)s"
)
errorlog = "-"
loglevel = "info"


# One child started at a time (a Popen waits for its child's exec through a
# pipe a concurrent fork would inherit and hold).
SPAWNING = threading.Lock()


class Companion:
    """A management command as a child of the gunicorn master (the lease
    watchdog, the notifier): started when the server is ready if its variable
    is on, started again (after ``RESTART_DELAY`` seconds) should it exit,
    stopped (SIGTERM) when the server stops. It inherits the environment, so
    its metrics land in the service's PROMETHEUS_MULTIPROC_DIR and its lines in
    the server's log (docs/deployment.md)."""

    RESTART_DELAY = 5.0

    def __init__(self, command: str, variable: str) -> None:
        self.command = command
        self.variable = variable
        self.process: subprocess.Popen[bytes] | None = None
        self.stopping = threading.Event()

    def enabled(self) -> bool:
        value = os.environ.get(self.variable, "").strip().lower()
        return value in {"1", "true", "yes", "on"}

    def start(self, log: Any) -> None:
        # The first start in the master's own thread, before it forks its
        # workers: a worker forked while a thread's Popen waits for its child's
        # exec inherits that wait's pipe and holds the start until it exits.
        self._spawn(log)
        threading.Thread(target=self._supervise, args=(log,), daemon=True).start()

    def _spawn(self, log: Any) -> subprocess.Popen[bytes]:
        manage = Path(__file__).resolve().with_name("manage.py")
        with SPAWNING:
            process = subprocess.Popen([sys.executable, str(manage), self.command])
        self.process = process
        log.info("%s started (pid %d)", self.command, process.pid)
        return process

    def _supervise(self, log: Any) -> None:
        process = self.process
        while process is not None and not self.stopping.is_set():
            code = process.wait()
            # A stop of the whole server may reach it first (a SIGTERM to the
            # process group): the server's own stop follows within the delay.
            if self.stopping.wait(self.RESTART_DELAY):
                return
            log.error("%s exited with %d; starting it again", self.command, code)
            process = self._spawn(log)

    def stop(self) -> None:
        self.stopping.set()
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()


# The notifier is a process of its own, not a thread of the watchdog's: a
# receiver that hangs to its timeout never delays a recovery pass (decision 282).
COMPANIONS = (
    Companion("batch_watchdog", "OXIDE_BATCH_WATCHDOG"),
    Companion("batch_notify", "OXIDE_BATCH_NOTIFIER"),
)


def when_ready(server: Any) -> None:
    if server.cfg.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # scripts/serve sets it; without it each scrape sees one worker's counts.
        server.log.warning(
            "PROMETHEUS_MULTIPROC_DIR is not set: /metrics will show the samples of "
            "whichever of the %d workers answers (docs/observability.md)",
            server.cfg.workers,
        )
    for companion in COMPANIONS:
        if companion.enabled():
            companion.start(server.log)


def on_exit(server: Any) -> None:
    for companion in COMPANIONS:
        companion.stop()
