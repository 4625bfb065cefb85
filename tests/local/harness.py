"""The exactly-once harness (issue 42): run :mod:`tests.local.import_job` in a
process of its own, SIGKILL it at seeded random moments after its step started,
take the killed run over at once (the operator's recovery with an override: the
worker is known to be gone), restart it, and finally let it finish. Then read
what the table and the repository say. Used by tests/local/test_exactly_once.py
(a few kills) and bench/exactly_once.py (the 100-kill soak); Django must be set
up on the database the job writes to.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import connection

from oxide_batch import models
from oxide_batch.api import deps
from oxide_batch.domain.errors import OxideBatchError
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.local import LocalRuntime
from oxide_batch.services.audit import Actor
from tests.local.records import Record, duplicates

ROOT = Path(__file__).resolve().parents[2]
JOB = "exactly_once"
ACTIVE = ("STARTING", "STARTED", "STOPPING")
START_TIMEOUT = 60.0
TAKEOVER_ATTEMPTS = 20


@dataclass
class Outcome:
    """What a harness run did and found."""

    kills: int = 0
    runs: int = 0
    seconds: float = 0.0
    rows: int = 0
    distinct: int = 0
    duplicates: dict[int, int] = field(default_factory=dict)
    written_count: int = -1
    read_count: int = -1
    checkpoint: int = -1
    status: str = ""
    kill_offsets: list[int] = field(default_factory=list)


def job_command(
    *,
    records: int,
    chunk: int,
    run: str,
    pause: float = 0.001,
    user: str | None = None,
    url: str | None = None,
    token: str | None = None,
) -> list[str]:
    """The job's command line: the local runtime, or the HTTP client with ``url``."""
    command = [sys.executable, "-m", "tests.local.import_job"]
    command += ["--records", str(records), "--chunk", str(chunk), "--run", run]
    command += ["--pause", str(pause)]
    if user:
        command += ["--user", user]
    if url:
        command += ["--url", url, "--token", token or ""]
    return command


def take_over() -> None:
    """Recover the killed run's execution (MARK_FAILED, with an override: its
    worker is gone) so that the next launch restarts it; again while a write
    the killed process sent just before it died lands in between."""
    service = deps.operator_service()
    for attempt in range(TAKEOVER_ATTEMPTS):
        execution = (
            models.JobExecution.objects.filter(job_name=JOB, status__in=ACTIVE)
            .order_by("-id")
            .first()
        )
        if execution is None:
            return
        try:
            proposal = service.propose(execution.id)
            service.recover(
                execution.id,
                expected_version=proposal.version,
                disposition=RecoveryDisposition.MARK_FAILED,
                reason_code="UNKNOWN_EFFECT" if proposal.unknown_commit else "WORKER_LOST",
                evidence_digest=proposal.evidence_digest,
                actor=Actor("harness", None),
                operation_id=f"harness-{execution.id}-{attempt}",
                override_note="SIGKILLed by the exactly-once harness",
            )
        except OxideBatchError:
            time.sleep(0.05)
    raise AssertionError("the killed run could not be taken over")


class Runs:
    """The job under ``--fork``: one Python process with Django set up, forking a
    process per run (:mod:`tests.local.import_job`)."""

    def __init__(self, command: list[str], environment: Mapping[str, str], log: Any) -> None:
        self.log = log
        self.zygote = subprocess.Popen(
            [*command, "--fork"],
            cwd=ROOT,
            env=dict(environment),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )

    def _line(self) -> str:
        assert self.zygote.stdout is not None
        line = self.zygote.stdout.readline()
        if not line:
            self.log.seek(0)
            raise AssertionError(f"the job's process ended:\n{self.log.read()[-4000:]}")
        return line.strip()

    def start(self) -> tuple[int, int]:
        """Fork a run; once its step started: the offset it started at, its pid."""
        assert self.zygote.stdin is not None
        self.zygote.stdin.write("run\n")
        self.zygote.stdin.flush()
        line = self._line()
        if not line.startswith("started "):
            self.log.seek(0)
            raise AssertionError(f"the job did not start ({line!r}):\n{self.log.read()[-4000:]}")
        _, offset, pid = line.split()
        return int(offset), int(pid)

    def end(self) -> tuple[int, bool]:
        """Once the run ended: its exit status, and whether it said ``done``."""
        done = False
        while True:
            line = self._line()
            if line == "done":
                done = True
            elif line.startswith("exit "):
                return int(line.split()[1]), done

    def close(self) -> None:
        assert self.zygote.stdin is not None
        self.zygote.stdin.close()
        self.zygote.wait(timeout=START_TIMEOUT)


def run_with_kills(
    command: list[str],
    environment: Mapping[str, str],
    *,
    kills: int,
    seed: int,
    window: tuple[float, float],
) -> Outcome:
    """Run ``command`` until it finished, SIGKILLing it ``kills`` times at a
    moment drawn from ``window`` (seconds after it started its step; seeded),
    each time taking the killed run over before the restart."""
    schedule = random.Random(seed)  # nosec B311 # a reproducible schedule, not a secret
    outcome = Outcome()
    began = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:
        runs = Runs(command, environment, log)
        try:
            while True:
                offset, pid = runs.start()
                outcome.runs += 1
                if outcome.kills >= kills:
                    status, done = runs.end()  # the last run, to its end
                    break
                outcome.kill_offsets.append(offset)
                time.sleep(schedule.uniform(*window))
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                status, done = runs.end()
                if done:
                    status = 0  # it finished before the kill: no more kills
                    break
                outcome.kills += 1
                take_over()
            if status != 0 or not done:
                log.seek(0)
                raise AssertionError(f"the last run failed ({status}):\n{log.read()[-4000:]}")
        finally:
            runs.close()
    outcome.seconds = time.monotonic() - began
    return read_outcome(outcome)


def read_outcome(outcome: Outcome) -> Outcome:
    """The table and the repository, as they are now."""
    outcome.rows = Record.objects.count()
    outcome.distinct = Record.objects.values("key").distinct().count()
    outcome.duplicates = duplicates()
    execution = models.JobExecution.objects.filter(job_name=JOB).order_by("-id").first()
    if execution is None:
        return outcome
    outcome.status = execution.status
    step = models.StepExecution.objects.filter(job_execution_id=execution.id).first()
    if step is not None:
        outcome.written_count = step.written_count
        outcome.read_count = step.read_count
        state = LocalRuntime().checkpoint(step.id).checkpoint
        outcome.checkpoint = -1 if state is None else int(state.payload["offset"])
    return outcome


def job_environment(database_url: str, secret_key: str) -> dict[str, str]:
    """The job process's environment: the settings on ``database_url``."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DATABASE_URL": database_url,
        "SECRET_KEY": secret_key,
        "LOG_LEVEL": "WARNING",
        "OXIDE_BATCH_EVENTS_LEVEL": "WARNING",
    }


def close() -> None:
    """Close this process's connection (the harness reads between runs)."""
    connection.close()
