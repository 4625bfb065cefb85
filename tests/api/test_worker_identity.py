"""Who runs it (decision 310): a launch, a claim and a step's creation carry
``worker: {host, pid, name, client}``; the answers show it with the claimant's
username; bad members are a 400 naming the member; the failure object's
``logs_url`` fills the template's fields (decision 316)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from oxide_batch import models
from tests.api.support import FAILURE, Runtime, field_error

WORKER = {"host": "worker-3", "pid": 4122, "name": "loader-2", "client": "oxide-batch 0.6.0"}
HEX = "0123456789abcdef" * 2


def launch(rt: Runtime, worker: Any = WORKER, **extra: Any) -> Any:
    body = {
        "job_name": "nightly",
        "identifying_parameters": {"run": "2026-07-29"},
        "owner_token": HEX,
        **({} if worker is ... else {"worker": worker}),
        **extra,
    }
    return rt.post("launches", body)


def test_a_launch_records_the_worker_with_the_owner_and_every_answer_shows_it(
    rt: Runtime, viewer: Runtime
) -> None:
    execution = launch(rt).json()["execution"]
    expected = {**WORKER, "user": "runtime-user"}
    assert execution["worker"] == expected
    assert viewer.get(f"executions/{execution['id']}")["worker"] == expected
    listed = viewer.get("executions")["results"]
    assert [e["worker"] for e in listed] == [expected]
    row = models.JobExecution.objects.get(pk=execution["id"])
    assert (row.worker_host, row.worker_pid, row.worker_name, row.worker_client) == (
        "worker-3",
        4122,
        "loader-2",
        "oxide-batch 0.6.0",
    )
    # A runtime write's answer (read from the locked row) shows the same.
    moved = rt.move(execution, "COMPLETED")
    assert moved["worker"] == expected


def test_without_an_identity_the_worker_is_the_claimant_alone_and_null_unclaimed(
    rt: Runtime, viewer: Runtime
) -> None:
    claimed = launch(rt, worker=...).json()["execution"]
    assert claimed["worker"] == {
        "host": None,
        "pid": None,
        "name": None,
        "client": None,
        "user": "runtime-user",
    }
    _, unclaimed = rt.launch("other")
    assert unclaimed["worker"] is None
    assert viewer.get(f"executions/{unclaimed['id']}")["worker"] is None


def test_a_claim_records_the_worker_in_its_own_write_and_a_repeat_keeps_the_first(
    rt: Runtime, viewer: Runtime
) -> None:
    _, execution = rt.launch()
    body = {"expected_version": execution["version"], "owner_token": HEX, "worker": WORKER}
    claimed = rt.post(f"executions/{execution['id']}/claim", body, 200)
    assert claimed["worker"] == {**WORKER, "user": "runtime-user"}
    again = {**body, "worker": {"host": "elsewhere"}}
    assert rt.post(f"executions/{execution['id']}/claim", again, 200)["worker"]["host"] == (
        "worker-3"
    )
    assert viewer.get(f"executions/{execution['id']}")["worker"]["host"] == "worker-3"


def test_a_step_records_its_own_worker(rt: Runtime, viewer: Runtime) -> None:
    execution = rt.started()
    partition_worker = {"host": "worker-9", "pid": 77, "name": "part-1", "client": None}
    step = rt.step(execution, "load:1", worker=partition_worker)
    shown = {"host": "worker-9", "pid": 77, "name": "part-1", "client": None}
    assert step["worker"] == shown
    assert viewer.get(f"steps/{step['id']}")["worker"] == shown
    assert viewer.get(f"executions/{execution['id']}/steps")["results"][0]["worker"] == shown
    assert rt.step(execution, "plain")["worker"] is None


BAD_WORKERS = [
    ({"host": "h" * 256}, "worker.host", "name_too_long"),
    ({"host": "é" * 128}, "worker.host", "name_too_long"),
    ({"host": ""}, "worker.host", "empty_name"),
    ({"host": " worker-3"}, "worker.host", "name_has_surrounding_whitespace"),
    ({"host": "worker\n3"}, "worker.host", "name_contains_control"),
    ({"host": "worker\u202e3"}, "worker.host", "name_contains_invisible"),
    ({"host": "worker\u20283"}, "worker.host", "name_contains_invisible"),
    ({"host": 3}, "worker.host", "invalid"),
    ({"pid": 0}, "worker.pid", "min_value"),
    ({"pid": -4}, "worker.pid", "min_value"),
    ({"pid": 2**31}, "worker.pid", "max_value"),
    ({"pid": "4122"}, "worker.pid", "invalid"),
    ({"pid": True}, "worker.pid", "invalid"),
    ({"pid": 41.5}, "worker.pid", "invalid"),
    ({"name": "n" * 129}, "worker.name", "name_too_long"),
    ({"name": "loader\u200b2"}, "worker.name", "name_contains_invisible"),
    ({"client": "c" * 129}, "worker.client", "name_too_long"),
    ({"client": "oxide-batch\x000.6"}, "worker.client", "null_characters_not_allowed"),
    ({"client": "oxide-batch\x070.6"}, "worker.client", "name_contains_control"),
    ({"uid": 0}, "worker.uid", "unknown_member"),
    ("worker-3", "worker", None),
]


@pytest.mark.parametrize(("worker", "field", "code"), BAD_WORKERS)
@pytest.mark.parametrize("where", ["launch", "claim", "step"])
def test_a_bad_worker_member_is_a_400_naming_it_and_nothing_is_written(
    rt: Runtime, worker: Any, field: str, code: str | None, where: str
) -> None:
    if where == "launch":
        response = launch(rt, worker=worker)
        field_error(response, field, code)
        assert not models.JobExecution.objects.exists()
        return
    _, execution = rt.launch()
    if where == "claim":
        body = {"expected_version": execution["version"], "owner_token": HEX, "worker": worker}
        field_error(rt.post(f"executions/{execution['id']}/claim", body), field, code)
        assert not models.JobExecution.objects.filter(owner_token__isnull=False).exists()
    else:
        body = {"step_name": "load", "worker": worker}
        field_error(rt.post(f"executions/{execution['id']}/steps", body), field, code)
        assert not models.StepExecution.objects.exists()


LOKI = (
    "https://grafana.example/explore?host={host}&from={started_at}&to={ended_at}"
    "&q=failure_id%3D{failure_id}&step={step_execution_id}&job={job_name}"
)


def test_the_failure_object_links_the_logs_with_every_field_escaped(
    rt: Runtime, viewer: Runtime
) -> None:
    body = {
        "job_name": "nightly load",
        "identifying_parameters": {"run": "x"},
        "owner_token": HEX,
        "worker": {"host": "rack 1&2"},
    }
    execution = rt.post("launches", body, 201)["execution"]
    assert execution["failure"] is None
    step = rt.step(execution, "load", worker={"host": "w/9"}, status="STARTED")
    failed_step = rt.move_step(step, "FAILED")
    failed = rt.move(execution, "FAILED")
    assert failed["failure"]["logs_url"] is None  # no template: null
    with override_settings(OXIDE_BATCH_FAILURE_URL_TEMPLATE=LOKI):
        shown = viewer.get(f"executions/{execution['id']}")
        step_shown = viewer.get(f"steps/{failed_step['id']}")
    started, ended = shown["started_at"], shown["ended_at"]
    assert shown["failure"] == {
        **FAILURE,
        "detail": None,  # GET executions/{id} carries the detail member (decision 306)
        "logs_url": (
            "https://grafana.example/explore?host=rack%201%262"
            f"&from={started.replace(':', '%3A')}&to={ended.replace(':', '%3A')}"
            "&q=failure_id%3D7&step=&job=nightly%20load"
        ),
    }
    assert step_shown["failure"]["logs_url"] == (
        "https://grafana.example/explore?host=w%2F9"
        f"&from={step_shown['started_at'].replace(':', '%3A')}"
        f"&to={step_shown['ended_at'].replace(':', '%3A')}"
        f"&q=failure_id%3D7&step={failed_step['id']}&job=nightly%20load"
    )
