"""A partitioned step run by a real process pool whose worker process of one
partition is SIGKILLed while the others are mid-partition: the pool breaks
(``BrokenProcessPool``) and terminates the healthy workers. The runtime's log
names the pool's break and the partition whose worker died; only that worker
step is FAILED (and the parent and the job carry its failure); the healthy
partitions are STOPPED, never blamed, and a restart reruns all three.

PostgreSQL only: the worker processes send concurrent requests, which the live
server on SQLite (one connection shared by its request threads) cannot take."""

from __future__ import annotations

import logging
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

import pytest

from oxide_batch.client import Partition, StepFailed, StepRun
from oxide_batch.domain.status import BatchStatus
from tests.client.conftest import ScriptedClient
from tests.conftest import on_postgres

pytestmark = pytest.mark.skipif(not on_postgres(), reason="concurrent worker processes")

S = BatchStatus
JOB = "partitioned_import"
PARAMETERS = {"business_date": "2026-07-30"}
KEYS = ["graz", "lyon", "oslo"]
DOOMED = "lyon"
WAIT = 30.0


def worker(meeting: str, step: StepRun, partition: Partition) -> None:
    """One chunk, then: the doomed worker waits until the two others are
    mid-partition and SIGKILLs its own process; the others wait to be stopped."""
    step.commit(read=2, written=2, checkpoint={"offset": 2})
    Path(meeting, partition.key).touch()
    deadline = time.monotonic() + WAIT
    if partition.key == DOOMED:
        while len(list(Path(meeting).iterdir())) < len(KEYS) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(WAIT)


def test_a_sigkilled_worker_breaks_the_pool_and_only_its_partition_is_blamed(
    runtime: ScriptedClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = runtime.job_run(JOB, PARAMETERS)
    caplog.set_level(logging.WARNING, logger="oxide_batch.client.jobs")
    work = partial(worker, str(tmp_path))
    with (
        pytest.raises(StepFailed) as failed,
        run,
        ProcessPoolExecutor(max_workers=len(KEYS)) as pool,
    ):
        run.partitioned_step("load", KEYS, work, executor=pool)

    partitions = {p.key: p for p in runtime.partitions(failed.value.step_id)}
    assert {key: p.status for key, p in partitions.items()} == {
        "graz": S.STOPPED,
        "lyon": S.FAILED,
        "oslo": S.STOPPED,
    }
    dead = partitions[DOOMED]
    lost = runtime.step(dead.worker_step_execution_id or 0)
    assert lost.failure is not None
    parent = runtime.step(failed.value.step_id)
    assert parent.status is S.FAILED
    assert parent.failure == lost.failure
    assert runtime.execution(run.execution.id).failure == lost.failure

    text = caplog.text
    assert "left its step active" not in text
    blamed = [r for r in caplog.records if r.levelno == logging.ERROR and r.exc_info]
    assert [r.getMessage().split(" failed:")[0] for r in blamed] == [f"partition {dead.ordinal}"]
    cause = str(blamed[0].exc_info[1])  # type: ignore[index]
    assert cause.startswith("the process pool broke (BrokenProcessPool)")
    assert f"worker process of partition {dead.ordinal} (pid " in cause
    assert "died while running it" in cause
    for key in ("graz", "oslo"):
        ordinal = partitions[key].ordinal
        assert (
            f"partition {ordinal} stopped: the process pool broke (BrokenProcessPool) because "
            f"the worker process of partition {dead.ordinal} (pid " in text
        )
        assert f"partition {ordinal} (pid" not in text  # a healthy worker is never named dead
    assert "its healthy worker was stopped with the pool" in text
