"""Notifier benchmark (issue 41): the chaos test of
``tests/notifications/test_notifier_processes.py`` at 10^4 events.

Run it inside a throwaway PostgreSQL cluster (it creates and drops a database
named ``oxb_bench_notify``; without DATABASE_URL it starts one itself)::

    .venv/bin/python bench/notify.py --events 10000

It migrates the bench database, adds ``--rules`` webhook rules (each its own
receiver on 127.0.0.1 that verifies every signature with the
``standardwebhooks`` package), writes ``--events`` ``execution.failed`` events
into the outbox (server-side, one ``INSERT … SELECT generate_series``: the
events' making is not what is measured), then runs two real
``manage.py batch_notify`` processes until every (event, rule) is settled,
SIGKILLing one at random moments (every 0.5–3 s, ``--no-kill`` to spare it)
and restarting it. The receivers answer 500 to ~30 % of the requests and
time out on ~10 % (``--clean``: always 200). It checks what the test checks —
every delivery delivered, one stable ``webhook-id`` each, never two attempts
of one delivery in flight — and prints the time, deliveries per second,
requests per delivery and the kills. Figures are recorded in
docs/performance.md ("Notifications").
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import layers  # bench/layers.py: the cluster, the database

ROOT = Path(__file__).resolve().parents[1]
DATABASE = "oxb_bench_notify"
TIMEOUT_SECONDS = 0.5


def notifier(log: Any) -> subprocess.Popen[bytes]:
    from django.conf import settings

    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DATABASE_URL": layers.database_url(DATABASE),
        "SECRET_KEY": settings.SECRET_KEY,
        "OXIDE_BATCH_WEBHOOK_HTTP_HOSTS": "127.0.0.1",
        "OXIDE_BATCH_NOTIFY_ATTEMPTS": "100",
        "OXIDE_BATCH_NOTIFY_BACKOFF": "1s",
        "OXIDE_BATCH_NOTIFY_BACKOFF_MAX": "2s",
        "OXIDE_BATCH_NOTIFY_TIMEOUT": f"{int(TIMEOUT_SECONDS * 1000)}ms",
        "OXIDE_BATCH_EVENTS_LEVEL": "WARNING",
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", "batch_notify", "--interval", "0.2", "--json"],
        cwd=ROOT,
        env=environment,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--rules", type=int, default=2)
    parser.add_argument("--no-kill", action="store_true", help="never SIGKILL a notifier")
    parser.add_argument("--clean", action="store_true", help="receivers always answer 200")
    parser.add_argument("--seed", type=int, default=41)
    arguments = parser.parse_args()
    layers.reexec_under_postgres(__file__, durable=False)

    with layers.admin() as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{DATABASE}"')
    os.environ["DATABASE_URL"] = layers.database_url(DATABASE)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from contextlib import ExitStack

    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection as db

    from oxide_batch.repository.notifications import ChangeBy
    from oxide_batch.services.notify_rules import NotificationRules, new_rule
    from tests.notifications.receiver import always_ok, receiving
    from tests.notifications.test_notifier_processes import flaky

    call_command("migrate", verbosity=0, interactive=False)
    settings.OXIDE_BATCH_WEBHOOK_HTTP_HOSTS = ["127.0.0.1"]
    behaviour = always_ok if arguments.clean else flaky
    chaos = random.Random(arguments.seed)
    with ExitStack() as stack:
        receivers = [
            stack.enter_context(receiving(behaviour=behaviour)) for _ in range(arguments.rules)
        ]
        for number, receiver in enumerate(receivers):
            made = new_rule(
                name=f"rule{number}", jobs=["*"], events=["execution.failed"], webhook=receiver.url
            )
            NotificationRules().add(made, by=ChangeBy("bench"))
            receiver.secret = made.secret
        with db.cursor() as cursor:
            cursor.execute(
                "INSERT INTO ob_notification_event "
                "(kind, job_name, job_instance_id, job_execution_id, status, occurred_at, data) "
                "SELECT 'execution.failed', 'import_job', n, n, 'FAILED', now(), "
                """'{"by": "service", "prior_status": "STARTED"}'::jsonb """
                "FROM generate_series(1, %s) AS n",
                [arguments.events],
            )
        expected = arguments.events * arguments.rules
        kills = 0
        started = time.monotonic()
        with tempfile.TemporaryFile() as log:
            processes = [notifier(log), notifier(log)]
            try:
                while True:
                    time.sleep(chaos.uniform(0.5, 3.0))
                    if settled(db) == expected:
                        break
                    if not arguments.no_kill:
                        os.killpg(processes[0].pid, signal.SIGKILL)
                        processes[0].wait(timeout=10)
                        kills += 1
                        processes[0] = notifier(log)
            finally:
                for process in processes:
                    if process.poll() is None:
                        os.killpg(process.pid, signal.SIGTERM)
                        process.wait(timeout=30)
        took = time.monotonic() - started
        report(db, receivers, expected, kills, took)
    db.close()
    with layers.admin() as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


def settled(db: Any) -> int:
    with db.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ob_notification_delivery WHERE state <> 'pending'")
        return int(cursor.fetchone()[0])


def report(db: Any, receivers: list[Any], expected: int, kills: int, took: float) -> None:
    with db.cursor() as cursor:
        cursor.execute("SELECT webhook_id, state, attempts FROM ob_notification_delivery")
        deliveries = cursor.fetchall()
    states = {state for _, state, _ in deliveries}
    received = [request for receiver in receivers for request in receiver.received]
    whole = [request for request in received if not request.truncated]
    ids = {webhook_id for webhook_id, _, _ in deliveries}
    answered = {request.webhook_id for request in whole if 200 <= request.status < 300}
    overlaps = sum(len(receiver.overlaps) for receiver in receivers)
    print(f"deliveries           {len(deliveries)} of {expected} (states: {sorted(states)})")
    print(f"lost                 {expected - len(answered & ids)}")
    print(f"ids not ours         {len({r.webhook_id for r in whole} - ids)}")
    print(f"unverified requests  {sum(not r.verified for r in whole)}")
    print(f"concurrent attempts  {overlaps}")
    print(f"SIGKILLs             {kills} ({len(received) - len(whole)} requests cut off)")
    print(f"attempts counted     {sum(a for _, _, a in deliveries)}")
    print(f"requests received    {len(received)} ({len(received) / expected:.2f} per delivery)")
    print(f"time                 {took:.1f} s ({expected / took:.0f} deliveries/s)")


if __name__ == "__main__":
    main()
