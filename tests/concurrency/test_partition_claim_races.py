"""Remote partition claims on PostgreSQL with real threads and separate
connections (issue 43): 16 claimants race for one step's partitions; each
partition goes to exactly one worker step, and no claimant ever waits on
another's row lock — every claim runs with a tiny ``lock_timeout``, so a wait
would fail it (``SKIP LOCKED`` on the partitions, ``FOR SHARE`` on the parent)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.repository.claims import NothingClaimed
from tests.concurrency.support import run_in_threads
from tests.repository.test_partitions import make_family, plan, read_plan

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
CLAIMANTS = 16
PARTITIONS = 40


def test_sixteen_claimants_take_each_partition_once_without_waiting_on_a_lock(repo, clock):
    family = make_family(repo, clock)
    keys = [f"k{index:02d}" for index in range(PARTITIONS)]
    plan(repo, family.parent.id, *keys)
    barrier = threading.Barrier(CLAIMANTS)

    def claimant(index: int) -> list[int]:
        token = index.to_bytes(16, "big")
        claimed: list[int] = []
        barrier.wait()
        while True:
            with repo.begin() as uow:
                with connection.cursor() as cursor:
                    # A wait on any row lock longer than this fails the claim.
                    cursor.execute("SET LOCAL lock_timeout = '20ms'")
                claim = uow.claim_step_partition(family.parent.id, token)
                uow.commit()
            if not claim.claimed:
                assert claim.reason is NothingClaimed.ALL_ASSIGNED
                return claimed
            assert claim.partition is not None
            claimed.append(claim.partition.id)

    outcomes = run_in_threads(CLAIMANTS, claimant, timeout=120)
    assert [outcome.error for outcome in outcomes if not outcome.ok] == []
    claimed = [pk for outcome in outcomes for pk in outcome.value]
    assert len(claimed) == PARTITIONS
    assert len(set(claimed)) == PARTITIONS  # each exactly once
    assert sum(1 for outcome in outcomes if outcome.value) > 1  # they did race
    stored = read_plan(repo, family.parent.id)
    assert {p.status for p in stored} == {S.STARTED}
    workers = dict(
        models.StepExecution.objects.filter(claimed_partition_id__isnull=False).values_list(
            "id", "claimed_partition_id"
        )
    )
    assert len(workers) == PARTITIONS  # one worker step per claim, no orphan
    assert {p.worker_step_execution_id: p.id for p in stored} == workers
    assert {p.retries for p in stored} == {0}


def test_two_watchdogs_at_once_make_one_decision_per_worker(repo, clock, settings):
    """Both read the same expired worker; the worker step's lock orders them:
    one decision, the other replays it."""
    from datetime import timedelta

    from oxide_batch.repository.claims import WorkerRecoveryOutcome

    settings.OXIDE_BATCH_LEASE_TTL = timedelta(seconds=30)
    family = make_family(repo, clock)
    plan(repo, family.parent.id, "a")
    with repo.begin() as uow:
        claim = uow.claim_step_partition(family.parent.id, b"\x01" * 16)
        uow.commit()
    assert claim.worker_step is not None
    clock.advance(timedelta(seconds=31))
    barrier = threading.Barrier(2)

    def watchdog(index: int):
        with repo.begin() as uow:
            barrier.wait()
            result = uow.recover_partition_worker(
                claim.worker_step.id,
                actor=f"watchdog@{index}",
                reason_code="LEASE_EXPIRED",
                failure_id=index + 1,
            )
            uow.commit()
        return result

    outcomes = run_in_threads(2, watchdog)
    assert [outcome.error for outcome in outcomes if not outcome.ok] == []
    results = sorted((outcome.value for outcome in outcomes), key=lambda r: r.outcome.value)
    assert [r.outcome for r in results] == [
        WorkerRecoveryOutcome.RECOVERED,
        WorkerRecoveryOutcome.REPLAYED,
    ]
    assert results[0].record == results[1].record
    assert models.WorkerRecovery.objects.count() == 1
    (partition,) = read_plan(repo, family.parent.id)
    assert partition.status is S.FAILED
