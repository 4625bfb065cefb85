"""A failed COMMIT is visible to monitoring (real PostgreSQL, the fault proxy):
``oxide_batch_commit_failures_total{code}`` counts it and ``repository.commit_failed``
says it at once, with the operations the lost work held — while none of that
work's after-commit events or counters fire, then or later: Django discards
the callbacks of a transaction whose COMMIT failed, even when (reply lost) the
server did commit."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from urllib import request as urlrequest

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from oxide_batch import models
from oxide_batch.client import RuntimeClient
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import CommitOutcomeUnknown, ConcurrentModification
from oxide_batch.observability import metrics
from oxide_batch.observability.events import EVENT_LOGGER
from oxide_batch.repository import hooks
from oxide_batch.roles import RUNTIME
from tests.concurrency.support import run_in_threads
from tests.faults.proxy import COMMIT, FaultProxy
from tests.faults.support import isolate, post, stored
from tests.helpers import key, launch
from tests.live import token_for
from tests.observability.conftest import Capture, Events

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
FAILURES = "oxide_batch_commit_failures_total"
TRANSITIONS = "oxide_batch_lifecycle_transitions_total"
STARTED_FROM_STARTING = {"kind": "job", "from_status": "STARTING", "to_status": "STARTED"}
START = LifecycleTransition(BatchStatus.STARTED)


@pytest.fixture
def captured() -> Iterator[Events]:
    """The ``oxide_batch.events`` lines at DEBUG, from every thread."""
    event_logger = logging.getLogger(EVENT_LOGGER)
    capture, others = Capture(), Capture()
    saved = event_logger.level
    event_logger.addHandler(capture)
    event_logger.setLevel(logging.DEBUG)
    try:
        yield Events(capture, others)
    finally:
        event_logger.removeHandler(capture)
        event_logger.setLevel(saved)


@pytest.fixture
def fresh() -> Iterator[None]:
    metrics.reset()
    yield
    metrics.reset()


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scraped(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def scrape_in_process() -> Samples:
    response = Client().get("/metrics")
    assert response.status_code == 200
    return scraped(response.content.decode())


@pytest.mark.parametrize(
    ("cut", "durable"),
    [("cut_reply_after", ("STARTED", 1)), ("cut_before", ("STARTING", 0))],
)
@pytest.mark.usefixtures("fresh")
def test_an_unknown_commit_is_counted_and_said_and_nothing_is_said_as_committed(
    cut: str, durable: tuple[str, int], repo, proxied: FaultProxy, direct, captured: Events
):
    execution = launch(repo)
    captured.clear()
    fired = getattr(proxied, cut)(COMMIT)
    with repo.begin() as uow:
        uow.transition_job_execution(execution.id, execution.version, START)
        with pytest.raises(CommitOutcomeUnknown):
            uow.commit()
    assert fired.is_set()
    assert stored(direct, models.JobExecution, execution.id) == durable

    [said] = captured.all
    assert said["event"] == "repository.commit_failed"
    assert (said["severity"], said["outcome"]) == ("ERROR", "commit_outcome_unknown")
    assert said["operations"] == {"transition_job_execution": 1}
    assert said["job_execution_id"] == execution.id
    samples = scrape_in_process()
    assert sample(samples, FAILURES, code="commit_outcome_unknown") == 1
    assert sample(samples, FAILURES, code="concurrent_modification") == 0
    assert sample(samples, TRANSITIONS, **STARTED_FROM_STARTING) == 0

    # The lost work's callbacks never run later either: the next commit on this
    # thread says only its own transition.
    version = durable[1]
    target = S.STOPPING if durable[0] == "STARTED" else S.STARTED
    with repo.begin() as uow:
        moved = uow.transition_job_execution(execution.id, version, LifecycleTransition(target))
        uow.commit()
    transitions = captured.named("execution.transitioned")
    assert [(t["to_status"], t["version"]) for t in transitions] == [(target.value, version + 1)]
    # The prior status is the locked row's: what the lost commit left durable.
    assert transitions[0]["from_status"] == durable[0]
    assert moved.version == version + 1
    assert captured.names().count("repository.commit_failed") == 1


@pytest.mark.usefixtures("fresh")
def test_a_commit_the_server_refuses_is_counted_as_concurrent_modification(repo, captured: Events):
    """SERIALIZABLE write skew: the second COMMIT is refused (40001)."""
    first, second = launch(repo, key(run="a")), launch(repo, key(run="b"))
    captured.clear()
    read, written = threading.Barrier(2), threading.Barrier(2)
    committed = threading.Event()

    def skew(index: int) -> None:
        mine = (first, second)[index]
        with repo.begin() as uow:
            isolate("SERIALIZABLE")
            uow.get_job_execution(first.id)
            uow.get_job_execution(second.id)
            read.wait(10)
            uow.request_execution_stop(mine.id, mine.version, "alice")
            written.wait(10)
            if index == 0:
                uow.commit()
                committed.set()
                return
            assert committed.wait(10)
            with pytest.raises(ConcurrentModification):
                uow.commit()

    outcomes = run_in_threads(2, skew)
    assert all(outcome.ok for outcome in outcomes), [outcome.error for outcome in outcomes]

    [failed] = captured.named("repository.commit_failed")
    assert (failed["severity"], failed["outcome"]) == ("WARNING", "concurrent_modification")
    assert failed["operations"] == {"get_job_execution": 2, "request_execution_stop": 1}
    assert failed["job_execution_id"] == second.id  # the write, not the first read
    stops = captured.named("execution.stop_requested")
    assert [stop["job_execution_id"] for stop in stops] == [first.id]  # the winner only
    samples = scrape_in_process()
    assert sample(samples, FAILURES, code="concurrent_modification") == 1
    assert sample(samples, FAILURES, code="commit_outcome_unknown") == 0


def test_a_served_unknown_commit_shows_on_the_servers_metrics(served: str, proxy: FaultProxy):
    """Through gunicorn: the 503 ``commit_outcome_unknown`` is on its /metrics."""
    client = RuntimeClient(served, token_for("runner", RUNTIME), timeout=20)
    _, execution = client.launch("cut_job", {"run": "1"})
    cut = proxy.cut_reply_after(COMMIT)
    status, _, problem = post(
        f"{served}/api/v1/executions/{execution.id}/transition",
        client.token,
        {"expected_version": execution.version, "status": "STARTED"},
    )
    assert cut.is_set()
    assert (status, problem["code"]) == (503, "commit_outcome_unknown")
    with urlrequest.urlopen(f"{served}/metrics", timeout=20) as answer:
        samples = scraped(answer.read().decode())
    assert sample(samples, FAILURES, code="commit_outcome_unknown") == 1
    assert sample(samples, TRANSITIONS, **STARTED_FROM_STARTING) == 0
    assert (
        sample(
            samples,
            "oxide_batch_repository_operations_total",
            operation="transition_job_execution",
            outcome="ok",
        )
        == 1
    )


class _BrokenSink:
    """An observer whose commit-failure handler raises."""

    def __call__(self, event: object) -> None:
        pass

    def commit_failed(self, failure: object) -> None:
        raise RuntimeError("sink down")


@pytest.mark.usefixtures("fresh")
def test_a_failing_observer_does_not_change_the_commits_error(repo, proxied: FaultProxy):
    execution = launch(repo)
    broken = _BrokenSink()
    hooks.register(broken)
    try:
        proxied.cut_reply_after(COMMIT)
        with repo.begin() as uow:
            uow.transition_job_execution(execution.id, execution.version, START)
            with pytest.raises(CommitOutcomeUnknown):
                uow.commit()
    finally:
        hooks.unregister(broken)
    assert metrics.REGISTRY.get_sample_value(FAILURES, {"code": "commit_outcome_unknown"}) == 1
