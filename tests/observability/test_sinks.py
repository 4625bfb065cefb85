"""A failing log or metrics sink never changes an outcome (issue 9, point 3)."""

from __future__ import annotations

import logging

import pytest

from oxide_batch import models
from oxide_batch.observability import events as event_module
from oxide_batch.observability import metrics
from oxide_batch.observability.events import EVENT_LOGGER
from tests.helpers import launch

pytestmark = pytest.mark.django_db(transaction=True)


class Raising(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.calls = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.calls += 1
        raise RuntimeError("the log pipeline is down")

    def handleError(self, record: logging.LogRecord) -> None:
        raise RuntimeError("and so is its error handling")


class Broken:
    def labels(self, *args, **kwargs):
        raise RuntimeError("the metrics sink is down")


@pytest.fixture
def raising_handler():
    logger = logging.getLogger(EVENT_LOGGER)
    handler, saved = Raising(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(saved)


def create_instance(client):
    return client.post(
        "/api/v1/instances",
        {"job_name": "import_job", "identifying_parameters": {"run": "x"}},
        format="json",
    )


def test_a_log_handler_that_raises_does_not_change_the_api_response(
    superuser_client, schema_row, request
):
    expected = superuser_client.get("/api/v1/descriptor")
    assert expected.status_code == 200
    handler = request.getfixturevalue("raising_handler")
    response = superuser_client.get("/api/v1/descriptor")
    assert (response.status_code, response.json()) == (200, expected.json())
    assert response["Content-Type"] == expected["Content-Type"]
    created = create_instance(superuser_client)
    assert created.status_code == 201, created.content
    assert models.JobInstance.objects.filter(pk=created.json()["id"]).exists()
    assert handler.calls >= 3  # api.request twice, instance.created after its commit


def test_a_failing_metrics_sink_does_not_change_the_api_response(
    superuser_client, schema_row, monkeypatch
):
    for name in ("API_REQUESTS", "REPOSITORY_OPERATIONS", "REPOSITORY_LATENCY", "TRANSITIONS"):
        monkeypatch.setattr(metrics, name, Broken())
    assert superuser_client.get("/api/v1/descriptor").status_code == 200
    created = create_instance(superuser_client)
    assert created.status_code == 201, created.content
    assert created["X-Request-ID"]


def test_an_event_that_fails_after_commit_does_not_fail_the_commit(repo, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("sink down")

    monkeypatch.setattr(event_module, "emit", broken)
    execution = launch(repo)  # commits; the on_commit callbacks raise inside
    assert models.JobExecution.objects.filter(pk=execution.id).exists()
