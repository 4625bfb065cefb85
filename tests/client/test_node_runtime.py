"""The Node.js runtime of ``examples/node/runtime.mjs`` (built-in ``fetch``, no
packages) against a live server: it reads the served JSON schema (its
``servers`` entry, each operation by ``operationId``), launches, creates its
step STARTED, commits chunks, fails mid-way (``--fail-after``) and ends its
step and execution FAILED; run again, it restarts — the new step takes over the
failed step's checkpoint and resumes there — and finishes the step with the
last chunk. The database shows two attempts, FAILED then COMPLETED, every item
written once, and the counts of every chunk.

Skipped without Node.js 20 or newer, except under CI (``CI`` set), where it
fails: the project's machines have Node.js."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.roles import RUNTIME
from tests.live import ROOT, token_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

RUNTIME_SCRIPT = ROOT / "examples" / "node" / "runtime.mjs"
ITEMS = 10
CHUNK = 3
FAIL_AFTER = 2  # chunks committed by the first attempt: items 0..5
CHUNKS = -(-ITEMS // CHUNK)  # 4: 0-2, 3-5, 6-8, 9
JOB = "node_import"
OUT = "items.jsonl"


def node() -> str:
    """The ``node`` executable (20 or newer: the built-in ``fetch``)."""
    found = shutil.which("node")
    version = ""
    if found is not None:
        version = subprocess.run(
            [found, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout.strip()
    if found is None or int(version.lstrip("v").split(".")[0] or 0) < 20:
        message = f"Node.js 20 or newer is needed (found: {found} {version})"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


Run = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def run_runtime(live_server: Any, tmp_path: Path) -> Run:
    """Runs the Node runtime against the live server as a batch-runtime user,
    writing its items to ``tmp_path/items.jsonl``; more arguments follow."""
    executable = node()
    token = token_for("node-runtime", RUNTIME)

    options = ["--url", live_server.url, "--job", JOB, "--items", str(ITEMS)]
    options += ["--chunk", str(CHUNK), "--out", str(tmp_path / OUT)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [executable, str(RUNTIME_SCRIPT), *options, *args],
            env={**os.environ, "OXIDE_BATCH_TOKEN": token},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return run


def offset(step: models.StepExecution) -> int:
    assert step.checkpoint is not None
    found: int = json.loads(step.checkpoint)["payload"]["offset"]
    return found


def counts(step: models.StepExecution) -> dict[str, int]:
    return {
        "read": step.read_count,
        "processed": step.processed_count,
        "written": step.written_count,
        "filtered": step.filtered_count,
        "committed": step.committed_count,
        "rolled_back": step.rolled_back_count,
    }


def test_the_node_runtime_fails_restarts_at_its_checkpoint_and_completes(
    run_runtime: Run, tmp_path: Path
) -> None:
    failed = run_runtime("--fail-after", str(FAIL_AFTER))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "FAILED: the reader failed before chunk 3" in failed.stderr
    completed = run_runtime()
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert f"from item {FAIL_AFTER * CHUNK}" in completed.stdout

    instance = models.JobInstance.objects.get(job_name=JOB)
    first, second = models.JobExecution.objects.filter(job_instance=instance).order_by("attempt")
    assert models.JobExecution.objects.filter(job_instance=instance).count() == 2
    assert (first.attempt, first.status, first.failure_category) == (1, "FAILED", "USER_COMPONENT")
    assert (second.attempt, second.status, second.exit_code) == (2, "COMPLETED", "COMPLETED")
    # Each launch said who ran it (decision 310): this machine, a Node process.
    for attempt in (first, second):
        assert attempt.worker_host == socket.gethostname()[:255]
        assert attempt.worker_pid is not None
        assert (attempt.worker_client or "").startswith("node-example ")

    (failed_step,) = models.StepExecution.objects.filter(job_execution=first)
    (done_step,) = models.StepExecution.objects.filter(job_execution=second)
    assert (failed_step.step_name, failed_step.status) == ("load", "FAILED")
    # The error's detail went with the failure (issue 40): type and message kept.
    detail = models.FailureDetail.objects.get(step_execution=failed_step)
    assert (detail.type, detail.failure_id) == ("Error", failed_step.failure_id)
    assert detail.message == "the reader failed before chunk 3 (--fail-after)"
    assert detail.traceback is None  # the default keeps type and message
    assert (
        models.FailureDetail.objects.get(job_execution=first, step_execution=None).type == "Error"
    )
    assert offset(failed_step) == FAIL_AFTER * CHUNK
    assert counts(failed_step) == {
        "read": FAIL_AFTER * CHUNK,
        "processed": FAIL_AFTER * CHUNK,
        "written": FAIL_AFTER * CHUNK,
        "filtered": 0,
        "committed": FAIL_AFTER,  # one per chunk: `committed` left out, its default
        "rolled_back": 0,
    }
    # The restart's step took over the failed one's checkpoint and counts, and
    # the last chunk finished it.
    assert (done_step.step_name, done_step.status, done_step.exit_code) == (
        "load",
        "COMPLETED",
        "LOADED",
    )
    assert offset(done_step) == ITEMS
    assert counts(done_step) == {
        "read": ITEMS,
        "processed": ITEMS,
        "written": ITEMS,
        "filtered": 0,
        "committed": CHUNKS,
        "rolled_back": 0,
    }
    # The first attempt's launch, step, FAILED step and execution transitions
    # and its chunks; the second's launch, step, chunks (the last finishing the
    # step) and one transition: versions say no write was repeated.
    assert (failed_step.version, done_step.version) == (1 + FAIL_AFTER + 1, 1 + 2)
    assert (first.version, second.version) == (2, 2)

    # Every item written once: the restart resumed at the checkpoint.
    written = [json.loads(line) for line in (tmp_path / OUT).read_text().splitlines()]
    assert [line["item"] for line in written] == list(range(ITEMS))
    assert {line["item"] for line in written if line["attempt"] == 1} == set(
        range(FAIL_AFTER * CHUNK)
    )


def test_a_launch_of_a_completed_instance_is_refused_with_exit_status_4(
    run_runtime: Run,
) -> None:
    assert run_runtime().returncode == 0
    again = run_runtime()
    # The instance COMPLETED: nothing runs again.
    assert again.returncode == 4, again.stdout + again.stderr
    assert "completed_instance" in again.stderr
    assert models.JobExecution.objects.filter(job_name=JOB).count() == 1
