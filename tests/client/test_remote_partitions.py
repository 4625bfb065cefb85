"""Remote partitions end to end with real processes (PostgreSQL pass, issue 43): a
manager and three workers of ``examples/remote_partitions.py``, each its own
process started independently (no shared pool), against a live server with a
lease TTL of 5 s and ``manage.py batch_watchdog`` beside them.

- one worker SIGKILLed mid-partition: its partition is claimed again by another
  worker within TTL + interval and resumes at its checkpoint; the step and the
  execution COMPLETE without a restart; every record of every partition is
  counted exactly once; the watchdog's decision for the dead worker is audited;
- a stop request stops every worker (exit 2) and the job (STOPPED);
- the manager's death: the watchdog recovers its execution and the workers'
  writes are refused: they write nothing more and exit (fenced, 3)."""

from __future__ import annotations

import csv
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.client import OperatorClient
from oxide_batch.roles import OPERATOR, RUNTIME
from tests.client.test_examples import environment, example, wait_for
from tests.client.test_watchdog import INTERVAL, SLACK, TTL, watchdog
from tests.live import ROOT, token_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CITIES = [f"city-{n:02d}" for n in range(12)]
PER_CITY = 20
CHUNK = 5
JOB = "remote_import"
# The workers' claim interval and the manager's wait interval.
CLAIM_INTERVAL = 0.5


@pytest.fixture
def lease(settings: Any) -> float:
    """The live server's lease TTL (the watchdog's is set by its environment)."""
    settings.OXIDE_BATCH_LEASE_TTL = f"{TTL:g}s"
    return TTL


def write_cities(tmp_path: Path, cities: int = len(CITIES)) -> tuple[Path, Path]:
    """``cities`` cities of 20 people each, and where the workers write them."""
    source, output = tmp_path / "people.csv", tmp_path / "people.sqlite3"
    with source.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "city"])
        for number in range(cities * PER_CITY):
            writer.writerow([f"person-{number:04d}", CITIES[number % cities]])
    return source, output


class Cluster:
    """A manager and workers of the example, each its own process."""

    def __init__(self, url: str, token: str, source: Path, output: Path, tmp_path: Path) -> None:
        self.common = (
            *("--url", url, "--token", token),
            *("--input", str(source), "--output", str(output)),
            *("--interval", str(CLAIM_INTERVAL), "--chunk-size", str(CHUNK)),
        )
        self.tmp_path = tmp_path
        self.processes: dict[str, subprocess.Popen[str]] = {}

    def start(self, name: str, role: str, *args: str) -> subprocess.Popen[str]:
        log = (self.tmp_path / f"{name}.log").open("w")
        process = subprocess.Popen(
            example("remote_partitions.py", role, *self.common, "--name", name, *args),
            cwd=ROOT,
            env=environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.processes[name] = process
        return process

    def output(self, name: str) -> str:
        return (self.tmp_path / f"{name}.log").read_text()

    def wait(self, name: str, timeout: float = 60) -> int:
        code = self.processes[name].wait(timeout=timeout)
        return code

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)


@contextmanager
def cluster(
    live_server: Any, tmp_path: Path, token: str, cities: int = len(CITIES)
) -> Iterator[Cluster]:
    source, output = write_cities(tmp_path, cities)
    running = Cluster(live_server.url, token, source, output, tmp_path)
    try:
        yield running
    finally:
        running.stop_all()


def the_execution() -> int:
    found = models.JobExecution.objects.filter(job_name=JOB).order_by("-id").first()
    assert found is not None
    return found.pk


def parent_step(execution_id: int) -> models.StepExecution:
    return models.StepExecution.objects.get(job_execution_id=execution_id, step_name="load")


def mid_partition_of(pid: int) -> models.StepExecution | None:
    """A worker step of process ``pid`` that committed a chunk and is not done."""
    return (
        models.StepExecution.objects.filter(
            worker_pid=pid, status="STARTED", read_count__gte=CHUNK, read_count__lt=PER_CITY
        )
        .order_by("-id")
        .first()
    )


def test_a_killed_workers_partition_moves_on_and_the_job_completes_exactly_once(
    live_server: Any, tmp_path: Path, lease: float
) -> None:
    token = token_for("remote", RUNTIME)
    with watchdog(tmp_path), cluster(live_server, tmp_path, token) as nodes:
        nodes.start("manager", "manager")
        doomed = nodes.start("worker-1", "worker", "--pause", "0.3")
        nodes.start("worker-2", "worker", "--pause", "0.1")
        nodes.start("worker-3", "worker", "--pause", "0.1")

        victim: models.StepExecution = wait_for(
            lambda: mid_partition_of(doomed.pid), "worker-1 mid-partition"
        )
        doomed.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        doomed.wait(timeout=10)
        partition_id = victim.claimed_partition_id
        assert partition_id is not None

        def reclaimed() -> float | None:
            taken = models.StepExecution.objects.filter(
                claimed_partition_id=partition_id, id__gt=victim.pk
            ).exists()
            return time.monotonic() if taken else None

        reclaimed_at: float = wait_for(reclaimed, "the dead worker's partition claimed again")
        assert nodes.wait("manager") == 0, nodes.output("manager")
        for name in ("worker-2", "worker-3"):
            assert nodes.wait(name) == 0, nodes.output(name)

    moved = reclaimed_at - killed_at
    print(f"\nkill → partition claimed again: {moved:.2f} s (TTL {TTL:g} s)")
    assert moved <= TTL + INTERVAL + CLAIM_INTERVAL + SLACK

    execution_id = the_execution()
    execution = models.JobExecution.objects.get(pk=execution_id)
    assert (execution.status, execution.attempt) == ("COMPLETED", 1)  # no restart
    parent = parent_step(execution_id)
    assert parent.status == "COMPLETED"
    # Every record of every partition counted exactly once.
    assert parent.read_count == parent.written_count == len(CITIES) * PER_CITY
    partitions = models.StepPartition.objects.filter(step_execution_id=parent.pk)
    assert partitions.count() == len(CITIES)
    assert set(partitions.values_list("status", "read_count")) == {("COMPLETED", PER_CITY)}
    # The dead worker's partition: retried once, finished by a worker step that
    # took over its checkpoint (counts carried) and resumed there.
    again = partitions.get(pk=partition_id)
    assert again.retries == 1
    takeover = models.StepExecution.objects.filter(claimed_partition_id=partition_id).latest("id")
    assert (takeover.status, takeover.read_count) == ("COMPLETED", PER_CITY)
    key = again.partition_key
    resumed = [
        line
        for name in ("worker-2", "worker-3")
        for line in nodes.output(name).splitlines()
        if line.startswith(f"partition {key}: starting at offset ")
    ]
    assert len(resumed) == 1
    assert int(resumed[0].rsplit(" ", 1)[1]) >= CHUNK  # at the checkpoint, not from 0
    # The watchdog's decision for the dead worker, audited.
    decision = models.WorkerRecovery.objects.get(worker_step_execution_id=victim.pk)
    assert (decision.reason_code, decision.partition_id) == ("LEASE_EXPIRED", partition_id)
    assert decision.actor.startswith("watchdog")
    assert models.StepExecution.objects.get(pk=victim.pk).status == "FAILED"
    assert not models.RecoveryDecision.objects.filter(job_execution_id=execution_id).exists()
    # The output holds every record once (rewritten chunks replace themselves).
    with sqlite3.connect(tmp_path / "people.sqlite3") as database:
        numbers = [row[0] for row in database.execute("SELECT row_number FROM people")]
    assert sorted(numbers) == list(range(len(CITIES) * PER_CITY))


def test_a_worker_in_a_chunk_longer_than_the_ttl_keeps_its_partition(
    live_server: Any, tmp_path: Path, lease: float
) -> None:
    token = token_for("remote", RUNTIME)
    with watchdog(tmp_path), cluster(live_server, tmp_path, token, cities=1) as nodes:
        nodes.start("manager", "manager")
        # One chunk of the whole city, longer than the TTL: only the worker's
        # heartbeat (an empty chunk after half a TTL without one) keeps its lease.
        nodes.start("worker-1", "worker", "--chunk-size", str(PER_CITY), "--pause", str(TTL + 2))
        assert nodes.wait("worker-1") == 0, nodes.output("worker-1")
        assert nodes.wait("manager") == 0, nodes.output("manager")

    assert not models.WorkerRecovery.objects.exists()
    worker = models.StepExecution.objects.get(claimed_partition_id__isnull=False)
    # One chunk counted; the empty ones moved the version only.
    assert (worker.status, worker.read_count, worker.committed_count) == ("COMPLETED", 20, 1)
    assert worker.version > 3


def test_a_stop_request_stops_every_worker_and_the_job(
    live_server: Any, tmp_path: Path, lease: float
) -> None:
    token = token_for("remote", RUNTIME)
    operator = OperatorClient(live_server.url, token_for("olga.ops", OPERATOR))
    with cluster(live_server, tmp_path, token) as nodes:
        nodes.start("manager", "manager")
        workers = [f"worker-{n}" for n in (1, 2, 3)]
        pids = [nodes.start(name, "worker", "--pause", "0.3").pid for name in workers]
        wait_for(lambda: all(mid_partition_of(pid) for pid in pids), "every worker mid-partition")
        execution_id = the_execution()
        execution = operator.execution(execution_id)
        operator.stop(execution, execution.version, operation_id=f"stop-{execution_id}")
        for name in workers:
            assert nodes.wait(name) == 2, nodes.output(name)  # stopping
        assert nodes.wait("manager") == 2, nodes.output("manager")

    assert models.JobExecution.objects.get(pk=execution_id).status == "STOPPED"
    parent = parent_step(execution_id)
    assert parent.status == "STOPPED"
    workers_steps = models.StepExecution.objects.filter(
        job_execution_id=execution_id, claimed_partition_id__isnull=False
    )
    assert set(workers_steps.values_list("status", flat=True)) <= {"STOPPED", "COMPLETED"}
    assert workers_steps.filter(status="STOPPED").count() == 3  # each at a chunk boundary
    assert not models.StepPartition.objects.filter(
        step_execution_id=parent.pk, status="STARTED"
    ).exists()


def test_the_managers_death_fences_the_workers(
    live_server: Any, tmp_path: Path, lease: float
) -> None:
    token = token_for("remote", RUNTIME)
    with ExitStack() as stack:
        stack.enter_context(watchdog(tmp_path))
        nodes = stack.enter_context(cluster(live_server, tmp_path, token))
        manager = nodes.start("manager", "manager")
        workers = [f"worker-{n}" for n in (1, 2, 3)]
        # Slow partitions: every worker is still at work when the lease expires.
        pids = [nodes.start(name, "worker", "--pause", "1.0").pid for name in workers]
        wait_for(lambda: all(mid_partition_of(pid) for pid in pids), "every worker mid-partition")
        manager.send_signal(signal.SIGKILL)
        manager.wait(timeout=10)
        execution_id = the_execution()
        wait_for(
            lambda: models.JobExecution.objects.get(pk=execution_id).status == "FAILED",
            "the watchdog's recovery of the execution",
        )
        recovered = fingerprint(execution_id)
        for name in workers:
            assert nodes.wait(name) == 3, nodes.output(name)  # fenced

    decision = models.RecoveryDecision.objects.get(job_execution_id=execution_id)
    assert decision.reason_code == "LEASE_EXPIRED"
    assert fingerprint(execution_id) == recovered  # no worker wrote after the decision
    assert not models.StepExecution.objects.filter(
        job_execution_id=execution_id, status__in=["STARTING", "STARTED"]
    ).exists()


def fingerprint(execution_id: int) -> tuple[Any, ...]:
    """Everything a worker's write would move."""
    steps = models.StepExecution.objects.filter(job_execution_id=execution_id).order_by("id")
    partitions = models.StepPartition.objects.filter(
        step_execution__job_execution_id=execution_id
    ).order_by("id")
    return (
        tuple(steps.values_list("id", "version", "status", "read_count", "updated_at")),
        tuple(partitions.values_list("id", "version", "status")),
    )
