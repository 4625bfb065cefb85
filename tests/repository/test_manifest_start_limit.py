"""A manifest node's ``start_limit`` holds whatever the request says; a request
may only lower it (contract §2.3.4, decision 210).

``adapter``: the in-memory fake does not run flows yet; once it does, these are
contract tests of both adapters (drop the marker).
"""

from __future__ import annotations

from typing import Any

import pytest

from oxide_batch.domain import BatchStatus
from oxide_batch.domain.errors import StartLimitExceeded
from tests.repository.test_flow import Flow, launch_flow, restart

pytestmark = [pytest.mark.contract, pytest.mark.adapter]
S = BatchStatus


def once_manifest() -> dict[str, Any]:
    """A plan whose node ``publish`` may start once, ``load`` twice."""
    return {
        "format": 2,
        "job": "flow_job",
        "entry": "load",
        "nodes": [
            {"id": "load", "kind": "step", "start_limit": 2},
            {"id": "publish", "kind": "step", "start_limit": 1},
        ],
        "transitions": [
            {"source": "load", "pattern": "*", "target": {"node": "publish"}},
            {"source": "publish", "pattern": "*", "target": {"terminal": "COMPLETE"}},
        ],
    }


@pytest.fixture
def flow(repo, clock) -> Flow:
    return launch_flow(repo, clock, once_manifest())


def start(repo, flow: Flow, step: str, limit: int | None) -> None:
    with repo.begin() as uow:
        uow.create_flow_step_execution(flow.execution.id, step, step, limit)
        uow.commit()


def refused(repo, flow: Flow, step: str, limit: int | None) -> StartLimitExceeded:
    with repo.begin() as uow, pytest.raises(StartLimitExceeded) as error:
        uow.create_flow_step_execution(flow.execution.id, step, step, limit)
    return error.value


@pytest.mark.parametrize("requested", [None, 1, 5], ids=["no-limit", "same", "higher"])
def test_the_manifest_limit_holds_whatever_the_request_says(repo, clock, flow, requested):
    start(repo, flow, "publish", requested)
    restart(repo, clock, flow)
    error = refused(repo, flow, "publish", requested)
    assert (error.instance_id, error.node_id, error.limit) == (flow.instance_id, "publish", 1)


def test_a_request_may_lower_the_manifest_limit(repo, clock, flow):
    start(repo, flow, "load", 1)
    restart(repo, clock, flow)
    assert refused(repo, flow, "load", 1).limit == 1


def test_without_a_request_limit_the_manifest_allows_its_own_count(repo, clock, flow):
    start(repo, flow, "load", None)
    restart(repo, clock, flow)
    start(repo, flow, "load", None)
    restart(repo, clock, flow)
    assert refused(repo, flow, "load", None).limit == 2


def test_a_plain_step_of_a_declared_node_is_held_to_the_limit(repo, clock, flow):
    """A request naming neither node nor limit (``create_step_execution``) starts
    the node of its step name: the plan's limit holds for it too."""
    with repo.begin() as uow:
        uow.create_step_execution(flow.execution.id, "publish")
        uow.commit()
    restart(repo, clock, flow)
    with repo.begin() as uow, pytest.raises(StartLimitExceeded) as error:
        uow.create_step_execution(flow.execution.id, "publish")
    assert error.value.limit == 1
