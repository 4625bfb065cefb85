"""A failover under load (issue 26 point 2): the primary *node* dies and the
runtimes carry on by themselves, with nothing acknowledged lost.

A pg_auto_failover formation (tests/failover.py: a monitor, a primary and a
synchronous standby) holds the repository; two gunicorn servers serve it on
``DATABASE_URL`` naming both nodes with ``target_session_attrs=read-write``;
four runtime processes (tests/failover_runtime.py, the high-level client) run
jobs through both servers. Mid-run the primary node — its keeper and its
PostgreSQL — is killed with SIGKILL; the monitor promotes the standby; the
runtimes' requests answered 503 ``unavailable`` meanwhile are sent again
within the client's retry budget. Afterwards a checker reads the new primary:
every job COMPLETED, every acknowledged chunk stored, every record processed
exactly once (counts, checkpoints and the runtimes' ledger agree), and no
server answered 500. The window (kill → the first acknowledged write after it)
is printed and bounded below the lease TTL.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from oxide_batch.roles import RUNTIME
from tests.failover import formation
from tests.failover_runtime import JOB_NAME
from tests.live import ROOT, gunicorn, token_for

pytestmark = pytest.mark.django_db(transaction=True)

RUNTIMES = 4
JOBS = 3
CHUNKS = 12
SIZE = 10
#: Chunks acknowledged before the primary is killed: the runtimes are mid-run.
KILL_AFTER = 16
ACCESS_FORMAT = '%(s)s "%(r)s"'


def ledger_entries(ledger: Path) -> list[dict[str, Any]]:
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def statuses(logs: list[Path]) -> Counter[int]:
    found: Counter[int] = Counter()
    for log in logs:
        for line in log.read_text().splitlines():
            match = re.match(r"(\d{3}) ", line)
            if match:
                found[int(match.group(1))] += 1
    return found


def shape(number: int) -> list[str]:
    """A runtime's name and work: jobs, chunks per step, records per chunk."""
    return [f"r{number}", str(JOBS), str(CHUNKS), str(SIZE)]


def offset_of(envelope: str | None) -> int | None:
    if envelope is None:
        return None
    return int(json.loads(envelope)["payload"]["offset"])


def test_the_runtimes_carry_on_through_a_failover_and_nothing_acknowledged_is_lost(
    tmp_path: Path,
) -> None:
    token = token_for("failover-runtime", RUNTIME)  # before the copy onto the formation
    ledger = tmp_path / "ledger.jsonl"
    access = [tmp_path / "access-a.log", tmp_path / "access-b.log"]
    with formation() as cluster:
        servers = [
            gunicorn(
                database=cluster.database_url(),
                workers=2,
                threads=2,
                extra_args=("--access-logfile", str(log), "--access-logformat", ACCESS_FORMAT),
            )
            for log in access
        ]
        with servers[0] as first, servers[1] as second:
            runtimes = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tests.failover_runtime",
                        url,
                        token,
                        *shape(number),
                        str(ledger),
                    ],
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
                for number, url in enumerate([first, second] * (RUNTIMES // 2))
            ]
            try:
                wait_for(
                    lambda: sum(e["kind"] == "chunk" for e in ledger_entries(ledger)) >= KILL_AFTER,
                    60,
                    "the runtimes' first chunks",
                )
                old = cluster.primary()
                killed_at = time.time()
                old.kill()
                outputs = [runtime.communicate(timeout=180)[0].decode() for runtime in runtimes]
            finally:
                for runtime in runtimes:
                    if runtime.poll() is None:
                        runtime.kill()
            for runtime, output in zip(runtimes, outputs, strict=True):
                assert runtime.returncode == 0, output[-4000:]
            promoted = cluster.primary()
            assert promoted is not old

        entries = ledger_entries(ledger)
        with cluster.connect() as checker:
            executions = checker.execute(
                "SELECT e.id, e.status FROM ob_job_execution e "
                "JOIN ob_job_instance i ON i.id = e.job_instance_id WHERE i.job_name = %s",
                [JOB_NAME],
            ).fetchall()
            steps = {
                row[0]: row[1:]
                for row in checker.execute(
                    "SELECT s.id, s.job_execution_id, s.status, s.version, s.read_count, "
                    "s.written_count, s.committed_count, s.checkpoint FROM ob_step_execution s "
                    "JOIN ob_job_execution e ON e.id = s.job_execution_id "
                    "JOIN ob_job_instance i ON i.id = e.job_instance_id WHERE i.job_name = %s",
                    [JOB_NAME],
                ).fetchall()
            }

    chunks = [entry for entry in entries if entry["kind"] == "chunk"]
    ended = [entry for entry in entries if entry["kind"] == "job"]
    before = [chunk for chunk in chunks if chunk["at"] < killed_at]
    after = [chunk for chunk in chunks if chunk["at"] > killed_at]
    window = min(chunk["at"] for chunk in after) - killed_at
    answered = statuses(access)
    print(  # the figures the closing note and docs/deployment.md quote
        f"\nfailover: {len(before)} chunks acknowledged before the kill, {len(after)} after; "
        f"window (kill → first acknowledged write) {window:.2f} s; "
        f"answers by status {dict(sorted(answered.items()))}"
    )

    # The kill came mid-run, and the runtimes carried on by themselves.
    assert len(before) >= KILL_AFTER
    assert len(ended) == RUNTIMES * JOBS
    assert window < 30  # the client's retry budget (half the default lease TTL)
    # No server answered 500; 503 (unavailable) is the only 5xx, during the switch.
    assert not {status for status in answered if status >= 500} - {503}, answered
    # Every job COMPLETED, one attempt each (none failed and was restarted).
    assert len(executions) == RUNTIMES * JOBS
    assert {status for _, status in executions} == {"COMPLETED"}
    # Every acknowledged chunk is on the new primary: its step at least at the
    # version the answer carried.
    for chunk in chunks:
        assert steps[chunk["step"]][2] >= chunk["version"], chunk
    # Every record processed exactly once: the ledger's chunks of each
    # execution cover its records once, and the stored counts and checkpoint agree.
    records: dict[int, list[int]] = defaultdict(list)
    for chunk in chunks:
        records[chunk["execution"]].extend(range(chunk["first"], chunk["last"] + 1))
    total = CHUNKS * SIZE
    assert len(records) == RUNTIMES * JOBS
    for execution, processed in records.items():
        assert sorted(processed) == list(range(total)), execution
    assert len(steps) == RUNTIMES * JOBS
    for execution, status, _, read, written, committed, checkpoint in steps.values():
        assert (status, read, written, committed) == ("COMPLETED", total, total, CHUNKS), execution
        assert offset_of(checkpoint) == total
