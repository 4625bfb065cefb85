"""The two walks of issue 27's review, held to a budget of files.

A reader who follows a runtime's execution transition (from the view to the
SQL) or an operator's recover (from the confirmation page to the database)
reads every module of the app whose code runs on the way. Each walk here runs
one real request and collects, with ``sys.setprofile``:

- ``files``: every module of ``oxide_batch`` with a function called during the
  request (middleware, authentication, serializers, the domain's rules, the
  unit of work, the observer, …);
- ``to_sql``: the modules on the call stack of each SQL statement: the path
  from the request to the database.

The budgets are what the walks cross today (README, "Layout"); a change
that makes a walk cross more files fails here and has to say why, as a
query-count test holds a page to its queries.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from django.db import connection
from django.test import Client

import oxide_batch
from oxide_batch import models
from tests.admin.test_actions import _confirm, _url
from tests.api.support import Runtime, role_clients

pytestmark = pytest.mark.django_db

# The app's own files, by the package's directory (not by a path fragment: a
# checkout folder or a virtualenv may be called oxide_batch too).
APP = str(Path(oxide_batch.__file__).resolve().parent) + os.sep
MIGRATIONS = APP + "migrations" + os.sep
# The walks' budgets: (files, modules on the path to SQL). Issue 41 added two
# files to each, on purpose: a move that ends an execution writes its
# notification event in its own transaction (repository/outbox.py, one of the
# path to SQL, and the event's rules in domain/notifications.py; decision 240).
# Issue 40 added one to each: the worker's identity (domain/worker.py), read
# with the row and shown in the answer and the decision's evidence (decision 310).
RECOVER = (38, 14)
TRANSITION = (40, 9)


def _module(frame: FrameType) -> str | None:
    name = frame.f_code.co_filename
    if not name.startswith(APP) or name.startswith(MIGRATIONS):
        return None
    return name[len(APP) :]


@dataclass
class Walk:
    files: set[str] = field(default_factory=set)
    to_sql: set[str] = field(default_factory=set)

    def within(self, budget: tuple[int, int]) -> None:
        files, to_sql = budget
        assert len(self.files) <= files, (len(self.files), sorted(self.files))
        assert len(self.to_sql) <= to_sql, (len(self.to_sql), sorted(self.to_sql))


def walk(request: Callable[[], Any]) -> Walk:
    seen = Walk()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and (module := _module(frame)) is not None:
            seen.files.add(module)

    def statement(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if (module := _module(frame)) is not None:
                seen.to_sql.add(module)
            frame = frame.f_back
        return execute(sql, params, many, context)

    with connection.execute_wrapper(statement):
        sys.setprofile(profile)
        try:
            request()
        finally:
            sys.setprofile(None)
    return seen


def test_an_operators_recover_crosses_its_budget_of_files(operator_client: Client, demo: None):
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    url = _url("jobexecution", "recover", unknown.pk)
    _, form = _confirm(operator_client, url)
    chosen = {
        "disposition": "MARK_FAILED",
        "failure_category": "UNKNOWN_COMMIT",
        "reason_code": "UNKNOWN_EFFECT",
    }
    answers: list[Any] = []
    recover = walk(lambda: answers.append(operator_client.post(url, {**form, **chosen})))
    assert answers[0].status_code == 302
    unknown.refresh_from_db()
    assert unknown.status == "FAILED"  # the walk is the recover, applied
    assert {"services/operator.py", "repository/statements.py"} <= recover.files
    recover.within(RECOVER)


@pytest.fixture
def rt(demo: None) -> Runtime:
    """A runtime (token auth); the roles exist with the demo's data."""
    return Runtime(role_clients()("runtime"))


def test_a_runtimes_transition_crosses_its_budget_of_files(rt: Runtime):
    instance = rt.post("instances", {"job_name": "walk_job"}, 201)
    execution = rt.post(f"instances/{instance['id']}/executions", {}, 201)
    path = f"executions/{execution['id']}/transition"
    rt.post(path, {"expected_version": 0, "status": "STARTED"}, 200)
    answers: list[Any] = []
    transition = walk(
        lambda: answers.append(rt.post(path, {"expected_version": 1, "status": "COMPLETED"}, 200))
    )
    assert answers[0]["status"] == "COMPLETED"
    assert {"api/views/executions.py", "repository/statements.py"} <= transition.to_sql
    transition.within(TRANSITION)
