"""Descriptor, definitions, instances and job executions: success shapes and
every error code each endpoint can answer, by name."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import pytest
from django.test import override_settings

from oxide_batch.repository import DjangoJobRepository
from oxide_batch.selectors.executions import execution_record
from tests.api.support import (
    DIGEST,
    EXECUTION_KEYS,
    FAILURE,
    INSTANT,
    Runtime,
    field_error,
    ok,
    problem,
)

MANIFEST = {"format": 1, "job": "import_job", "steps": ["load"]}
FLOW = {
    "format": 2,
    "job": "import_job",
    "entry": "load",
    "nodes": [{"id": "load", "kind": "step"}],
    "transitions": [{"source": "load", "pattern": "*", "target": {"terminal": "COMPLETE"}}],
}


# ---------------------------------------------------------------------- descriptor


def test_descriptor(viewer: Runtime) -> None:
    body = viewer.get("descriptor")
    assert body == {
        "version": importlib.metadata.version("oxide-batch"),
        "descriptor_version": 1,
        "schema_version": body["schema_version"],
        "capabilities": sorted(body["capabilities"]),
        "lease_ttl_seconds": 60,  # OXIDE_BATCH_LEASE_TTL's default
    }
    assert isinstance(body["schema_version"], int)
    assert "step_partitions" in body["capabilities"]


def test_descriptor_of_an_older_schema_is_503(viewer: Runtime, monkeypatch) -> None:
    monkeypatch.setattr("oxide_batch.repository.adapter.read_schema_version", lambda using: 1)
    problem(viewer.get("descriptor", expect=None), 503, "migration_required")
    monkeypatch.setattr("oxide_batch.repository.adapter.read_schema_version", lambda using: None)
    problem(viewer.get("descriptor", expect=None), 503, "schema_uninitialized")
    monkeypatch.setattr("oxide_batch.repository.adapter.read_schema_version", lambda using: 99)
    body = problem(viewer.get("descriptor", expect=None), 503, "newer_schema")
    assert body["current"] == 99


# --------------------------------------------------------------------- definitions


def test_register_a_definition(rt: Runtime) -> None:
    body = {"job_name": "import_job", "revision": "v1", "manifest": MANIFEST}
    created = rt.post("definitions", body, 201)
    assert created["format"] == 1
    assert DIGEST.fullmatch(created["digest"])
    assert INSTANT.fullmatch(created["registered_at"])
    again = rt.post("definitions", {**body, "revision": "v1-again"}, 200)
    assert again["digest"] == created["digest"]
    assert again["revision"] == "v1"


def test_definition_errors(rt: Runtime) -> None:
    rt.post("definitions", {"job_name": "import_job", "revision": "v1", "manifest": MANIFEST}, 201)
    other = {**MANIFEST, "steps": ["load", "store"]}
    response = rt.post(
        "definitions", {"job_name": "import_job", "revision": "v1", "manifest": other}
    )
    problem(response, 409, "definition_drift")
    response = rt.post(
        "definitions", {"job_name": "other_job", "revision": "v1", "manifest": other}
    )
    body = problem(response, 409, "definition_job_mismatch")
    assert body["expected"] == "other_job"
    response = rt.post(
        "definitions",
        {"job_name": "import_job", "revision": "v9", "manifest": {**MANIFEST, "format": 9}},
    )
    assert problem(response, 400, "unsupported_manifest_version")["format"] == 9
    response = rt.post(
        "definitions",
        {"job_name": "import_job", "revision": "v9", "manifest": {**MANIFEST, "x": 1.5}},
    )
    field_error(response, "manifest", "invalid_manifest")
    response = rt.post(
        "definitions", {"job_name": " import_job", "revision": "v9", "manifest": MANIFEST}
    )
    field_error(response, "job_name", "name_has_surrounding_whitespace")
    field_error(
        rt.post("definitions", {"job_name": "import_job", "manifest": MANIFEST}),
        "revision",
        "required",
    )


def test_register_an_upgrade_edge(rt: Runtime) -> None:
    v1 = rt.post(
        "definitions", {"job_name": "import_job", "revision": "v1", "manifest": MANIFEST}, 201
    )
    v2 = rt.post("definitions", {"job_name": "import_job", "revision": "v2", "manifest": FLOW}, 201)
    edge = {
        "job_name": "import_job",
        "key": "v1-to-v2",
        "from_digest": v1["digest"],
        "to_digest": v2["digest"],
        "step_mapping": {"load": "load"},
    }
    assert rt.post("definitions/upgrades", edge, 201) == edge
    assert rt.post("definitions/upgrades", edge, 200) == edge
    problem(
        rt.post("definitions/upgrades", {**edge, "key": "other"}),
        409,
        "definition_upgrade_conflict",
    )
    problem(
        rt.post("definitions/upgrades", {**edge, "to_digest": "0" * 64}),
        404,
        "definition_not_found",
    )
    response = rt.post("definitions/upgrades", {**edge, "to_digest": v1["digest"]})
    field_error(response, "step_mapping", "invalid_upgrade_edge")
    field_error(rt.post("definitions/upgrades", {**edge, "from_digest": "ABC"}), "from_digest")
    field_error(
        rt.post("definitions/upgrades", {**edge, "step_mapping": {"a": 1}}), "step_mapping.a"
    )


# ----------------------------------------------------------------------- instances

GOLDEN = "71f12db9e3887de2cf92e93bb63fd4e9e7c536df8fa202212445d18bf2e43604"


def test_select_or_create_an_instance_with_the_golden_key(rt: Runtime) -> None:
    body = {
        "job_name": "golden_job",
        "identifying_parameters": {
            "region": "서울",
            "limit": 2**63,
            "count": {"type": "i64", "value": -2},
            "active": True,
        },
    }
    created = rt.post("instances", body, 201)
    assert created["key_digest"] == GOLDEN
    assert created["parameters"] == [
        {"name": "active", "type": "bool"},
        {"name": "count", "type": "i64"},
        {"name": "limit", "type": "u64"},
        {"name": "region", "type": "string"},
    ]
    assert created["hold"] is None
    assert INSTANT.fullmatch(created["created_at"])
    existing = rt.post("instances", body, 200)
    assert existing == created


def test_non_identifying_parameters_are_validated_not_stored(rt: Runtime) -> None:
    body = {
        "job_name": "j",
        "identifying_parameters": {"a": 1},
        "non_identifying_parameters": {"b": 2},
    }
    first = rt.post("instances", body, 201)
    second = rt.post("instances", {**body, "non_identifying_parameters": {"b": 3}}, 200)
    assert first["id"] == second["id"]
    assert [p["name"] for p in first["parameters"]] == ["a"]
    response = rt.post("instances", {**body, "non_identifying_parameters": {"a": 2}})
    field_error(response, "identifying_parameters", "duplicate_parameter")


@override_settings(OXIDE_BATCH_VISIBLE_PARAMETERS=frozenset({"business_date"}))
def test_parameter_values_only_for_the_allowlist(rt: Runtime, viewer: Runtime) -> None:
    body = {
        "job_name": "j",
        "identifying_parameters": {"business_date": "2026-07-29", "secret": "s3"},
    }
    instance = rt.post("instances", body, 201)
    shown = viewer.get(f"instances/{instance['id']}")["parameters"]
    assert shown == [
        {"name": "business_date", "type": "string", "value": "2026-07-29"},
        {"name": "secret", "type": "string"},
    ]


def test_get_an_instance_with_its_hold(
    rt: Runtime, viewer: Runtime, repo: DjangoJobRepository
) -> None:
    instance, _ = rt.launch()
    shown = viewer.get(f"instances/{instance['id']}")
    # A viewer's key_digest is keyed with a server secret (decision 200).
    assert shown.pop("key_digest") != instance.pop("key_digest")
    assert shown == instance

    class Actor:
        reference = "ops@example"
        user_id = None

    with repo.begin() as uow:
        uow.place_instance_hold(instance["id"], Actor(), "LEGAL_HOLD")
        uow.commit()
    hold = viewer.get(f"instances/{instance['id']}")["hold"]
    assert hold == {
        "actor": "ops@example",
        "reason_code": "LEGAL_HOLD",
        "placed_at": hold["placed_at"],
    }
    assert INSTANT.fullmatch(hold["placed_at"])
    problem(viewer.get("instances/987654", expect=None), 404, "job_instance_not_found")


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"job_name": ""}, "job_name", "empty_name"),
        ({"job_name": "a\x01b"}, "job_name", "name_contains_control"),
        ({"job_name": "a\x00b"}, "job_name", "null_characters_not_allowed"),
        ({"job_name": "x" * 129}, "job_name", "name_too_long"),
        ({"job_name": 5}, "job_name", "invalid"),
        (
            {"job_name": "j", "identifying_parameters": []},
            "identifying_parameters",
            "not_an_object",
        ),
        (
            {"job_name": "j", "identifying_parameters": {"p": 1.5}},
            "identifying_parameters",
            "invalid_parameter_value",
        ),
        (
            {"job_name": "j", "identifying_parameters": {"p": 2**64}},
            "identifying_parameters",
            "invalid_parameter_value",
        ),
        (
            {"job_name": "j", "identifying_parameters": {"p": None}},
            "identifying_parameters",
            "invalid_parameter_value",
        ),
        (
            {"job_name": "j", "identifying_parameters": {"p": "a\x00"}},
            "identifying_parameters",
            "invalid_parameter_value",
        ),
        (
            {"job_name": "j", "identifying_parameters": {"p": {"type": "date", "value": "x"}}},
            "identifying_parameters",
            "invalid_parameter_value",
        ),
        (
            {"job_name": "j", "identifying_parameters": {"": 1}},
            "identifying_parameters",
            "empty_name",
        ),
        (
            {"job_name": "j", "identifying_parameters": {"p": "x" * 65537}},
            "identifying_parameters",
            "parameter_string_too_long",
        ),
        ({"job_name": "j", "extra": 1}, "extra", "unknown_member"),
    ],
)
def test_instance_input_errors(rt: Runtime, body: dict[str, Any], field: str, code: str) -> None:
    field_error(rt.post("instances", body), field, code)


# ---------------------------------------------------------------------- executions


def test_launch_a_first_attempt_with_the_legacy_definition(rt: Runtime) -> None:
    instance, execution = rt.launch()
    assert set(execution) == EXECUTION_KEYS
    assert execution["job_instance_id"] == instance["id"]
    assert execution["attempt"] == 1
    assert execution["status"] == "STARTING"
    assert execution["exit_code"] == "UNKNOWN"
    assert execution["version"] == 0
    assert execution["definition"] is None
    assert execution["stop_requested"] is False
    assert execution["owner_recorded"] is False
    assert execution["counts"] == dict.fromkeys(execution["counts"], 0)
    assert INSTANT.fullmatch(execution["created_at"])
    assert execution["started_at"] is None


def test_launch_errors(rt: Runtime) -> None:
    instance, execution = rt.launch()
    response = rt.post(f"instances/{instance['id']}/executions", {})
    body = problem(response, 409, "execution_already_active")
    assert body["execution_id"] == execution["id"]
    assert body["batch_status"] == "STARTING"
    execution = rt.move(rt.move(execution, "STARTED"), "COMPLETED")
    problem(rt.post(f"instances/{instance['id']}/executions", {}), 409, "completed_instance")
    problem(rt.post("instances/987654/executions", {}), 404, "job_instance_not_found")
    other, failed = rt.launch("other_job")
    rt.move(failed, "FAILED")
    response = rt.post(f"instances/{other['id']}/executions", {"definition_digest": "a" * 64})
    problem(response, 404, "definition_not_found")
    field_error(
        rt.post(f"instances/{other['id']}/executions", {"definition_digest": "A"}),
        "definition_digest",
    )


def test_restart_under_a_definition_needs_an_edge(rt: Runtime) -> None:
    instance, execution = rt.launch()
    rt.move(execution, "FAILED")
    v2 = rt.post("definitions", {"job_name": "import_job", "revision": "v2", "manifest": FLOW}, 201)
    response = rt.post(
        f"instances/{instance['id']}/executions", {"definition_digest": v2["digest"]}
    )
    problem(response, 409, "incompatible_definition")
    other = rt.post(
        "definitions",
        {"job_name": "other", "revision": "v1", "manifest": {**MANIFEST, "job": "other"}},
        201,
    )
    response = rt.post(
        f"instances/{instance['id']}/executions", {"definition_digest": other["digest"]}
    )
    problem(response, 409, "definition_job_mismatch")


def test_bound_definition_and_restart(rt: Runtime) -> None:
    v1 = rt.post(
        "definitions", {"job_name": "import_job", "revision": "v1", "manifest": MANIFEST}, 201
    )
    instance = rt.post("instances", {"job_name": "import_job"}, 201)
    first = rt.post(
        f"instances/{instance['id']}/executions", {"definition_digest": v1["digest"]}, 201
    )
    assert first["definition"] == {"revision": "v1", "format": 1, "digest": v1["digest"]}
    rt.move(rt.move(first, "STARTED"), "STOPPED")
    second = rt.post(f"instances/{instance['id']}/executions", {}, 201)
    assert second["attempt"] == 2
    assert second["definition"] == first["definition"]
    listed = rt.get(f"instances/{instance['id']}/executions")
    assert [e["id"] for e in listed["results"]] == [second["id"], first["id"]]
    rt.move(second, "FAILED")
    # Abandoning is an operator decision, even of a FAILED attempt.
    response = rt.post(
        f"executions/{second['id']}/transition", {"expected_version": 1, "status": "ABANDONED"}
    )
    problem(response, 409, "illegal_transition")


def test_get_execution(rt: Runtime, viewer: Runtime) -> None:
    _, execution = rt.launch()
    assert viewer.get(f"executions/{execution['id']}") == execution
    problem(viewer.get("executions/987654", expect=None), 404, "job_execution_not_found")


def test_transitions_and_their_errors(rt: Runtime) -> None:
    _, execution = rt.launch()
    started = rt.move(execution, "STARTED")
    assert started["version"] == 1
    assert INSTANT.fullmatch(started["started_at"])
    path = f"executions/{execution['id']}/transition"
    body = problem(
        rt.post(path, {"expected_version": 0, "status": "STOPPING"}), 409, "stale_version"
    )
    assert (body["expected"], body["actual"]) == (0, 1)
    body = problem(
        rt.post(path, {"expected_version": 1, "status": "STARTING"}), 409, "illegal_transition"
    )
    assert (body["from_status"], body["to_status"]) == ("STARTED", "STARTING")
    problem(
        rt.post(path, {"expected_version": 1, "status": "FAILED"}),
        409,
        "failed_transition_missing_failure",
    )
    rolled = rt.post(
        path, {"expected_version": 1, "status": "STOPPED", "terminal_rollback": True}, 200
    )
    assert rolled["counts"]["rolled_back"] == 1
    assert INSTANT.fullmatch(rolled["ended_at"])
    problem(
        rt.post(path, {"expected_version": 2, "status": "STARTING"}),
        409,
        "restart_requires_new_attempt",
    )
    problem(
        rt.post("executions/987654/transition", {"expected_version": 0, "status": "STARTED"}),
        404,
        "job_execution_not_found",
    )
    field_error(
        rt.post(path, {"expected_version": 2, "status": "RUNNING"}), "status", "invalid_choice"
    )
    field_error(
        rt.post(path, {"expected_version": "2", "status": "FAILED"}), "expected_version", "invalid"
    )
    field_error(
        rt.post(path, {"expected_version": 2.0, "status": "FAILED"}), "expected_version", "invalid"
    )
    field_error(
        rt.post(path, {"expected_version": True, "status": "FAILED"}), "expected_version", "invalid"
    )
    field_error(
        rt.post(path, {"expected_version": -1, "status": "FAILED"}), "expected_version", "min_value"
    )
    field_error(
        rt.post(path, {"expected_version": 2**63, "status": "FAILED"}),
        "expected_version",
        "max_value",
    )
    response = rt.post(
        path,
        {
            "expected_version": 2,
            "status": "FAILED",
            "failure": {"category": "NOPE", "failure_id": 1},
        },
    )
    field_error(response, "failure.category", "invalid_choice")
    response = rt.post(
        path,
        {
            "expected_version": 2,
            "status": "FAILED",
            "failure": {"category": "TIMEOUT", "failure_id": 0},
        },
    )
    field_error(response, "failure.failure_id", "zero_identifier")
    response = rt.post(
        path,
        {
            "expected_version": 2,
            "status": "FAILED",
            "failure": {"category": "TIMEOUT", "failure_id": 2**63},
        },
    )
    field_error(response, "failure.failure_id", "identifier_out_of_range")


def test_a_runtime_cannot_leave_unknown_nor_abandon(rt: Runtime) -> None:
    _, execution = rt.launch()
    unknown = rt.move(
        rt.move(execution, "STARTED"),
        "UNKNOWN",
        failure={"category": "UNKNOWN_COMMIT", "failure_id": 3},
    )
    assert unknown["failure"] == {"category": "UNKNOWN_COMMIT", "failure_id": 3, "logs_url": None}
    path = f"executions/{execution['id']}/transition"
    body = problem(
        rt.post(path, {"expected_version": 2, "status": "FAILED", "failure": FAILURE}),
        409,
        "illegal_transition",
    )
    assert (body["from_status"], body["to_status"]) == ("UNKNOWN", "FAILED")
    problem(
        rt.post(path, {"expected_version": 2, "status": "ABANDONED"}), 409, "illegal_transition"
    )
    # The version is still checked first.
    problem(rt.post(path, {"expected_version": 1, "status": "ABANDONED"}), 409, "stale_version")


def test_exit_status(rt: Runtime) -> None:
    _, execution = rt.launch()
    path = f"executions/{execution['id']}/exit-status"
    enriched = rt.post(path, {"expected_version": 0, "exit_code": "NOOP"}, 200)
    assert enriched["exit_code"] == "NOOP"
    assert enriched["status"] == "STARTING"
    assert enriched["version"] == 1
    problem(rt.post(path, {"expected_version": 0, "exit_code": "X"}), 409, "stale_version")
    field_error(
        rt.post(path, {"expected_version": 1, "exit_code": "x" * 65}), "exit_code", "name_too_long"
    )
    problem(
        rt.post("executions/987654/exit-status", {"expected_version": 0, "exit_code": "X"}),
        404,
        "job_execution_not_found",
    )


def test_claim_and_control(rt: Runtime, repo: DjangoJobRepository) -> None:
    _, execution = rt.launch()
    token = "0123456789abcdef0123456789abcdef"
    claimed = rt.post(
        f"executions/{execution['id']}/claim", {"expected_version": 0, "owner_token": token}, 200
    )
    assert claimed["owner_recorded"] is True
    assert claimed["version"] == 0
    assert token not in str(claimed)
    problem(
        rt.post(
            f"executions/{execution['id']}/claim", {"expected_version": 0, "owner_token": "f" * 32}
        ),
        409,
        "execution_owned",
    )
    field_error(
        rt.post(
            f"executions/{execution['id']}/claim", {"expected_version": 0, "owner_token": "XYZ"}
        ),
        "owner_token",
        "invalid_characters",
    )
    control = rt.post(f"executions/{execution['id']}/control", {"owner_token": token}, 200)
    assert control["owner_matches"] is True
    assert control["stop_requested"] is False
    assert INSTANT.fullmatch(control["execution"]["last_observed_at"])
    with repo.begin() as uow:
        uow.request_execution_stop(execution["id"], 0, "ops")
        uow.commit()
    control = rt.post(f"executions/{execution['id']}/control", {"owner_token": token}, 200)
    assert control["stop_requested"] is True
    assert control["execution"]["status"] == "STOPPING"
    assert control["execution"]["stop_requested"] is True
    started = rt.post(
        f"executions/{execution['id']}/claim", {"expected_version": 0, "owner_token": token}
    )
    problem(started, 409, "stale_version")
    body = problem(
        rt.post(
            f"executions/{execution['id']}/claim", {"expected_version": 1, "owner_token": token}
        ),
        409,
        "execution_ownership_not_allowed",
    )
    assert body["batch_status"] == "STOPPING"
    problem(
        rt.post("executions/987654/control", {"owner_token": token}), 404, "job_execution_not_found"
    )


def test_with_extras_reads_one_row(rt: Runtime) -> None:
    _, execution = rt.launch()
    record = execution_record(execution["id"])
    assert record.extras.definition is None
    assert record.extras.owner_recorded is False
    assert ok is not None
