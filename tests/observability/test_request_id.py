"""``X-Request-ID`` (issue 9, point 4): on every response, taken from the request
when it is a sane token, else generated, and carried by every event."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from oxide_batch.observability.events import accept_request_id, current_request_id

GENERATED = re.compile(r"[0-9a-f]{32}")


@pytest.mark.parametrize(
    "candidate", ["abc", "a" * 128, "trace:0af7651916cd43dd-8448eb211c80319c", "A.b_c-1:2"]
)
def test_a_sane_request_id_is_kept(candidate):
    assert accept_request_id(candidate) == candidate


@pytest.mark.parametrize(
    "candidate", [None, "", "a" * 129, "has space", "semi;colon", "new\nline", "é", "<script>"]
)
def test_anything_else_is_replaced_by_a_generated_id(candidate):
    generated = accept_request_id(candidate)
    assert GENERATED.fullmatch(generated)
    assert generated != accept_request_id(candidate)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "status"),
    [("/healthz", 200), ("/no/such/page", 404), ("/api/v1/descriptor", 401), ("/metrics", 200)],
)
def test_every_response_carries_the_request_id(path, status):
    client = Client()
    echoed = client.get(path, HTTP_X_REQUEST_ID="client-id-1")
    assert (echoed.status_code, echoed["X-Request-ID"]) == (status, "client-id-1")
    replaced = client.get(path, HTTP_X_REQUEST_ID="not a token")
    assert GENERATED.fullmatch(replaced["X-Request-ID"])
    first, second = client.get(path), client.get(path)
    assert GENERATED.fullmatch(first["X-Request-ID"])
    assert first["X-Request-ID"] != second["X-Request-ID"]
    assert current_request_id() is None  # unbound after each request


@pytest.mark.django_db(transaction=True)
def test_the_events_of_a_request_carry_its_id(superuser_client, events, fresh_metrics):
    response = superuser_client.post(
        "/api/v1/instances",
        {"job_name": "import_job", "identifying_parameters": {"run": "sentinel"}},
        format="json",
        HTTP_X_REQUEST_ID="req-42",
    )
    assert response.status_code == 201, response.content
    assert response["X-Request-ID"] == "req-42"
    created = events.named("instance.created")
    assert [event["request_id"] for event in created] == ["req-42"]
    [request] = events.named("api.request")
    assert (request["route"], request["method"], request["status"], request["request_id"]) == (
        "api/v1/instances",
        "POST",
        201,
        "req-42",
    )
    assert all("sentinel" not in line for line in events.lines)


@pytest.mark.django_db
def test_a_problem_response_carries_the_request_id():
    response = Client().get("/api/v1/executions/5", HTTP_X_REQUEST_ID="trace-42")
    assert response.status_code == 401
    assert response["X-Request-ID"] == "trace-42"
    assert response.json()["request_id"] == "trace-42"
