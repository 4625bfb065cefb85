"""The request bodies the domain reads as free JSON (manifests, parameter maps,
flow targets, step mappings, purge statuses, instants) are documented so that
the schema and the server agree: each body below is valid by the served
schema exactly when the server takes it (contract §4.8: a schema-valid request is
never refused as invalid input). The generative side of the same promise is
``test_schemathesis.py``."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from oxide_batch.api.docs import schema_document
from tests.api.support import Runtime

DIGEST_A = "a" * 64
DIGEST_B = "b" * 64


@pytest.fixture(scope="module")
def components() -> dict[str, Any]:
    document: dict[str, Any] = schema_document()
    found: dict[str, Any] = document["components"]
    return found


def as_json_schema(schema: Any) -> Any:
    """OpenAPI 3.0's ``nullable: true`` as JSON Schema (``null`` is also valid)."""
    if isinstance(schema, list):
        return [as_json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    translated = {key: as_json_schema(value) for key, value in schema.items()}
    if translated.pop("nullable", False):
        return {"anyOf": [translated, {"type": "null"}]}
    return translated


def schema_valid(components: dict[str, Any], component: str, body: Any) -> bool:
    """``body`` against ``#/components/schemas/<component>`` (draft 4: an
    ``integer`` has no fraction, as in OpenAPI 3.0)."""
    schema = {"$ref": f"#/components/schemas/{component}", "components": as_json_schema(components)}
    return bool(jsonschema.Draft4Validator(schema).is_valid(body))


def manifest(**members: Any) -> dict[str, Any]:
    return {"job_name": "import_job", "revision": "r1", "manifest": members}


FLOW = {
    "entry": "load",
    "nodes": [{"id": "load", "kind": "step"}],
    "transitions": [{"source": "load", "pattern": "*", "target": {"terminal": "COMPLETE"}}],
}

DEFINITIONS = [
    ("format 1", manifest(format=1, job="import_job", anything=[1, "x", None]), True),
    ("a flow graph", manifest(format=2, job="import_job", **FLOW), True),
    ("format 3 graph", manifest(format=3, job="import_job", **FLOW), True),
    ("null", {"job_name": "import_job", "revision": "r1", "manifest": None}, False),
    ("a list", {"job_name": "import_job", "revision": "r1", "manifest": [1]}, False),
    ("format 4", manifest(format=4, job="import_job"), False),
    ("no job", manifest(format=1), False),
    ("an empty job", manifest(format=1, job=""), False),
    ("a float", manifest(format=1, job="import_job", ratio=0.5), False),
    ("a float format", manifest(format=1.0, job="import_job"), False),
    (
        "a graph without nodes",
        manifest(format=2, job="import_job", entry="a", transitions=[]),
        False,
    ),
    (
        "an unknown node kind",
        manifest(format=2, job="import_job", **{**FLOW, "nodes": [{"id": "load", "kind": "x"}]}),
        False,
    ),
    (
        "a node member unknown",
        manifest(
            format=2,
            job="import_job",
            **{**FLOW, "nodes": [{"id": "load", "kind": "step", "x": 1}]},
        ),
        False,
    ),
    (
        "start_limit 0",
        manifest(
            format=2,
            job="import_job",
            **{**FLOW, "nodes": [{"id": "load", "kind": "step", "start_limit": 0}]},
        ),
        False,
    ),
    (
        "an empty target",
        manifest(
            format=2,
            job="import_job",
            **{**FLOW, "transitions": [{"source": "load", "pattern": "*", "target": {}}]},
        ),
        False,
    ),
]


@pytest.mark.parametrize(
    ("case", "body", "accepted"), DEFINITIONS, ids=[c for c, *_ in DEFINITIONS]
)
def test_a_manifest_is_schema_valid_exactly_when_it_is_registered(
    components: dict[str, Any], rt: Runtime, case: str, body: dict[str, Any], accepted: bool
) -> None:
    assert schema_valid(components, "DefinitionRequest", body) is accepted
    answer = rt.post("definitions", body)
    assert (answer.status_code in (200, 201)) is accepted, answer.content


def instance(**parameters: Any) -> dict[str, Any]:
    return {"job_name": "import_job", "identifying_parameters": parameters}


INSTANCES = [
    ("plain values", instance(day="2026-07-29", n=-5, big=2**64 - 1, flag=True), True),
    (
        "typed values",
        instance(a={"type": "u64", "value": 5}, b={"type": "bool", "value": False}),
        True,
    ),
    ("a float", instance(ratio=1.5), False),
    ("an integral float", instance(n=1.0), False),
    ("null", instance(n=None), False),
    ("a list", instance(n=[1]), False),
    ("beyond u64", instance(n=2**64), False),
    ("below i64", instance(n=-(2**63) - 1), False),
    ("a typed string that is a number", instance(n={"type": "string", "value": 5}), False),
    ("a negative u64", instance(n={"type": "u64", "value": -1}), False),
    ("an unknown type", instance(n={"type": "f64", "value": 5}), False),
    ("a typed value with more", instance(n={"type": "i64", "value": 5, "x": 1}), False),
    ("a map that is a list", {"job_name": "import_job", "identifying_parameters": []}, False),
]


@pytest.mark.parametrize(("case", "body", "accepted"), INSTANCES)
def test_parameter_values_are_schema_valid_exactly_when_taken(
    components: dict[str, Any], rt: Runtime, case: str, body: dict[str, Any], accepted: bool
) -> None:
    assert schema_valid(components, "InstanceRequest", body) is accepted
    answer = rt.post("instances", body)
    assert (answer.status_code in (200, 201)) is accepted, answer.content


# A string value is at most 65,536 UTF-8 bytes, in either map (decision 224):
# the schema's maxLength (characters) forbids only what the server refuses.
LONG_VALUES = [
    ("16,385 characters", "x" * 16_385, True),
    ("65,536 characters", "x" * 65_536, True),
    ("65,536 bytes in 32,768 characters", "é" * 32_768, True),
    ("65,537 characters", "x" * 65_537, False),
    ("typed, 65,537 characters", {"type": "string", "value": "x" * 65_537}, False),
]


@pytest.mark.parametrize(("case", "value", "accepted"), LONG_VALUES)
@pytest.mark.parametrize("member", ["identifying_parameters", "non_identifying_parameters"])
def test_a_long_string_value_is_schema_valid_exactly_when_taken(
    components: dict[str, Any], rt: Runtime, member: str, case: str, value: Any, accepted: bool
) -> None:
    body = {"job_name": "import_job", member: {"p": value}}
    assert schema_valid(components, "InstanceRequest", body) is accepted
    answer = rt.post("instances", body)
    assert (answer.status_code in (200, 201)) is accepted, answer.content[:300]


def upgrade(mapping: Any) -> dict[str, Any]:
    """An upgrade edge between two unknown definitions, with ``mapping``."""
    return {
        "job_name": "import_job",
        "key": "v1-to-v2",
        "from_digest": DIGEST_A,
        "to_digest": DIGEST_B,
        "step_mapping": mapping,
    }


UPGRADES = [
    ("one step", {"load": "load_v2"}, True),
    ("an empty mapping", {}, False),
    ("an empty target", {"load": ""}, False),
    ("a target that is not a string", {"load": 1}, False),
]


@pytest.mark.parametrize(("case", "mapping", "accepted"), UPGRADES)
def test_a_step_mapping_is_schema_valid_exactly_when_taken(
    components: dict[str, Any], rt: Runtime, case: str, mapping: Any, accepted: bool
) -> None:
    body = upgrade(mapping)
    assert schema_valid(components, "UpgradeRequest", body) is accepted
    answer = rt.post("definitions/upgrades", body)
    # Both digests are unknown definitions: a well-formed edge is 404, not 400.
    assert (answer.status_code != 400) is accepted, answer.content


TARGETS = [
    ({"node": "load"}, True),
    ({"terminal": "COMPLETE"}, True),
    ({}, False),
    ({"node": "load", "terminal": "FAIL"}, False),
    ({"terminal": "DONE"}, False),
    ({"node": ""}, False),
]


@pytest.mark.parametrize(("target", "accepted"), TARGETS)
def test_a_flow_target_is_schema_valid_exactly_when_taken(
    components: dict[str, Any], rt: Runtime, target: Any, accepted: bool
) -> None:
    execution = rt.started()
    body = {
        "source_node_id": "load",
        "kind": "DECIDER",
        "observed_outcome": "COMPLETED",
        "target": target,
        "plan_fingerprint": DIGEST_A,
        "input_digest": DIGEST_B,
    }
    assert schema_valid(components, "FlowDecisionRequest", body) is accepted
    answer = rt.post(f"executions/{execution['id']}/flow-decisions", body)
    # A well-formed decision on a legacy (planless) execution is refused as a
    # conflict with its plan, never as invalid input.
    assert (answer.status_code != 400) is accepted, answer.content


SURVEYS = [
    ({"ended_before": "2020-01-01T00:00:00Z"}, True),
    ({"ended_before": "2020-01-01T00:00:00.123456789+05:30"}, True),
    ({"ended_before": "2020-01-01T00:00:00Z", "statuses": ["FAILED", "ABANDONED"]}, True),
    ({"ended_before": "2020-01-01T00:00:00Z", "statuses": ["STARTED"]}, False),
    ({"ended_before": "2020-01-01T00:00:00Z", "statuses": ["STOPPING"]}, False),
    ({"ended_before": "2020-01-01T00:00:00Z", "statuses": []}, False),
    ({"ended_before": "2020-01-01T00:00:00"}, False),
    ({"ended_before": "2020-01-01 00:00:00Z"}, False),
    ({"ended_before": "0001-01-01T00:00:00+05:00"}, False),
    ({"ended_before": "2020-01-01t00:00:00z"}, False),
]


@pytest.mark.parametrize(("body", "accepted"), SURVEYS)
def test_a_survey_is_schema_valid_exactly_when_taken(
    components: dict[str, Any], operator: Runtime, body: dict[str, Any], accepted: bool
) -> None:
    assert schema_valid(components, "SurveyRequest", body) is accepted
    answer = operator.post("purge/survey", body)
    assert (answer.status_code == 200) is accepted, answer.content


# OpenAPI 3.0 has no ``propertyNames`` (decisions 96 and 165): a map's key rule
# is in its description, and the server holds every key to it.
KEYS = [
    ("a name", "load", True),
    ("128 bytes", "é" * 64, True),
    ("empty", "", False),
    ("a control character", "lo\x01ad", False),
    ("leading whitespace", " load", False),
    ("trailing whitespace", "load\u3000", False),
    ("leading NEL (U+0085)", "\x85load", False),
    ("trailing NEL (U+0085)", "load\x85", False),
    ("129 bytes", "x" * 129, False),
    ("130 bytes in 65 characters", "é" * 65, False),
]


def test_the_document_is_openapi_3_0_and_states_the_key_rules_in_words() -> None:
    document = schema_document()
    assert document["openapi"].startswith("3.0")
    assert "propertyNames" not in str(document)
    schemas = document["components"]["schemas"]
    for component, member in (
        ("InstanceRequest", "identifying_parameters"),
        ("InstanceRequest", "non_identifying_parameters"),
        ("LaunchRunRequest", "identifying_parameters"),
        ("UpgradeRequest", "step_mapping"),
    ):
        text = schemas[component]["properties"][member]["description"]
        for rule in ("1–128 UTF-8 bytes", "no control characters", "trailing whitespace"):
            assert rule in text, (component, member, rule)
        assert "cannot state a rule on keys" in text


@pytest.mark.parametrize(("case", "key", "accepted"), KEYS)
@pytest.mark.parametrize("member", ["identifying_parameters", "non_identifying_parameters"])
def test_a_parameter_name_is_taken_exactly_when_it_keeps_the_stated_rule(
    rt: Runtime, member: str, case: str, key: str, accepted: bool
) -> None:
    answer = rt.post("instances", {"job_name": "import_job", member: {key: "v"}})
    assert (answer.status_code in (200, 201)) is accepted, answer.content
    if not accepted:
        assert answer.status_code == 400


@pytest.mark.parametrize(("case", "key", "accepted"), KEYS)
def test_a_step_mapping_key_is_taken_exactly_when_it_keeps_the_stated_rule(
    rt: Runtime, case: str, key: str, accepted: bool
) -> None:
    body = upgrade({key: "load_v2"})
    answer = rt.post("definitions/upgrades", body)
    # Both digests are unknown definitions: a well-formed edge is 404, not 400.
    assert (answer.status_code != 400) is accepted, answer.content


CONTEXT = {"schema": "s", "schema_version": 1, "payload": {}}
PLANS = [
    ("two keys", [{"key": "a"}, {"key": "b"}], True),
    ("one key twice", [{"key": "a"}, {"key": "a"}], False),
    ("one entry twice", [{"key": "a", "context": CONTEXT}] * 2, False),
]


@pytest.mark.parametrize(("case", "entries", "accepted"), PLANS)
def test_a_plan_is_schema_valid_exactly_when_taken(
    components: dict[str, Any], rt: Runtime, case: str, entries: Any, accepted: bool
) -> None:
    parent = rt.started_step(rt.started())
    body = {"entries": entries}
    assert schema_valid(components, "PartitionPlanRequest", body) is accepted
    answer = rt.post(f"steps/{parent['id']}/partitions", body)
    assert (answer.status_code == 201) is accepted, answer.content


def test_a_key_repeated_with_another_context_is_refused_as_the_schema_says_in_words(
    components: dict[str, Any], rt: Runtime
) -> None:
    """``uniqueItems`` compares whole entries; the rule by key is in the words."""
    entries = components["schemas"]["PartitionPlanRequest"]["properties"]["entries"]
    assert entries["uniqueItems"] is True
    assert "each key once in the plan" in entries["description"]
    assert "same key and different contexts are refused" in entries["description"]
    parent = rt.started_step(rt.started())
    body = {"entries": [{"key": "a"}, {"key": "a", "context": CONTEXT}]}
    answer = rt.post(f"steps/{parent['id']}/partitions", body)
    assert (answer.status_code, answer.json()["code"]) == (400, "duplicate_partition_key")
