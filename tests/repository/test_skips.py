"""Skip counts and the skip ledger in the repository (contract §2.3.3
"Skips"; decisions 400-406): a chunk commit's skipped items add to the step's
skip counts in its compare-and-swap — the same on both adapters — and, in the
Django adapter, become the ledger's rows in the same transaction (one
INSERT); a refused commit writes neither. Partitions copy their worker's
skip counts, the parent's aggregate sums them, a restarted step carries
them; the purge deletes the ledger with its instance."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import (
    InvalidSkipItem,
    SkipNotEligible,
    StaleVersion,
)
from oxide_batch.domain.execution import MAX_COUNT, ExecutionCounts, FailureSummary
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.retention import PurgeCriteria
from oxide_batch.domain.skips import SkipEntry, SkipPhase, skip_counts
from oxide_batch.domain.status import FailureCategory
from tests.helpers import key, launch, move
from tests.repository.test_partitions import assign, complete, make_family, plan, run_worker

pytestmark = pytest.mark.contract
S = BatchStatus
USER = FailureCategory.USER_COMPONENT
CHUNK = ExecutionCounts(read=10, processed=10, written=8, committed=1)


def entry(phase: str, item: str, detail: FailureDetail | None = None) -> SkipEntry:
    return SkipEntry(SkipPhase(phase), item, USER, detail)


def started_step(repo, clock, name="load", job="skip_job"):
    execution = move(repo, launch(repo, key(job)), S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, name, started=True)
        uow.commit()
    return execution, step


def commit(repo, step, *skips, counts=CHUNK, **extra):
    with repo.begin() as uow:
        written = uow.commit_chunk(step.id, step.version, counts, skips=skips, **extra)
        uow.commit()
    return written


# -- the domain rule -------------------------------------------------------------------


def test_an_ineligible_category_is_never_a_skip_entry():
    for category in FailureCategory:
        if category.is_policy_eligible:
            assert SkipEntry(SkipPhase.READ, "1", category).category is category
        else:
            with pytest.raises(SkipNotEligible):
                SkipEntry(SkipPhase.READ, "1", category)


@pytest.mark.parametrize("item", ["", " a", "a\n", "a\u200bb", "x" * 257, "\ud800"])
def test_an_item_outside_the_rule_is_refused(item):
    with pytest.raises(InvalidSkipItem):
        SkipEntry(SkipPhase.READ, item, USER)


def test_skip_counts_count_each_phase():
    counts = skip_counts([entry("read", "1"), entry("write", "2"), entry("write", "3")])
    assert (counts.read_skip, counts.process_skip, counts.write_skip) == (1, 0, 2)
    assert counts.skipped == 3
    assert counts.as_dict() == ExecutionCounts().as_dict()  # the six stay 0


def test_a_skip_count_past_the_bound_is_count_exhausted():
    from oxide_batch.domain.errors import CountExhausted

    with pytest.raises(CountExhausted):
        ExecutionCounts(write_skip=MAX_COUNT).plus(ExecutionCounts(write_skip=1))


# -- both adapters: the counts -----------------------------------------------------------


def test_skips_add_to_the_step_skip_counts_exactly(repo, clock):
    _, step = started_step(repo, clock)
    step = commit(repo, step, entry("read", "1"), entry("process", "2"), entry("process", "3"))
    step = commit(repo, step, entry("write", "4"))
    step = commit(repo, step)
    with repo.begin() as uow:
        stored = uow.get_step_execution(step.id)
    assert stored.counts == ExecutionCounts(
        read=30,
        processed=30,
        written=24,
        committed=3,
        read_skip=1,
        process_skip=2,
        write_skip=1,
    )


def test_a_stale_commit_adds_no_skip_count(repo, clock):
    _, step = started_step(repo, clock)
    with pytest.raises(StaleVersion), repo.begin() as uow:
        uow.commit_chunk(step.id, step.version - 1, CHUNK, skips=[entry("read", "1")])
    with repo.begin() as uow:
        assert uow.get_step_execution(step.id).counts == ExecutionCounts()


def test_a_restarted_step_carries_its_skip_counts(repo, clock):
    execution, step = started_step(repo, clock)
    step = commit(repo, step, entry("process", "7"), entry("write", "8"))
    with repo.begin() as uow:
        failure = FailureSummary(USER, 3)
        uow.transition_step_execution(
            step.id, step.version, LifecycleTransition(S.FAILED, failure=failure)
        )
        execution = uow.get_job_execution(execution.id)
        uow.transition_job_execution(
            execution.id,
            execution.version,
            LifecycleTransition(S.FAILED, failure=failure),
            by_runtime=True,
        )
        uow.commit()
    restart = move(repo, launch(repo, key("skip_job")), S.STARTED, clock=clock)
    with repo.begin() as uow:
        again = uow.create_step_execution(restart.id, "load", started=True)
        uow.commit()
    assert (again.counts.process_skip, again.counts.write_skip) == (1, 1)
    assert again.counts.committed == 1


def test_partitions_copy_their_worker_skip_counts_and_the_parent_sums_them(repo, clock):
    family = make_family(repo, clock, "w1", "w2")
    partitions = plan(repo, family.parent.id, "a", "b")
    totals = []
    for (partition_key, worker_name), skips in zip(
        (("a", "w1"), ("b", "w2")),
        ((entry("read", "a1"), entry("write", "a2")), (entry("process", "b1"),)),
        strict=True,
    ):
        worker = family.workers[worker_name]
        assigned = assign(repo, partitions[partition_key], worker.id)
        started = run_worker(repo, clock, worker.id, S.STARTED)
        finished = commit(repo, started, *skips)
        done = run_worker(repo, clock, finished.id, S.COMPLETED)
        completed = complete(repo, assigned, done.id)
        assert completed.counts == done.counts
        totals.append(done.counts)
    with repo.begin() as uow:
        parent = uow.get_step_execution(family.parent.id)
        parent = uow.aggregate_step_partitions(parent.id, parent.version)
        uow.commit()
    assert (parent.counts.read_skip, parent.counts.process_skip, parent.counts.write_skip) == (
        1,
        1,
        1,
    )
    assert parent.counts == totals[0].plus(totals[1])
    with repo.begin() as uow:
        assert uow.get_step_execution(parent.id).counts == parent.counts


# -- the Django adapter: the ledger ---------------------------------------------------------


@pytest.mark.adapter
def test_the_ledger_rows_commit_with_the_chunk(repo, clock):
    execution, step = started_step(repo, clock)
    detail = FailureDetail("ValueError", "bad amount", "Traceback: never kept")
    step = commit(repo, step, entry("read", "r1"), entry("process", "p1", detail))
    step = commit(repo, step, entry("write", "w1"))
    rows = list(
        models.Skip.objects.order_by("id").values_list(
            "phase", "item", "chunk", "category", "type", "message", "job_execution_id"
        )
    )
    assert rows == [
        ("read", "r1", 1, "USER_COMPONENT", None, None, execution.id),
        ("process", "p1", 1, "USER_COMPONENT", "ValueError", "bad amount", execution.id),
        ("write", "w1", 2, "USER_COMPONENT", None, None, execution.id),
    ]
    assert set(models.Skip.objects.values_list("step_execution_id", flat=True)) == {step.id}


@pytest.mark.adapter
def test_a_rolled_back_unit_of_work_leaves_no_ledger_row_and_no_count(repo, clock):
    _, step = started_step(repo, clock)
    with repo.begin() as uow:
        uow.commit_chunk(step.id, step.version, CHUNK, skips=[entry("read", "1")])
        # no commit: the unit of work rolls back
    assert not models.Skip.objects.exists()
    with repo.begin() as uow:
        assert uow.get_step_execution(step.id).counts == ExecutionCounts()


@pytest.mark.adapter
def test_a_commit_with_skips_is_one_insert_more_and_without_is_unchanged(repo, clock):
    _, step = started_step(repo, clock)

    def statements(*skips):
        nonlocal step
        with CaptureQueriesContext(connection) as queries, repo.begin() as uow:
            step = uow.commit_chunk(step.id, step.version, CHUNK, skips=skips)
            uow.commit()
        return [
            q["sql"].split()[0]
            for q in queries.captured_queries
            if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))
        ]

    without = statements()
    many = [entry("process", str(n)) for n in range(50)]
    with_skips = statements(*many)
    assert "INSERT" not in without
    assert with_skips.count("INSERT") == 1
    assert [verb for verb in with_skips if verb != "INSERT"] == without
    assert models.Skip.objects.count() == 50


@pytest.mark.adapter
def test_the_purge_deletes_the_ledger_with_its_instance(repo, clock):
    execution, step = started_step(repo, clock)
    step = commit(repo, step, entry("read", "1"), entry("write", "2"))
    _, kept_step = started_step(repo, clock, job="kept_job")
    commit(repo, kept_step, entry("read", "k"))
    with repo.begin() as uow:
        step = uow.transition_step_execution(
            step.id, step.version, LifecycleTransition(S.COMPLETED)
        )
        current = uow.get_job_execution(execution.id)
        uow.transition_job_execution(
            current.id, current.version, LifecycleTransition(S.COMPLETED), by_runtime=True
        )
        uow.commit()
    clock.advance(timedelta(days=2))
    with repo.begin() as uow:
        survey = uow.purge_survey(
            PurgeCriteria(clock.now() - timedelta(days=1)), min_age=timedelta(0)
        )
    assert [c.instance_id for c in survey.candidates] == [execution.job_instance_id]
    with repo.begin() as uow:
        uow.apply_purge(survey, min_age=timedelta(0))
        uow.commit()
    assert list(models.Skip.objects.values_list("item", flat=True)) == ["k"]
