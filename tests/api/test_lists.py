"""Lists: keyset pagination, filters, and a constant query count with no COUNT."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch.repository import FixedClock
from tests.api.support import Runtime, field_error, problem


def cursor_of(link: str) -> str:
    return parse_qs(urlsplit(link).query)["cursor"][0]


def all_ids(runtime: Runtime, path: str, **params: Any) -> list[int]:
    found: list[int] = []
    page = runtime.get(path, **params)
    while True:
        found += [item["id"] for item in page["results"]]
        if page["next"] is None:
            return found
        page = runtime.get(path, **params, cursor=cursor_of(page["next"]))


def test_keyset_pages_newest_first(rt: Runtime, viewer: Runtime) -> None:
    ids = [rt.launch(parameters={"n": n})[1]["id"] for n in range(5)]
    first = viewer.get("executions", page_size=2)
    assert [e["id"] for e in first["results"]] == ids[::-1][:2]
    assert first["previous"] is None
    second = viewer.get("executions", page_size=2, cursor=cursor_of(first["next"]))
    assert [e["id"] for e in second["results"]] == ids[::-1][2:4]
    # Rows created during a traversal never show up in it (nor twice).
    rt.launch(parameters={"n": 99})
    third = viewer.get("executions", page_size=2, cursor=cursor_of(second["next"]))
    assert [e["id"] for e in third["results"]] == [ids[0]]
    assert third["next"] is None
    back = viewer.get("executions", page_size=2, cursor=cursor_of(third["previous"]))
    assert [e["id"] for e in back["results"]] == ids[::-1][2:4]
    assert len(viewer.get("executions")["results"]) == 6


@pytest.mark.parametrize("size", ["0", "501", "x", "-1", "1.5", "", "99999"])
def test_a_bad_page_size_is_400(viewer: Runtime, size: str) -> None:
    field_error(
        viewer.get("executions", expect=None, page_size=size), "page_size", "invalid_page_size"
    )


@pytest.mark.parametrize(
    "cursor",
    ["x", "!!!", "cD1hYmM=", "cD0tMQ==", "bz0xMA==", "cD05OTk5OTk5OTk5OTk5OTk5OTk5OTk5", "é"],
)
def test_a_bad_cursor_is_400(viewer: Runtime, cursor: str) -> None:
    field_error(viewer.get("executions", expect=None, cursor=cursor), "cursor", "invalid_cursor")


def test_page_size_bounds(rt: Runtime, viewer: Runtime) -> None:
    rt.launch()
    assert len(viewer.get("executions", page_size=1)["results"]) == 1
    assert len(viewer.get("executions", page_size=500)["results"]) == 1


def test_execution_filters(rt: Runtime, viewer: Runtime, fixed: FixedClock) -> None:
    _, a = rt.launch("alpha")
    fixed.advance(timedelta(hours=1))
    _, b = rt.launch("beta")
    b = rt.move(rt.move(b, "STARTED"), "COMPLETED")
    fixed.advance(timedelta(hours=1))
    _, c = rt.launch("beta", {"n": 2})
    c = rt.move(c, "FAILED")

    def ids(**params: Any) -> list[int]:
        return [e["id"] for e in viewer.get("executions", **params)["results"]]

    assert ids(status="STARTING") == [a["id"]]
    assert ids(status=["COMPLETED", "FAILED"]) == [c["id"], b["id"]]
    assert ids(job_name="beta") == [c["id"], b["id"]]
    assert ids(job_name="beta", status="FAILED") == [c["id"]]
    assert ids(created_after="2026-01-01T01:00:00Z") == [c["id"], b["id"]]
    assert ids(created_before="2026-01-01T01:00:00.000Z") == [a["id"]]
    assert ids(created_after="2026-01-01T01:00:00+01:00") == [c["id"], b["id"], a["id"]]
    assert ids(ended_after="2026-01-01T01:30:00Z") == [c["id"]]
    assert ids(ended_before="2026-01-01T01:30:00Z") == [b["id"]]
    assert ids(job_name="nobody") == []


def test_unresolved_for(rt: Runtime, viewer: Runtime, fixed: FixedClock) -> None:
    stale = rt.started("stale")
    unknown = rt.move(rt.started("unknown"), "UNKNOWN")
    done = rt.move(rt.started("done"), "COMPLETED")
    fixed.advance(timedelta(minutes=10))
    fresh = rt.started("fresh")

    def ids(seconds: str) -> list[int]:
        return [e["id"] for e in viewer.get("executions", unresolved_for=seconds)["results"]]

    assert ids("300") == [unknown["id"], stale["id"]]
    assert ids("0") == [unknown["id"], stale["id"]]  # fresh was active just now
    fixed.advance(timedelta(seconds=1))
    assert ids("0") == [fresh["id"], unknown["id"], stale["id"]]
    assert ids("3600") == [unknown["id"]]
    assert done["id"] not in ids("0")
    assert [
        e["id"] for e in viewer.get("executions", unresolved_for="300", job_name="stale")["results"]
    ] == [stale["id"]]
    # The duration syntax of the settings works too (contract §4.4).
    assert ids("5m") == ids("300")
    assert ids("1h") == ids("3600") == [unknown["id"]]
    assert ids("0s") == ids("0")


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("status", "RUNNING"),
        ("created_after", "yesterday"),
        ("created_after", "2026-13-01T00:00:00Z"),
        ("ended_before", "0001-01-01T00:00:00+14:00"),
        ("ended_after", "9999-12-31T23:59:59-14:00"),
        ("job_name", "a\x01b"),
        ("job_name", " x"),
        ("unresolved_for", "x"),
        ("unresolved_for", "-1"),
        ("unresolved_for", "1.5"),
        ("unresolved_for", "9999999999"),
        ("unresolved_for", "15 m"),
        ("unresolved_for", " 15m"),
        ("unresolved_for", "15M"),
        ("unresolved_for", "1.5h"),
        ("unresolved_for", "4000d"),
    ],
)
def test_bad_filters_are_400(viewer: Runtime, param: str, value: str) -> None:
    field_error(viewer.get("executions", expect=None, **{param: value}), param)


def test_instance_list_and_filter(rt: Runtime, viewer: Runtime) -> None:
    first, _ = rt.launch("alpha")
    second, _ = rt.launch("beta")
    listed = viewer.get("instances")
    assert [i["id"] for i in listed["results"]] == [second["id"], first["id"]]
    assert listed["results"][0] == viewer.get(f"instances/{second['id']}")
    assert [i["id"] for i in viewer.get("instances", job_name="alpha")["results"]] == [first["id"]]
    field_error(viewer.get("instances", expect=None, job_name="x\x7f"), "job_name")
    assert all_ids(viewer, "instances", page_size=1) == [second["id"], first["id"]]


def test_instance_executions_list(rt: Runtime, viewer: Runtime) -> None:
    instance, execution = rt.launch()
    assert [e["id"] for e in viewer.get(f"instances/{instance['id']}/executions")["results"]] == [
        execution["id"]
    ]
    empty = rt.post("instances", {"job_name": "empty"}, 201)
    assert viewer.get(f"instances/{empty['id']}/executions")["results"] == []
    problem(viewer.get("instances/987654/executions", expect=None), 404, "job_instance_not_found")


# ----------------------------------------------------------------------- query counts


def count_queries(runtime: Runtime, path: str, **params: Any) -> tuple[int, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        runtime.get(path, **params)
    statements = [query["sql"] for query in captured.captured_queries]
    return len(statements), statements


LISTS = [
    ("executions", lambda ctx: "executions"),
    ("instances", lambda ctx: "instances"),
    ("instance executions", lambda ctx: f"instances/{ctx['instance']}/executions"),
    ("steps", lambda ctx: f"executions/{ctx['execution']}/steps"),
    ("filtered executions", lambda ctx: "executions?status=STARTED&status=STARTING&job_name=job"),
]


@pytest.mark.parametrize(("name", "path_of"), LISTS, ids=[name for name, _ in LISTS])
def test_list_query_count_is_constant_without_count(
    rt: Runtime, viewer: Runtime, name: str, path_of: Any
) -> None:
    instance = rt.post("instances", {"job_name": "job"}, 201)

    def grow(rows: int) -> dict[str, int]:
        """``rows`` more attempts of one instance, and a new attempt with ``rows`` steps."""
        for _ in range(rows):
            rt.move(rt.post(f"instances/{instance['id']}/executions", {}, 201), "FAILED")
        _, execution = rt.launch("job", {"grow": rows})
        for index in range(rows):
            rt.step(execution, f"step-{index}")
        return {"instance": instance["id"], "execution": execution["id"]}

    few, _ = count_queries(viewer, path_of(grow(1)))
    many, statements = count_queries(viewer, path_of(grow(30)))
    assert few == many, (name, few, many)
    # authentication (the token, its user and the batch permissions: one statement), one page
    assert many == 2, statements
    assert not any("COUNT(" in sql.upper() for sql in statements), statements


@pytest.mark.parametrize("kind", ["execution", "instance", "step"])
def test_single_reads_are_one_query_after_authorization(
    rt: Runtime, viewer: Runtime, kind: str
) -> None:
    instance, execution = rt.launch()
    step = rt.step(execution)
    path = {
        "execution": f"executions/{execution['id']}",
        "instance": f"instances/{instance['id']}",
        "step": f"steps/{step['id']}",
    }[kind]
    total, statements = count_queries(viewer, path)
    assert total == 2, statements  # authentication (one statement), the row


EMPTY_FILTERS = [
    ("executions", name)
    for name in (
        "status",
        "job_name",
        "created_after",
        "created_before",
        "ended_after",
        "ended_before",
        "unresolved_for",
    )
] + [
    ("instances", "job_name"),
    ("audit/recovery-decisions", "job_execution_id"),
    ("audit/recovery-decisions", "job_instance_id"),
    *(
        ("audit/operator-requests", name)
        for name in ("job_execution_id", "job_instance_id", "action", "outcome", "operation_id")
    ),
    *(
        ("audit/retention-records", name)
        for name in ("job_instance_id", "action", "outcome", "operation_id")
    ),
]


@pytest.mark.parametrize(("path", "name"), EMPTY_FILTERS)
def test_a_filter_given_an_empty_value_is_refused(client_for: Any, path: str, name: str) -> None:
    """``?job_name=`` (an unset shell variable) would otherwise list everything."""
    admin = Runtime(client_for("superuser"))
    admin.started()
    assert admin.get(path)["results"] or path.startswith("audit/")
    field_error(admin.get(path, expect=None, **{name: ""}), name, "blank")
    # Next to a valid value of another filter, too.
    field_error(admin.get(path, expect=None, page_size=5, **{name: ""}), name, "blank")
