"""The operator throttle (oxide_batch.api.throttling): operator actions per user
above OXIDE_BATCH_OPERATOR_THROTTLE_RATE are 429 ``throttled`` with Retry-After
and write nothing; runtimes and readers are never throttled; the count lives in
the database (a table every process shares): two gunicorn servers on one
database share one allowance."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib import error as urlerror
from urllib import request as urlrequest

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection

from oxide_batch import models
from oxide_batch.api import throttling
from oxide_batch.api.docs import schema_document
from oxide_batch.roles import OPERATOR, RUNTIME
from tests.api.conftest import token_client
from tests.api.support import Runtime, ok, problem
from tests.live import gunicorn, token_for
from tests.security.routes import operator_routes

User = get_user_model()

RATE = "3/min"
LIMIT = 3


@pytest.fixture(autouse=True)
def counted_from_nothing(db: None) -> None:
    """Every test counts from an empty throttle cache: counts an earlier test
    committed (a live server's, in the same database) for the same user — role
    clients are made once per process — would otherwise be there already."""
    throttling.throttle_cache().clear()


@pytest.fixture
def limited(settings: Any) -> None:
    settings.OXIDE_BATCH_OPERATOR_THROTTLE_RATE = RATE


def hold(operator: Runtime, instance_id: int, operation_id: str, *, place: bool = True) -> Any:
    body = {"reason_code": "LEGAL_HOLD", "operation_id": operation_id}
    path = f"instances/{instance_id}/hold"
    return operator.put(path, body) if place else operator.delete(path, body)


def assert_throttled(response: Any) -> dict[str, Any]:
    body = problem(response, 429, "throttled")
    wait = int(response["Retry-After"])
    assert 1 <= wait <= 60, wait  # a minute's window
    assert str(wait) in body["detail"], body
    return body


@pytest.mark.django_db
@pytest.mark.usefixtures("limited")
def test_the_operator_action_past_the_rate_is_429_and_writes_nothing(
    rt: Runtime, operator: Runtime
) -> None:
    instance, _ = rt.launch()
    for index in range(LIMIT):
        ok(hold(operator, instance["id"], f"hold-{index}", place=index % 2 == 0))
    before = list(models.RetentionRecord.objects.order_by("pk").values())
    held = models.JobInstance.objects.values().get(pk=instance["id"])

    assert_throttled(hold(operator, instance["id"], "hold-late", place=False))

    assert list(models.RetentionRecord.objects.order_by("pk").values()) == before
    assert models.JobInstance.objects.values().get(pk=instance["id"]) == held
    assert len(before) == LIMIT


@pytest.mark.django_db
@pytest.mark.usefixtures("limited")
def test_one_allowance_per_user_across_every_operator_endpoint(
    rt: Runtime, operator: Runtime
) -> None:
    execution = rt.started()
    stop = {"expected_version": execution["version"], "operation_id": "stop-1"}
    ok(operator.post(f"executions/{execution['id']}/stop", stop))
    ok(hold(operator, execution["job_instance_id"], "hold-1"))
    ok(operator.post("purge/survey", {"ended_before": "2020-01-01T00:00:00Z"}))
    abandon = {"expected_version": 1, "reason_code": "R", "operation_id": "abandon-1"}
    assert_throttled(operator.post(f"executions/{execution['id']}/abandon", abandon))

    # Another operator has an allowance of their own.
    other = User.objects.create_user("second-operator")
    other.groups.add(Group.objects.get(name=OPERATOR))
    ok(hold(Runtime(token_client(other)), execution["job_instance_id"], "hold-2"))


@pytest.mark.django_db
@pytest.mark.usefixtures("limited")
def test_runtimes_readers_and_refused_callers_are_never_throttled(
    rt: Runtime, operator: Runtime, viewer: Runtime
) -> None:
    executions = [rt.started(run=str(n)) for n in range(2 * LIMIT)]  # 3 runtime calls each
    execution = executions[0]
    for _ in range(2 * LIMIT):
        operator.get(f"executions/{execution['id']}/recovery-proposal")
        operator.get("audit/operator-requests")
        viewer.get(f"executions/{execution['id']}")
        refused = rt.post(f"executions/{execution['id']}/stop", {"expected_version": 1})
        problem(refused, 403, "permission_denied")  # authorization comes first
    # None of that spent the operator's allowance.
    for index in range(LIMIT):
        ok(hold(operator, execution["job_instance_id"], f"hold-{index}"))
    assert_throttled(hold(operator, execution["job_instance_id"], "hold-late"))


def throttle_keys(username: str) -> list[str]:
    """The throttle cache's rows of the user, read from the table itself."""
    key = f":1:throttle_operator_{User.objects.get(username=username).pk}"
    with connection.cursor() as cursor:
        cursor.execute("SELECT cache_key FROM ob_throttle_cache WHERE cache_key = %s", [key])
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.django_db
def test_off_turns_the_throttle_off(settings: Any, rt: Runtime, operator: Runtime) -> None:
    settings.OXIDE_BATCH_OPERATOR_THROTTLE_RATE = None
    instance, _ = rt.launch()
    for index in range(4 * LIMIT):
        ok(hold(operator, instance["id"], f"hold-{index}"))
    assert throttle_keys("operator-user") == []


@pytest.mark.django_db
@pytest.mark.usefixtures("limited")
def test_the_count_is_a_row_of_the_database_cache(rt: Runtime, operator: Runtime) -> None:
    instance, _ = rt.launch()
    assert throttle_keys("operator-user") == []
    ok(hold(operator, instance["id"], "hold-1"))
    [key] = throttle_keys("operator-user")
    history = throttling.throttle_cache().get(key.removeprefix(":1:"))
    assert isinstance(history, list)
    assert len(history) == 1  # one timestamp per admitted action


@pytest.mark.standalone
def test_every_operator_operation_documents_429_and_no_other_does() -> None:
    document = schema_document()
    operator = {(route.schema_path, route.method.lower()) for route in operator_routes()}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            documents = "429" in operation["responses"]
            assert documents == ((path, method) in operator), (path, method)
            if documents:
                assert "`throttled`" in operation["responses"]["429"]["description"]


# --------------------------------------------------- shared across processes and hosts


def call(base: str, method: str, path: str, token: str, body: Any) -> tuple[int, Any, Any]:
    """(status, headers, JSON) of one request; never raises for an HTTP status."""
    data = json.dumps(body).encode()
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    request = urlrequest.Request(f"{base}/api/v1/{path}", data, headers, method=method)
    try:
        with urlrequest.urlopen(request, timeout=20) as response:
            return response.status, response.headers, json.loads(response.read())
    except urlerror.HTTPError as answer:
        return answer.code, answer.headers, json.loads(answer.read())


@pytest.fixture
def two_servers(django_db_setup: None) -> Iterator[tuple[str, str]]:
    """Two gunicorn servers (two worker processes each) on the one test database,
    both limited to RATE: as two hosts behind a load balancer."""
    environment = {"OXIDE_BATCH_OPERATOR_THROTTLE_RATE": RATE}
    with gunicorn(environment=environment) as a, gunicorn(environment=environment) as b:
        yield a, b
    throttling.throttle_cache().clear()  # a transactional test's flush leaves this table alone


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_servers_share_one_allowance(two_servers: tuple[str, str]) -> None:
    a, b = two_servers
    runtime = token_for("shared-runtime", RUNTIME)
    operator = token_for("shared-operator", OPERATOR)
    status, _, instance = call(a, "POST", "instances", runtime, {"job_name": "shared_job"})
    assert status in (200, 201), instance
    path = f"instances/{instance['id']}/hold"

    answers = []
    for index, (server, method) in enumerate(
        [(a, "PUT"), (a, "DELETE"), (b, "PUT"), (b, "DELETE")]
    ):
        body = {"reason_code": "LEGAL_HOLD", "operation_id": f"shared-{index}"}
        answers.append(call(server, method, path, operator, body))

    assert [status for status, _, _ in answers] == [200, 200, 200, 429], answers
    _, headers, problem_body = answers[3]
    assert headers["Content-Type"].startswith("application/problem+json")
    assert problem_body["code"] == "throttled", problem_body
    assert 1 <= int(headers["Retry-After"]) <= 60
    # The refused release wrote nothing: three records, the hold still placed.
    assert models.RetentionRecord.objects.count() == LIMIT
    assert models.JobInstance.objects.get(pk=instance["id"]).hold_placed_at is not None
