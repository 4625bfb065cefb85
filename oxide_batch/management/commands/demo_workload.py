"""Drive a realistic workload through the repository so a first look at the
console shows real data: completed runs, a failure and its restart, a crash
left STARTED, an unknown commit, a cooperative stop, an audited recovery, and a
flow job whose partitioned step fails and is restarted."""

from __future__ import annotations

import hashlib
from argparse import ArgumentTypeError
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

import oxide_batch
from oxide_batch.demo.partitioned import run_partitioned_flow
from oxide_batch.demo.workload import Workload
from oxide_batch.domain import BatchStatus, FailureCategory, RecoveryRequest
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.observability import events
from oxide_batch.selectors.instances import repository_is_empty

S = BatchStatus


def _instant(value: str) -> datetime:
    try:
        instant = datetime.fromisoformat(value)
    except ValueError:
        raise ArgumentTypeError(
            f"{value!r} is not an ISO 8601 instant (e.g. 2026-11-30T18:00:00Z)"
        ) from None
    if instant.tzinfo is None:
        raise ArgumentTypeError(f"{value!r} has no offset: add Z (UTC) or +HH:MM")
    return instant.astimezone(UTC)


def _month(now: datetime, *, back: int) -> str:
    """The calendar month ``back`` months before ``now``'s, as ``YYYY-MM``."""
    index = now.year * 12 + now.month - 1 - back
    return f"{index // 12:04d}-{index % 12 + 1:02d}"


#: The demo's claimed worker (what a real runtime sends with its claim).
DEMO_WORKER = WorkerIdentity(
    host="worker-3", pid=4122, name="billing-1", client=f"oxide-batch {oxide_batch.__version__}"
)


class Command(BaseCommand):
    help = "Record a realistic demo workload through the repository."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--if-empty",
            action="store_true",
            help="do nothing when the repository already holds job instances",
        )
        parser.add_argument(
            "--at",
            type=_instant,
            metavar="INSTANT",
            help="record the workload as if it were INSTANT (ISO 8601 with its offset, e.g. "
            "2026-11-30T18:00:00Z) instead of now; the tests pin their calendar with it",
        )
        parser.add_argument(
            "--events-log",
            metavar="FILE",
            help="append the demo's event lines to FILE instead of stderr (scripts/run: "
            "var/demo-events.log), so a first run's output stays readable",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["if_empty"] and not repository_is_empty():
            self.stdout.write("demo workload skipped: the repository is not empty")
            return
        now = options["at"] or datetime.now(UTC)
        if options["events_log"] is None:
            self._record(now)
            self.stdout.write(self.style.SUCCESS("demo workload recorded"))
            return
        path = Path(options["events_log"])
        with events.written_to(path):
            self._record(now)
        self.stdout.write(self.style.SUCCESS(f"demo workload recorded (events in {path})"))

    def _record(self, now: datetime) -> None:
        work = Workload(now - timedelta(hours=6))
        etl = ["extract", "transform", "load"]
        for days_ago in (3, 2, 1):
            day = (now - timedelta(days=days_ago)).date().isoformat()
            work.complete("nightly_import", etl, business_date=day)
            work.tick(600)

        # A failure, then its restart completes. Its worker said who it is with its
        # claim (decision 310): the case file names the host, the pid and the client.
        billing = work.claim(work.launch("billing_export", region="eu", batch=42), DEMO_WORKER)
        billing = work.move(billing, S.STARTED)
        work.run_steps(
            billing, ["collect", "render"], last=S.FAILED, category=FailureCategory.USER_COMPONENT
        )
        work.move(billing, S.FAILED, category=FailureCategory.USER_COMPONENT)
        work.tick(900)
        work.complete("billing_export", ["collect", "render"], region="eu", batch=42)

        # A cooperative stop.
        report = work.move(work.launch("report_build", month=_month(now, back=2)), S.STARTED)
        work.run_steps(report, ["aggregate"], last=S.STOPPED, category=None)
        report = work.move(report, S.STOPPING)
        work.move(report, S.STOPPED)

        # A worker crashed: left STARTED, long inactive — a recovery candidate.
        crashed = work.move(work.launch("customer_sync", shard=7), S.STARTED)
        work.run_steps(crashed, ["fetch", "upsert"], last=S.STARTED)

        # A commit whose outcome the runtime could not learn: UNKNOWN.
        ledger = work.move(work.launch("ledger_post", period=_month(now, back=1)), S.STARTED)
        work.run_steps(ledger, ["post"], last=S.STARTED)
        work.move(ledger, S.UNKNOWN, category=FailureCategory.UNKNOWN_COMMIT)

        # An orphan an operator already resolved, with its audit row.
        orphan = work.move(work.launch("cleanup", scope="tmp"), S.STARTED)
        work.tick(3600)
        with work.repo.begin() as uow:
            uow.recover_job_execution(
                orphan.id,
                RecoveryRequest.abandon(
                    expected_version=orphan.version,
                    reason_code="ORPHAN_CONFIRMED",
                    operator_reference="demo-operator",
                    evidence_digest=hashlib.sha256(b"demo evidence").digest(),
                ),
            )
            uow.commit()

        # A flow job whose partitioned step fails in one region, then is restarted.
        run_partitioned_flow(work)

        # Something running right now.
        work.clock.set(now - timedelta(minutes=2))
        live = work.move(
            work.launch("nightly_import", business_date=now.date().isoformat()), S.STARTED
        )
        work.run_steps(live, ["extract", "transform"], last=S.STARTED)
