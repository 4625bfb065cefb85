"""A crashed worker is handled in seconds, without a human (contract §2.5.7), end to end
with real processes (PostgreSQL pass): the example job of the guide
(``examples/csv_import.py``, the high-level client) against a live server with
a lease TTL of 5 s, and ``manage.py batch_watchdog`` running beside it.

- killed with SIGKILL mid-step, its execution is FAILED by the watchdog within
  TTL + interval, audited as the watchdog's decision with its step resolved;
  the restart resumes at the checkpoint and every record is written once;
- a worker inside one chunk longer than the TTL is never recovered;
- a worker paused (SIGSTOP) past the TTL is recovered and, continued, writes
  nothing more (fenced: exit 3);
- two watchdogs at once make one decision per execution.

The detection time (kill → FAILED) is printed (``-s``) and kept in
``docs/runtime-guide.md``."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import oxide_batch
from oxide_batch import models
from oxide_batch.client import RuntimeClient
from oxide_batch.domain.status import BatchStatus
from oxide_batch.roles import RUNTIME
from tests.client.test_examples import (
    ROWS,
    environment,
    example,
    kill_after_checkpoint,
    wait_for,
    write_people,
)
from tests.live import ROOT, token_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TTL = 5.0
INTERVAL = 0.5
# A pass takes a few tens of milliseconds; the SIGKILLed process's last write
# may be committed a moment after the kill (the server does not know).
SLACK = 1.5
MANAGE = (sys.executable, str(ROOT / "manage.py"))


@pytest.fixture
def lease(settings: Any) -> float:
    """The live server's lease TTL (the watchdog's is set by its environment)."""
    settings.OXIDE_BATCH_LEASE_TTL = f"{TTL:g}s"
    return TTL


def watchdog_environment() -> dict[str, str]:
    return {**environment(), "OXIDE_BATCH_LEASE_TTL": f"{TTL:g}s"}


@contextmanager
def watchdog(tmp_path: Path, name: str = "watchdog") -> Iterator[Path]:
    """``manage.py batch_watchdog --json`` until the block ends (SIGTERM); yields
    the file its JSON lines go to, once its start-up hold-off is over."""
    output = tmp_path / f"{name}.jsonl"
    with output.open("w") as sink:
        process = subprocess.Popen(
            [*MANAGE, "batch_watchdog", "--json", "--interval", str(INTERVAL)],
            cwd=ROOT,
            env=watchdog_environment(),
            stdout=sink,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: acting(output), "the watchdog's start-up hold-off to end")
            yield output
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=15)
    assert process.returncode == 0


def passes(output: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.read_text().splitlines() if line.strip()]


def acting(output: Path) -> bool:
    return any(item.get("holding_until", "x") is None for item in passes(output))


def failed_at(execution_id: int) -> float | None:
    """``time.monotonic()`` once the execution is FAILED, else ``None``."""
    status = models.JobExecution.objects.filter(pk=execution_id).values_list("status", flat=True)
    return time.monotonic() if status.first() == BatchStatus.FAILED.value else None


def fingerprint(execution_id: int) -> tuple[Any, ...]:
    """Everything a write of the worker would move."""
    execution = models.JobExecution.objects.filter(pk=execution_id).values_list(
        "version", "status", "last_activity_at", "last_observed_at", "updated_at"
    )
    steps = models.StepExecution.objects.filter(job_execution_id=execution_id).order_by("id")
    return (
        tuple(execution),
        tuple(steps.values_list("id", "version", "status", "read_count", "updated_at")),
    )


def the_watchdogs_decision(execution_id: int) -> models.RecoveryDecision:
    decision = models.RecoveryDecision.objects.get(job_execution_id=execution_id)
    assert decision.reason_code == "LEASE_EXPIRED"
    assert decision.operator_reference.startswith("watchdog@")
    assert decision.operator_user_id is None
    assert (decision.eligibility, decision.resulting_status) == ("lease_expired", "FAILED")
    request = models.OperatorRequest.objects.get(
        job_execution_id=execution_id, action="RECOVER", outcome="APPLIED"
    )
    assert request.operation_id.startswith(f"watchdog:{execution_id}:")
    return decision


def test_a_killed_worker_is_failed_by_the_watchdog_and_its_restart_resumes_exactly_once(
    live_server: Any, tmp_path: Path, lease: float
) -> None:
    source, output = write_people(tmp_path)
    token = token_for("importer", RUNTIME)
    command = example(
        "csv_import.py",
        *("--url", live_server.url, "--token", token),
        *("--input", str(source), "--output", str(output), "--chunk-size", "10"),
    )
    with watchdog(tmp_path):
        first = subprocess.Popen(
            [*command, "--pause", "0.2"], cwd=ROOT, env=environment(), text=True
        )
        killed = kill_after_checkpoint(first, "csv_import", 30)
        killed_at = time.monotonic()
        recovered_at: float = wait_for(lambda: failed_at(killed), "the watchdog's recovery")
    detection = recovered_at - killed_at
    print(
        f"\nkill → FAILED by the watchdog: {detection:.2f} s "
        f"(TTL {TTL:g} s, interval {INTERVAL:g} s)"
    )
    assert detection <= TTL + INTERVAL + SLACK

    decision = the_watchdogs_decision(killed)
    # Who the owner was (decisions 310, 314): the killed process itself, as the
    # client said by default — this machine's host name, that process's pid.
    assert (decision.evidence or {})["owner"] == {
        "host": socket.gethostname(),
        "pid": first.pid,
        "name": None,
        "client": f"oxide-batch {oxide_batch.__version__}",
        "user": "importer",
    }
    assert (
        f"importer on {socket.gethostname()}, pid {first.pid}"
        in ((decision.evidence or {})["owner_text"])
    )
    row = models.JobExecution.objects.get(pk=killed)
    assert (row.worker_host, row.worker_pid) == (socket.gethostname(), first.pid)
    step = models.StepExecution.objects.get(job_execution_id=killed)
    assert (step.worker_host, step.worker_pid) == (socket.gethostname(), first.pid)
    assert list(decision.resolved_step_ids) == [step.id]
    assert (step.status, step.failure_category) == ("FAILED", "STALE_RECOVERED")

    rerun = subprocess.run(
        command, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=60
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    resumed_at = int(rerun.stdout.split("starting at offset ")[1].split()[0])
    assert resumed_at >= 30  # at the checkpoint, not from the start
    client = RuntimeClient(live_server.url, token)
    latest = next(client.executions(job_name="csv_import"))
    assert (latest.attempt, latest.status) == (2, BatchStatus.COMPLETED)
    with sqlite3.connect(output) as database:
        numbers = [row[0] for row in database.execute("SELECT row_number FROM people")]
    assert sorted(numbers) == list(range(ROWS))  # every record, exactly once


def test_a_worker_in_a_chunk_longer_than_the_ttl_is_never_recovered(
    live_server: Any, tmp_path: Path, lease: float
) -> None:
    source, output = write_people(tmp_path, rows=20)
    token = token_for("slow", RUNTIME)
    command = example(
        "csv_import.py",
        *("--url", live_server.url, "--token", token),
        *("--input", str(source), "--output", str(output), "--chunk-size", "20"),
        # One chunk of 2 TTLs: only the heartbeat keeps the lease.
        *("--chunk-seconds", str(2 * TTL + 1)),
    )
    with watchdog(tmp_path) as dog:
        done = subprocess.run(
            command, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=60
        )
        time.sleep(INTERVAL * 2)  # a last pass after it ended
    assert done.returncode == 0, done.stdout + done.stderr
    client = RuntimeClient(live_server.url, token)
    latest = next(client.executions(job_name="csv_import"))
    assert (latest.attempt, latest.status) == (1, BatchStatus.COMPLETED)
    assert not models.RecoveryDecision.objects.exists()
    assert all(not item.get("actions") for item in passes(dog))
    with sqlite3.connect(output) as database:
        assert database.execute("SELECT count(*) FROM people").fetchone() == (20,)


def test_a_paused_worker_is_recovered_and_once_continued_writes_nothing_more(
    live_server: Any, tmp_path: Path, lease: float
) -> None:
    source, output = write_people(tmp_path)
    token = token_for("paused", RUNTIME)
    command = example(
        "csv_import.py",
        *("--url", live_server.url, "--token", token),
        *("--input", str(source), "--output", str(output), "--chunk-size", "10"),
        *("--pause", "0.2"),
    )
    with watchdog(tmp_path):
        worker = subprocess.Popen(
            command, cwd=ROOT, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )

        def under_way() -> int | None:
            step = models.StepExecution.objects.filter(
                job_execution__job_name="csv_import", read_count__gte=30
            ).first()
            return None if step is None else step.job_execution_id

        paused: int = wait_for(under_way, "a checkpoint past offset 30")
        worker.send_signal(signal.SIGSTOP)
        wait_for(lambda: failed_at(paused), "the watchdog's recovery of the paused worker")
    the_watchdogs_decision(paused)
    recovered = fingerprint(paused)
    worker.send_signal(signal.SIGCONT)
    out, err = worker.communicate(timeout=30)
    assert worker.returncode == 3, out.decode() + err.decode()  # the example's "fenced"
    assert b"fenced" in err
    assert fingerprint(paused) == recovered  # nothing written after the decision


def test_two_watchdogs_at_once_make_one_decision_per_execution(
    live_server: Any, tmp_path: Path, lease: float
) -> None:
    client = RuntimeClient(live_server.url, token_for("many", RUNTIME))
    ids = []
    for run in range(12):
        _, execution = client.launch("many_runs", {"run": run})
        execution = client.claim(execution, execution.version, bytes([run + 1]) * 16)
        execution = client.start(execution)
        client.create_step(execution, "load")
        ids.append(execution.id)
    time.sleep(TTL + 0.5)  # every lease expires; nobody observes
    rounds = [
        subprocess.Popen(
            [*MANAGE, "batch_watchdog", "--once", "--json"],
            cwd=ROOT,
            env=watchdog_environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    reports = []
    for process in rounds:
        out, _ = process.communicate(timeout=60)
        assert process.returncode == 0, out
        reports.append(json.loads(out))
    decisions = models.RecoveryDecision.objects.filter(job_execution_id__in=ids)
    assert sorted(decisions.values_list("job_execution_id", flat=True)) == sorted(ids)
    applied = models.OperatorRequest.objects.filter(job_execution_id__in=ids, action="RECOVER")
    assert applied.count() == len(ids)  # one audited decision each; replays add no row
    assert set(applied.values_list("outcome", flat=True)) == {"APPLIED"}
    assert sum(report["recovered"] for report in reports) == len(ids)
    assert all(client.execution(pk).status is BatchStatus.FAILED for pk in ids)
