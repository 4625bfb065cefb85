"""``/metrics`` (issue 9, point 2): the counts of a scripted workload per label,
bounded label values only, cheap cached gauges, and access by setting."""

from __future__ import annotations

import platform
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import InvalidState, StaleVersion
from oxide_batch.observability import metrics
from oxide_batch.services.audit import Actor, Outcome
from oxide_batch.services.bootstrap import operator_service, retention_service
from tests.conftest import accounts_fixture, on_postgres
from tests.helpers import key, launch, move

S = BatchStatus
ALICE = Actor("alice", 7)
_accounts = accounts_fixture(ALICE)


def scrape(client: Client | None = None, **extra) -> list[Metric]:
    response = (client or Client()).get("/metrics", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return list(text_string_to_metric_families(response.content.decode()))


def value(families, sample_name: str, **labels: str) -> float:
    for family in families:
        for sample in family.samples:
            if sample.name == sample_name and sample.labels == labels:
                return float(sample.value)
    return 0.0


@pytest.mark.django_db(transaction=True)
def test_every_label_value_of_every_metric_is_bounded_after_a_workload(workload):
    families, _ = workload
    bounded = metrics.label_sets()
    python = platform.python_version_tuple()
    seen = set()
    for family in families:
        if family.name.startswith("oxide_batch_"):
            allowed = bounded[family.name.removesuffix("_created")]
            for sample in family.samples:
                labels = {k: v for k, v in sample.labels.items() if k != "le"}
                assert set(labels) == set(allowed), (family.name, labels)
                for name, label in labels.items():
                    assert label in allowed[name], (family.name, name, label)
                    seen.add(label)
        elif family.name == "python_info":
            for sample in family.samples:
                assert (sample.labels["major"], sample.labels["minor"]) == python[:2]
        else:
            assert family.name.startswith("process_"), family.name
            assert all(not sample.labels for sample in family.samples)
    assert {"STARTED", "ABANDONED", "APPLY_PURGE", "replayed", "job_instances"} <= seen
    # No id, name or parameter leaked into a label.
    for forbidden in ("import_job", "2026-07-29", "alice", "GIVE_UP", "hold-1", "purge-1"):
        assert forbidden not in seen
    assert not any(label.isdigit() for label in seen)


@pytest.fixture
def workload(repo, clock, settings, fresh_metrics, schema_row, superuser_client):
    """Three attempts, operator requests of every outcome, a hold, a purge and a
    few HTTP requests, then one scrape."""
    settings.OXIDE_BATCH_PURGE_MIN_AGE = timedelta(0)
    settings.OXIDE_BATCH_METRICS_GAUGE_TTL = timedelta(0)
    operator = operator_service(repo, stale_after=timedelta(minutes=15))
    retention = retention_service(repo)
    done = move(repo, launch(repo, key(run="a")), S.STARTED, S.COMPLETED, clock=clock)
    failed = move(repo, launch(repo, key(run="b")), S.STARTED, S.FAILED, clock=clock)
    running = move(repo, launch(repo, key(run="c")), S.STARTED, clock=clock)
    with pytest.raises(StaleVersion), repo.begin() as uow:
        uow.transition_job_execution(running.id, 0, LifecycleTransition(S.STOPPING))

    stop = {"expected_version": running.version, "actor": ALICE, "operation_id": "stop-3"}
    assert operator.stop(running.id, **stop).outcome is Outcome.APPLIED
    assert operator.stop(running.id, **stop).outcome is Outcome.REPLAYED
    operator.stop(done.id, expected_version=0, actor=ALICE, operation_id="stop-1")  # a no-op
    give_up = {"reason_code": "GIVE_UP", "actor": ALICE}
    operator.abandon(failed.id, expected_version=failed.version, operation_id="ab-2", **give_up)
    with pytest.raises(InvalidState):
        operator.abandon(
            running.id, expected_version=running.version, operation_id="ab-3", **give_up
        )
    instance = done.job_instance_id
    retention.place_hold(instance, actor=ALICE, reason_code="LEGAL", operation_id="hold-1")
    retention.release_hold(instance, actor=ALICE, reason_code="LEGAL", operation_id="rel-1")
    clock.advance(timedelta(minutes=1))
    plan = retention.survey(cutoff=clock.now())
    assert retention.apply(plan, actor=ALICE, operation_id="purge-1").counts.job_instances == 2
    assert retention.apply(plan, actor=ALICE, operation_id="purge-1").outcome is Outcome.REPLAYED

    assert superuser_client.get(f"/api/v1/executions/{running.id}").status_code == 200
    assert Client().get("/no/such/page").status_code == 404
    assert Client().get("/static/oxide_batch/no-such.css").status_code == 404
    assert Client().post("/healthz").status_code == 405
    metrics.GAUGES.now = lambda: clock.now() + timedelta(hours=1)
    return scrape(), running


@pytest.mark.django_db(transaction=True)
def test_a_scripted_workload_shows_the_expected_counts_per_label(workload):
    families, running = workload

    def transitions(source: str, target: str) -> float:
        return value(
            families,
            "oxide_batch_lifecycle_transitions_total",
            kind="job",
            from_status=source,
            to_status=target,
        )

    assert transitions("STARTING", "STARTED") == 3
    assert transitions("STARTED", "COMPLETED") == 1
    assert transitions("STARTED", "FAILED") == 1
    assert transitions("FAILED", "ABANDONED") == 1
    assert transitions("STARTED", "STOPPING") == 0  # the stale attempt rolled back

    def requests(action: str, outcome: str) -> float:
        name = "oxide_batch_operator_requests_total"
        return value(families, name, action=action, outcome=outcome)

    assert requests("STOP", "applied") == 2
    assert requests("STOP", "replayed") == 1
    assert requests("ABANDON", "applied") == 1
    assert requests("ABANDON", "rejected") == 1
    assert requests("HOLD", "applied") == requests("RELEASE_HOLD", "applied") == 1
    assert requests("APPLY_PURGE", "applied") == requests("APPLY_PURGE", "replayed") == 1
    assert requests("RECOVER", "applied") == 0

    def purged(kind: str) -> float:
        return value(families, "oxide_batch_purge_rows_deleted_total", kind=kind)

    assert (purged("job_instances"), purged("job_executions"), purged("step_executions")) == (
        2,
        2,
        0,
    )
    batches = "oxide_batch_purge_batches_total"
    assert value(families, batches, outcome="applied") == 1
    assert value(families, batches, outcome="replayed") == 1

    operations = "oxide_batch_repository_operations_total"
    assert value(families, operations, operation="create_job_execution", outcome="ok") == 3
    stale = {"operation": "transition_job_execution", "outcome": "stale_version"}
    assert value(families, operations, **stale) == 1
    assert value(families, operations, operation="apply_purge", outcome="ok") == 1
    latency = "oxide_batch_repository_operation_duration_seconds_count"
    assert value(families, latency, operation="create_job_execution") == 3

    for status in BatchStatus:
        expected = 1 if status is S.STARTED else 0
        assert value(families, "oxide_batch_executions", status=status.value) == expected
        assert value(families, "oxide_batch_executions_estimated", status=status.value) == 0
    assert value(families, "oxide_batch_unresolved_executions") == 1  # stale for an hour
    assert value(families, "oxide_batch_gauges_refreshed_timestamp_seconds") > 0

    api = "oxide_batch_api_requests_total"
    route = "api/v1/executions/<batch_id:execution_id>"
    assert value(families, api, route=route, method="GET", status_class="2xx") == 1
    assert value(families, api, route="unmatched", method="GET", status_class="4xx") == 1
    assert value(families, api, route="static", method="GET", status_class="4xx") == 1
    assert value(families, api, route="healthz", method="POST", status_class="4xx") == 1
    assert not any(
        str(running.id) in sample.labels.get("route", "")
        for family in families
        for sample in family.samples
    )


@pytest.mark.django_db
def test_gauges_are_cached_between_scrapes(repo, clock, settings, fresh_metrics):
    settings.OXIDE_BATCH_METRICS_GAUGE_TTL = timedelta(hours=1)
    before = scrape()
    move(repo, launch(repo), S.STARTED, clock=clock)
    assert value(scrape(), "oxide_batch_executions", status="STARTED") == value(
        before, "oxide_batch_executions", status="STARTED"
    )
    metrics.GAUGES.invalidate()
    assert value(scrape(), "oxide_batch_executions", status="STARTED") == 1


@pytest.mark.django_db
def test_unresolved_executions_follow_the_stale_threshold(repo, clock, settings, fresh_metrics):
    settings.OXIDE_BATCH_METRICS_GAUGE_TTL = timedelta(0)
    move(repo, launch(repo, key(run="a")), S.STARTED, clock=clock)
    move(repo, launch(repo, key(run="b")), S.UNKNOWN, clock=clock)
    metrics.GAUGES.now = clock.now
    assert value(scrape(), "oxide_batch_unresolved_executions") == 1  # UNKNOWN only
    metrics.GAUGES.now = lambda: clock.now() + timedelta(minutes=16)
    assert value(scrape(), "oxide_batch_unresolved_executions") == 2


@pytest.mark.django_db(transaction=True)
def test_per_status_counts_stop_at_the_cap_and_estimate_beyond(
    repo, clock, settings, fresh_metrics
):
    settings.OXIDE_BATCH_METRICS_GAUGE_TTL = timedelta(0)
    settings.OXIDE_BATCH_METRICS_STATUS_COUNT_CAP = 2
    for run in "abc":
        move(repo, launch(repo, key(run=run)), S.STARTED, S.COMPLETED, clock=clock)
    if on_postgres():
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE ob_job_execution")
    families = scrape()
    completed = value(families, "oxide_batch_executions", status="COMPLETED")
    estimated = value(families, "oxide_batch_executions_estimated", status="COMPLETED")
    # PostgreSQL: the planner's estimate (exact here, just analysed); SQLite: the cap.
    assert (completed, estimated) == ((3, 1) if on_postgres() else (2, 0))
    assert value(families, "oxide_batch_executions", status="STARTED") == 0


@pytest.mark.django_db
def test_a_scrape_with_the_database_down_still_answers(fresh_metrics, settings, database_down):
    settings.OXIDE_BATCH_METRICS_GAUGE_TTL = timedelta(0)
    failures = "oxide_batch_gauge_refresh_failures_total"
    before = metrics.REGISTRY.get_sample_value(failures) or 0
    families = scrape()
    assert value(families, failures) == before + 1
    assert not any(f.name == "oxide_batch_executions" and f.samples for f in families)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("allowed", "address", "status"),
    [
        (None, "127.0.0.1", 200),
        (None, "::1", 200),
        (None, "::ffff:127.0.0.1", 200),
        (None, "10.1.2.3", 403),
        (["10.0.0.0/8"], "10.1.2.3", 200),
        (["10.0.0.0/8"], "127.0.0.1", 403),
        (["*"], "192.0.2.1", 200),
        ([], "192.0.2.1", 200),
    ],
)
def test_metrics_are_served_only_to_allowed_addresses(settings, allowed, address, status):
    if allowed is not None:
        settings.OXIDE_BATCH_METRICS_ALLOWED_IPS = allowed
    response = Client().get("/metrics", REMOTE_ADDR=address)
    assert response.status_code == status
    if status == 403:
        assert response.json()["code"] == "permission_denied"
        assert b"oxide_batch" not in response.content


@pytest.mark.django_db
def test_a_metrics_token_is_required_when_set(settings):
    settings.OXIDE_BATCH_METRICS_TOKEN = "s3cret-token"
    client = Client()
    missing = client.get("/metrics")
    assert missing.status_code == 401
    assert missing["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Token s3cret-token").status_code == 401
    assert scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-token")


@pytest.mark.django_db
def test_multiprocess_mode_aggregates_the_worker_files(tmp_path, monkeypatch, settings):
    """With PROMETHEUS_MULTIPROC_DIR (gunicorn with several workers) the exposition
    reads every worker's sample files, plus the database gauges."""
    settings.OXIDE_BATCH_METRICS_GAUGE_TTL = timedelta(0)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    names = {family.name for family in scrape()}
    assert "oxide_batch_executions" in names
    assert not any(name.startswith("process_") for name in names)
