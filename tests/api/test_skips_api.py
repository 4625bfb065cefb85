"""The skip ledger over HTTP (contract §2.3.3 "Skips"; issue 42, wire A): a
chunk commit's ``skips`` become the step's skip counts and the ledger's rows,
in the commit's transaction; a refused commit writes neither; an ineligible
category is ``skip_not_eligible`` with nothing written; the detail is
scrubbed; ``GET steps/{id}/skips`` and ``GET executions/{id}/skips`` page the
ledger in recording order, the detail's type alone to viewers."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.repository import FixedClock
from tests.api.support import Runtime, field_error, problem
from tests.api.test_documented_refusals import OTHER, TOKEN, fenced, launched, started_step

pytestmark = pytest.mark.django_db
SECRET = "vault-Pa55word-xyz"
ZERO_SKIPS = {"read_skip": 0, "process_skip": 0, "write_skip": 0}


def skip(
    phase: str, item: str, category: str = "USER_COMPONENT", detail: Any = None
) -> dict[str, Any]:
    failure: dict[str, Any] = {"category": category}
    if detail is not None:
        failure["detail"] = detail
    return {"phase": phase, "item": item, "failure": failure}


def commit(rt: Runtime, step: dict[str, Any], *skips: dict[str, Any], **extra: Any) -> Any:
    body = {"expected_version": step["version"], "owner_token": TOKEN, "skips": list(skips)}
    return rt.post(f"steps/{step['id']}/checkpoint", {**body, **extra})


def skip_counts(answer: dict[str, Any]) -> dict[str, int]:
    return {name: answer["counts"][name] for name in ZERO_SKIPS}


def test_skips_become_the_step_counts_and_the_ledger_rows(rt, operator):
    step = started_step(rt, launched(rt))
    assert skip_counts(step) == ZERO_SKIPS
    first = commit(
        rt,
        step,
        skip("read", "line 3"),
        skip("process", "17", detail={"type": "ValueError", "message": "bad amount"}),
        skip("process", "18", category="TRANSIENT_INFRASTRUCTURE"),
        counts={"read": 10, "written": 7},
    ).json()
    assert skip_counts(first) == {"read_skip": 1, "process_skip": 2, "write_skip": 0}
    assert first["counts"]["written"] == 7
    second = commit(rt, first, skip("write", "42")).json()
    assert skip_counts(second) == {"read_skip": 1, "process_skip": 2, "write_skip": 1}
    assert skip_counts(operator.get(f"steps/{step['id']}")) == skip_counts(second)
    rows = operator.get(f"steps/{step['id']}/skips")["results"]
    assert [(row["phase"], row["item"], row["chunk"]) for row in rows] == [
        ("read", "line 3", 1),
        ("process", "17", 1),
        ("process", "18", 1),
        ("write", "42", 2),
    ]
    assert rows[1]["category"] == "USER_COMPONENT"
    assert rows[1]["detail"]["type"] == "ValueError"
    assert rows[1]["detail"]["message"] == "bad amount"
    assert rows[0]["detail"] is None
    assert rows[0]["step_name"] == "load"
    assert rows[0]["job_execution_id"] == step["job_execution_id"]


def test_a_commit_without_skips_leaves_the_skip_counts_and_the_ledger_alone(rt):
    step = started_step(rt, launched(rt))
    answer = rt.post(
        f"steps/{step['id']}/checkpoint",
        {"expected_version": step["version"], "counts": {"read": 3}},
        200,
    )
    assert skip_counts(answer) == ZERO_SKIPS
    assert not models.Skip.objects.exists()


def test_an_ineligible_category_is_refused_and_nothing_is_written(rt, operator):
    step = started_step(rt, launched(rt))
    response = commit(
        rt,
        step,
        skip("process", "1"),
        skip("process", "2", category="UNKNOWN_COMMIT"),
        counts={"read": 5},
        checkpoint={"schema": "s", "schema_version": 1, "payload": {"at": 5}},
    )
    body = problem(response, 400, "skip_not_eligible")
    assert "skips.1" in body["detail"]
    assert not models.Skip.objects.exists()
    after = operator.get(f"steps/{step['id']}")
    assert after["version"] == step["version"]
    assert after["counts"]["read"] == 0
    assert skip_counts(after) == ZERO_SKIPS


def test_a_stale_commit_records_no_ledger_row_and_no_count(rt, operator):
    step = started_step(rt, launched(rt))
    stale = {**step, "version": step["version"] - 1}
    problem(commit(rt, stale, skip("read", "1")), 409, "stale_version")
    problem(commit(rt, step, skip("read", "1"), owner_token=OTHER), 409)
    assert not models.Skip.objects.exists()
    assert skip_counts(operator.get(f"steps/{step['id']}")) == ZERO_SKIPS


def test_a_fenced_owner_records_no_ledger_row_and_no_count(
    rt: Runtime, operator: Runtime, fixed: FixedClock
) -> None:
    _, step = fenced(rt, operator, fixed)
    response = commit(rt, step, skip("write", "9"))
    assert response.status_code == 409
    assert not models.Skip.objects.exists()
    assert skip_counts(operator.get(f"steps/{step['id']}")) == ZERO_SKIPS


def test_the_detail_is_scrubbed_cut_and_never_keeps_a_traceback(rt, operator, settings):
    settings.OXIDE_BATCH_FAILURE_DETAIL = "traceback"
    body = {"job_name": "skip_job", "identifying_parameters": {"vault": SECRET}}
    execution = rt.post("launches", {**body, "owner_token": TOKEN}, 201)["execution"]
    step = started_step(rt, execution)
    detail = {
        "type": "ValueError",
        "message": f"row 4: password=hunter2 and {SECRET}",
        "traceback": f"Traceback\nValueError: {SECRET}",
    }
    long = {"type": "E", "message": "é" * 3000}
    commit(rt, step, skip("process", "4", detail=detail), skip("process", "5", detail=long))
    rows = operator.get(f"steps/{step['id']}/skips")["results"]
    kept = rows[0]["detail"]
    assert kept["message"] == "row 4: password=[redacted] and [redacted]"
    assert "traceback" not in kept
    stored = models.Skip.objects.values_list("message", flat=True)
    assert not any(SECRET in (text or "") for text in stored)
    assert rows[1]["detail"]["message_truncated"] is True
    assert len(rows[1]["detail"]["message"].encode()) <= 2048


def test_with_the_detail_off_the_type_alone_is_kept(rt, operator, settings):
    settings.OXIDE_BATCH_FAILURE_DETAIL = "off"
    step = started_step(rt, launched(rt))
    commit(rt, step, skip("read", "1", detail={"type": "KeyError", "message": "'id'"}))
    row = models.Skip.objects.get()
    assert (row.type, row.message) == ("KeyError", None)


def test_a_viewer_reads_the_type_alone(rt, viewer):
    step = started_step(rt, launched(rt))
    commit(rt, step, skip("process", "1", detail={"type": "KeyError", "message": "'id'"}))
    for path in (f"steps/{step['id']}/skips", f"executions/{step['job_execution_id']}/skips"):
        (row,) = viewer.get(path)["results"]
        assert row["detail"] == {"type": "KeyError"}
        assert row["item"] == "1"


def test_keyset_pages_in_recording_order_across_steps(rt, operator):
    execution = launched(rt)
    load = started_step(rt, execution, "load")
    commit(rt, load, *(skip("read", f"L{n}") for n in range(3)))
    report = started_step(rt, execution, "report")
    commit(rt, report, *(skip("write", f"R{n}") for n in range(2)))
    seen: list[str] = []
    page = operator.get(f"executions/{execution['id']}/skips", page_size=2)
    while True:
        seen += [row["item"] for row in page["results"]]
        if page["next"] is None:
            break
        page = operator.client.get(page["next"]).json()
    assert seen == ["L0", "L1", "L2", "R0", "R1"]
    only_report = operator.get(f"steps/{report['id']}/skips")["results"]
    assert [row["item"] for row in only_report] == ["R0", "R1"]
    assert {row["step_name"] for row in only_report} == {"report"}


def test_unknown_ids_are_404_and_an_empty_ledger_is_an_empty_page(rt, operator):
    problem(operator.get("steps/999999/skips", None), 404, "step_execution_not_found")
    problem(operator.get("executions/999999/skips", None), 404, "job_execution_not_found")
    step = started_step(rt, launched(rt))
    assert operator.get(f"steps/{step['id']}/skips")["results"] == []


def test_a_page_costs_the_same_queries_whatever_it_holds(rt, operator):
    """One query for the page (the step's name by a join), whatever its size."""
    step = started_step(rt, launched(rt))
    commit(rt, step, skip("read", "first"))
    costs = []
    for more in (0, 40):
        if more:
            current = operator.get(f"steps/{step['id']}")
            commit(rt, current, *(skip("process", str(n)) for n in range(more)))
        for path in (f"steps/{step['id']}/skips", f"executions/{step['job_execution_id']}/skips"):
            with CaptureQueriesContext(connection) as queries:
                operator.get(path)
            costs.append(len(queries.captured_queries))
    assert costs[0] == costs[2]
    assert costs[1] == costs[3]


@pytest.mark.parametrize(
    ("entry", "member"),
    [
        ({"phase": "skip", "item": "1", "failure": {"category": "TIMEOUT"}}, "skips.0.phase"),
        ({"phase": "read", "item": "", "failure": {"category": "TIMEOUT"}}, "skips.0.item"),
        ({"phase": "read", "item": " 1", "failure": {"category": "TIMEOUT"}}, "skips.0.item"),
        ({"phase": "read", "item": "a\u202eb", "failure": {"category": "TIMEOUT"}}, "skips.0.item"),
        ({"phase": "read", "item": "é" * 129, "failure": {"category": "TIMEOUT"}}, "skips.0.item"),
        ({"phase": "read", "item": 7, "failure": {"category": "TIMEOUT"}}, "skips.0.item"),
        (
            {"phase": "read", "item": "1", "failure": {"category": "NOPE"}},
            "skips.0.failure.category",
        ),
        ({"phase": "read", "item": "1"}, "skips.0.failure"),
        ({"phase": "read", "item": "1", "failure": {"category": "TIMEOUT"}, "x": 1}, "skips.0.x"),
    ],
)
def test_a_bad_entry_is_a_400_naming_the_member(rt, entry, member):
    step = started_step(rt, launched(rt))
    field_error(commit(rt, step, entry), member)
    assert not models.Skip.objects.exists()


def test_more_than_a_thousand_entries_is_a_400_naming_the_member(rt):
    step = started_step(rt, launched(rt))
    field_error(commit(rt, step, *(skip("read", str(n)) for n in range(1001))), "skips")
    assert not models.Skip.objects.exists()


def test_an_item_of_256_bytes_is_kept(rt, operator):
    step = started_step(rt, launched(rt))
    item = "é" * 128
    commit(rt, step, skip("read", item))
    assert operator.get(f"steps/{step['id']}/skips")["results"][0]["item"] == item
