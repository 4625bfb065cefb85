"""Regressions the hostile-input matrix (test_hostile.py) found (issue 8):
digests trimmed of trailing control characters, instants cut short by a NUL,
purge plans handed back out of shape. Runs on both databases."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.hostile.recipes import RECIPES, SURVEY
from tests.api.hostile.values import replace_at
from tests.api.hostile.verdicts import snapshot
from tests.api.hostile.world import World


@pytest.mark.parametrize("character", ["\x1c", "\x1f", "\x85", " ", "\n"])
def test_a_digest_with_a_trailing_control_or_space_is_refused(world: World, character: str) -> None:
    """DRF trimmed digests with ``str.strip`` (which takes U+001C–U+001F and U+0085
    for white space): ``<digest>\\x1f`` launched an attempt bound to ``<digest>``."""
    target = RECIPES["create_execution"](world)
    digest = target.body["definition_digest"]
    response = world.rt.post(target.path, {"definition_digest": digest + character})
    assert response.status_code == 400, response.content
    assert "definition_digest" in response.json()["errors"]
    query = {"node_id": "load", "plan_fingerprint": digest + character, "input_digest": digest}
    instance = target.path.split("/")[1]
    response = world.rt.get(f"instances/{instance}/flow-decisions/reusable", None, **query)
    assert response.status_code == 400, response.content
    world.rt.post(target.path, {"definition_digest": digest}, 201)


@pytest.mark.parametrize(
    "instant",
    ["2025-12-31T22:00:00Z\x00", "2025-12-31T22:00:00Z\x00garbage", "2025-12-31T22:00:00\x00Z"],
)
def test_an_instant_cut_short_by_a_nul_is_refused(world: World, instant: str) -> None:
    """``datetime.fromisoformat`` (CPython 3.11) stops reading at a NUL, so these
    parsed as 22:00 UTC: a survey cutoff, a list filter and a plan's cutoff."""
    response = world.rt.post("purge/survey", {**SURVEY, "ended_before": instant})
    assert response.json()["errors"]["ended_before"][0]["code"] == "invalid"
    response = world.rt.get("executions", None, created_after=instant)
    assert response.json()["errors"]["created_after"][0]["code"] == "invalid"
    target = RECIPES["apply_purge"](world)
    forged = {**target.body, "plan": {**target.body["plan"], "cutoff": instant}}
    response = world.rt.post(target.path, forged)
    assert response.json()["errors"]["plan"][0]["code"] == "malformed_purge_plan"
    world.rt.post(target.path, target.body, 200)  # the plan as surveyed still applies


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("counts.job_instances", 2**63),
        ("counts.flow_decisions", -1),
        ("held_excluded", -1),
        ("held_excluded", 10**40),
        ("candidates.0.executions.0.version", 2**63),
        ("candidates.0.instance_id", 1.0),
        ("bound", True),
        ("statuses", "FAILED"),
        ("job_name", 7),
        ("extra", 1),
    ],
)
def test_a_plan_out_of_shape_is_malformed_and_deletes_nothing(
    world: World, member: str, value: Any
) -> None:
    """A plan handed back with integers past 64 bits, negative counts or an
    unknown member was applied (the counts are informative, outside the digest;
    a version past 2^63−1 was a 409 stale plan and a REJECTED audit row)."""
    target = RECIPES["apply_purge"](world)
    before = snapshot()
    forged = {**target.body, "plan": replace_at(target.body["plan"], member, value)}
    response = world.rt.post(target.path, forged)
    assert response.status_code == 400, response.content
    (entry,) = response.json()["errors"]["plan"]
    assert entry["code"] == "malformed_purge_plan"
    assert member.rsplit(".", 1)[-1] in entry["message"]
    assert snapshot() == before
    world.rt.post(target.path, target.body, 200)
