"""Hostile input to every operation (SPEC §4 "No input ever produces a 500", §9).

The operations are enumerated from the generated OpenAPI schema (as
``test_schema.py`` does), so a new endpoint is covered as soon as it is routed.
Each operation gets a *valid* request against real rows (a recipe below, or,
for an operation without one, ids of generic rows and a body built from the
schema); then one member at a time is replaced by a hostile value taken from
that member's schema (NUL and other control characters, lone surrogates,
integers past the 64-bit range, floats and booleans where integers are
expected, unknown enum codes, 1 MB strings, nesting past the limit, …), and
the whole body, the content type, the path ids and the query parameters are
attacked the same way. Every answer must be a problem+json with a ``code``:
413 for an oversized body, 415 for a wrong media type, 404 for an absurd id,
400 for everything else — and nothing may be written (a fingerprint of every
batch table is compared after each request). Finally the valid request itself
must succeed, which proves the refusals came from the hostile member alone.
Hypothesis then puts arbitrary text holding a control or surrogate code point
into every string member (bounded), and what the contract admits — control
characters inside opaque payloads, 2^53+1 where an integer may be that large —
must come back exactly.

Runs on both databases; PostgreSQL is where a NUL byte in text would bite.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache, cached_property
from typing import Any, cast
from urllib.parse import quote

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.db import connection, models
from django.test import override_settings
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from oxide_batch.api import deps
from oxide_batch.client.wire import PROBLEM_CONTENT_TYPE
from oxide_batch.repository import FixedClock
from tests.api.support import FAILURE, Runtime, url
from tests.conftest import EPOCH

PREFIX = "/api/v1/"
MAX_BIGINT = 2**63 - 1
BODY_LIMIT = 4096  # DATA_UPLOAD_MAX_MEMORY_SIZE while attacking: small and fast
HUGE = "x" * (1024 * 1024)  # a 1 MB string, within the default 2 MiB body limit
TOKEN = "0123456789abcdef0123456789abcdef"
INPUT_DIGEST = "ab" * 32
CONTEXT = {"schema": "range", "schema_version": 1, "payload": {"from": "a", "to": 99}}
CHECKPOINT = {"schema": "cursor", "schema_version": 2, "payload": {"offset": "k", "n": 7}}
FLOW: dict[str, Any] = {
    "format": 2,
    "job": "flow_job",
    "entry": "load",
    "nodes": [{"id": "load", "kind": "step"}, {"id": "store", "kind": "step"}],
    "transitions": [
        {"source": "load", "pattern": "COMPLETED", "target": {"node": "store"}},
        {"source": "load", "pattern": "*", "target": {"terminal": "FAIL"}},
        {"source": "store", "pattern": "*", "target": {"terminal": "COMPLETE"}},
    ],
}
FLOW_V2 = {**FLOW, "nodes": [*FLOW["nodes"], {"id": "audit", "kind": "step"}]}
# Members whose free-form JSON is opaque data by contract (stored and returned
# as sent): control characters there are data, not an attack on a name.
OPAQUE = re.compile(r"(^|\.)payload\.")
# String members whose contract admits control characters other than NUL
# (partition keys are "1–128 UTF-8 bytes, compared byte for byte, nothing else
# is checked", oxide_batch.domain.partitions).
ADMITS_CONTROL = re.compile(r"^entries\.\d+\.key$")
# Other documented answers to a hostile member: a manifest naming another job
# (here: the job name plus a NUL) is ``definition_job_mismatch`` (409, checked
# before the graph, oxide_batch.domain.definitions).
ALSO_EXPECTED = {("manifest", "NUL in job"): (409,)}

# ================================================================== the schema


@cache
def schema() -> dict[str, Any]:
    document: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
    return document


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with ``$ref`` and a single-entry ``allOf`` inlined (``nullable`` kept)."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return resolve({**schema()["components"]["schemas"][name], **_without(node, "$ref")})
    if len(node.get("allOf", ())) == 1:
        return resolve({**node["allOf"][0], **_without(node, "allOf")})
    return node


def _without(node: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k != key}


@dataclass(frozen=True)
class Operation:
    method: str
    template: str  # "executions/{execution_id}/transition"
    operation_id: str
    body: dict[str, Any] | None  # the resolved request schema
    query: tuple[dict[str, Any], ...]
    path_names: tuple[str, ...]

    def __str__(self) -> str:
        return self.operation_id

    def path(self, values: dict[str, Any]) -> str:
        return self.template.format(**{name: values[name] for name in self.path_names})

    @property
    def mutating(self) -> bool:
        return self.body is not None


def operations() -> list[Operation]:
    found = []
    for template, item in schema()["paths"].items():
        for method, operation in item.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            parameters = operation.get("parameters", [])
            found.append(
                Operation(
                    method=method.upper(),
                    template=template.removeprefix(PREFIX),
                    operation_id=operation["operationId"],
                    body=resolve(body["schema"]) if body else None,
                    query=tuple(p for p in parameters if p["in"] == "query"),
                    path_names=tuple(p["name"] for p in parameters if p["in"] == "path"),
                )
            )
    return sorted(found, key=str)


OPERATIONS = operations()
BODY_OPERATIONS = [op for op in OPERATIONS if op.mutating]
QUERY_OPERATIONS = [op for op in OPERATIONS if op.query]
PATH_OPERATIONS = [op for op in OPERATIONS if op.path_names]


def example(node: dict[str, Any]) -> Any:
    """A plausible value of a schema (used where no recipe knows better)."""
    node = resolve(node)
    if "enum" in node:
        return node["enum"][0]
    kind = node.get("type")
    if kind == "object" and "properties" in node:
        return {name: example(child) for name, child in node["properties"].items()}
    if kind == "object":
        return {}
    if kind == "array":
        return [example(node.get("items", {}))]
    if kind == "integer":
        return max(int(node.get("minimum", 1)), 1)
    if kind == "boolean":
        return False
    if kind == "string":
        if node.get("format") == "date-time":
            return "2025-12-31T00:00:00Z"
        if node.get("pattern") == "^[0-9a-f]{64}$":
            return INPUT_DIGEST
        return "x"
    return {}


# ============================================================ the world's rows


@dataclass(frozen=True)
class Target:
    """A valid request: its path (ids of real rows) and body (or query)."""

    path: str
    body: dict[str, Any] = field(default_factory=dict)
    ok: tuple[int, ...] = (200, 201)


class World:
    """Creates, through the API, the rows a valid request of each operation needs."""

    def __init__(self, client: APIClient, clock: FixedClock) -> None:
        self.client = client
        self.rt = Runtime(client)
        self.clock = clock
        self.serial = 0
        self.targets: dict[str, Target] = {}

    def unique(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    # -- jobs
    def definition(self, manifest: dict[str, Any] = FLOW) -> str:
        body = {"job_name": "flow_job", "revision": self.unique("r"), "manifest": manifest}
        response = self.rt.post("definitions", body)
        assert response.status_code in (200, 201), response.content
        digest: str = response.json()["digest"]
        return digest

    def instance(self, job: str = "import_job") -> dict[str, Any]:
        body = {"job_name": job, "identifying_parameters": {"run": self.unique("run-")}}
        result: dict[str, Any] = self.rt.post("instances", body, 201)
        return result

    def starting(self) -> dict[str, Any]:
        instance = self.instance()
        result: dict[str, Any] = self.rt.post(f"instances/{instance['id']}/executions", {}, 201)
        return result

    def started(self) -> dict[str, Any]:
        return self.rt.move(self.starting(), "STARTED")

    def flow_started(self) -> tuple[dict[str, Any], str]:
        digest = self.definition()
        instance = self.instance("flow_job")
        execution = self.rt.post(
            f"instances/{instance['id']}/executions", {"definition_digest": digest}, 201
        )
        return self.rt.move(execution, "STARTED"), digest

    def started_step(self, execution: dict[str, Any] | None = None, name: str = "load") -> Any:
        return self.rt.started_step(execution or self.started(), name)

    # -- partitions
    def plan(self, parent: dict[str, Any], keys: tuple[str, ...] = ("a",)) -> list[Any]:
        entries = [{"key": key, "context": CONTEXT} for key in keys]
        created = self.rt.post(f"steps/{parent['id']}/partitions", {"entries": entries}, 201)
        partitions: list[Any] = created["partitions"]
        return partitions

    def assigned(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], Any]:
        execution = self.started()
        parent = self.started_step(execution, "parent")
        (partition,) = self.plan(parent)
        worker = self.started_step(execution, "worker")
        body = {"expected_version": partition["version"], "worker_step_execution_id": worker["id"]}
        assigned = self.rt.post(f"partitions/{partition['id']}/assign", body, 200)
        return execution, parent, assigned, worker

    def completed_partition(self) -> tuple[dict[str, Any], dict[str, Any]]:
        _, parent, assigned, worker = self.assigned()
        worker = self.rt.move_step(worker, "COMPLETED")
        body = {"expected_version": assigned["version"], "worker_step_execution_id": worker["id"]}
        self.rt.post(f"partitions/{assigned['id']}/complete", body, 200)
        return parent, worker

    # -- generic rows for reads and for operations without a recipe
    @cached_property
    def ids(self) -> dict[str, Any]:
        execution, _ = self.flow_started()
        step = self.started_step(execution, "load")
        (partition,) = self.plan(step)
        return {
            "instance_id": execution["job_instance_id"],
            "execution_id": execution["id"],
            "step_id": step["id"],
            "partition_id": partition["id"],
            "node_id": "load",
        }

    def target(self, op: Operation) -> Target:
        """The operation's valid request, made once per world."""
        if op.operation_id not in self.targets:
            self.targets[op.operation_id] = valid_request(self, op)
        return self.targets[op.operation_id]


def transition(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "expected_version": row["version"],
        "status": "FAILED",
        "failure": FAILURE,
        "terminal_rollback": False,
    }


def _register_definition(w: World) -> Target:
    return Target("definitions", {"job_name": "flow_job", "revision": "hostile", "manifest": FLOW})


def _register_upgrade(w: World) -> Target:
    body = {
        "job_name": "flow_job",
        "key": "to-v2",
        "from_digest": w.definition(FLOW),
        "to_digest": w.definition(FLOW_V2),
        "step_mapping": {"load": "load"},
    }
    return Target("definitions/upgrades", body)


def _instance(w: World) -> Target:
    body = {
        "job_name": "hostile_job",
        "identifying_parameters": {"run": "2026-07-29", "n": 5},
        "non_identifying_parameters": {"note": "n"},
    }
    return Target("instances", body)


def _launch(w: World) -> Target:
    digest = w.definition()
    instance = w.instance("flow_job")
    return Target(f"instances/{instance['id']}/executions", {"definition_digest": digest})


def _execution_transition(w: World) -> Target:
    execution = w.started()
    return Target(f"executions/{execution['id']}/transition", transition(execution))


def _execution_exit(w: World) -> Target:
    execution = w.started()
    body = {"expected_version": execution["version"], "exit_code": "HOSTILE_EXIT"}
    return Target(f"executions/{execution['id']}/exit-status", body)


def _claim(w: World) -> Target:
    execution = w.starting()
    body = {"expected_version": execution["version"], "owner_token": TOKEN}
    return Target(f"executions/{execution['id']}/claim", body)


def _control(w: World) -> Target:
    return Target(f"executions/{w.started()['id']}/control", {"owner_token": TOKEN})


def _create_step(w: World) -> Target:
    body = {"step_name": "load", "node_id": "load", "start_limit": 3}
    return Target(f"executions/{w.started()['id']}/steps", body)


def _flow_decision(w: World) -> Target:
    execution, digest = w.flow_started()
    step = w.rt.step(execution, "load")
    body = {
        "source_node_id": "load",
        "source_step_execution_id": step["id"],
        "kind": "STEP_EXIT",
        "observed_outcome": "COMPLETED",
        "target": {"node": "store"},
        "plan_fingerprint": digest,
        "input_digest": INPUT_DIGEST,
        "reused_decision_id": None,
    }
    return Target(f"executions/{execution['id']}/flow-decisions", body)


def _recover(w: World) -> Target:
    execution = w.started()
    w.clock.advance(timedelta(minutes=20))
    proposal = w.rt.get(f"executions/{execution['id']}/recovery-proposal")
    body = {
        "expected_version": proposal["version"],
        "disposition": "MARK_FAILED",
        "reason_code": "WORKER_LOST",
        "evidence_digest": proposal["evidence_digest"],
        "failure_category": "STALE_RECOVERED",
        "failure_id": 77,
        "operation_id": "recover-1",
    }
    return Target(f"executions/{execution['id']}/recover", body)


def _stop(w: World) -> Target:
    execution = w.started()
    body = {"expected_version": execution["version"], "operation_id": "stop-1"}
    return Target(f"executions/{execution['id']}/stop", body)


def _abandon(w: World) -> Target:
    execution = w.rt.move(w.started(), "FAILED")
    body = {
        "expected_version": execution["version"],
        "reason_code": "OPERATOR_DECISION",
        "operation_id": "abandon-1",
    }
    return Target(f"executions/{execution['id']}/abandon", body)


def _hold(w: World) -> Target:
    body = {"reason_code": "LEGAL_HOLD", "operation_id": "hold-1"}
    return Target(f"instances/{w.instance()['id']}/hold", body)


def _release(w: World) -> Target:
    instance = w.instance()
    w.rt.put(f"instances/{instance['id']}/hold", {"reason_code": "LEGAL", "operation_id": "h"}, 200)
    body = {"reason_code": "LEGAL_HOLD", "operation_id": "release-1"}
    return Target(f"instances/{instance['id']}/hold", body)


SURVEY = {
    "ended_before": "2025-12-31T22:00:00Z",
    "job_name": "import_job",
    "statuses": ["FAILED"],
    "limit": 10,
}


def _survey(w: World) -> Target:
    return Target("purge/survey", dict(SURVEY))


def _apply(w: World) -> Target:
    w.clock.advance(timedelta(hours=-3))
    w.rt.move(w.started(), "FAILED")
    w.clock.advance(timedelta(hours=3))
    plan = w.rt.post("purge/survey", SURVEY, 200)
    assert plan["candidates"], plan
    body = {"plan": plan, "reason_code": "SCHEDULED_PURGE", "operation_id": "purge-1"}
    return Target("purge/apply", body)


def _step_transition(w: World) -> Target:
    step = w.started_step()
    return Target(f"steps/{step['id']}/transition", transition(step))


def _step_exit(w: World) -> Target:
    step = w.started_step()
    body = {"expected_version": step["version"], "exit_code": "HOSTILE_EXIT"}
    return Target(f"steps/{step['id']}/exit-status", body)


def _chunk(w: World) -> Target:
    step = w.started_step()
    body = {
        "expected_version": step["version"],
        "counts": {name: 1 for name in ("read", "processed", "written", "filtered", "committed")}
        | {"rolled_back": 0},
        "checkpoint": CHECKPOINT,
        "context": CONTEXT,
    }
    return Target(f"steps/{step['id']}/checkpoint", body)


def _plan(w: World) -> Target:
    step = w.started_step(name="parent")
    body = {"entries": [{"key": "a", "context": CONTEXT}, {"key": "b", "context": None}]}
    return Target(f"steps/{step['id']}/partitions", body)


def _restart_plan(w: World) -> Target:
    execution = w.started()
    parent = w.started_step(execution, "parent")
    w.plan(parent, ("a", "b"))
    w.rt.move_step(parent, "FAILED")
    execution = w.rt.move(w.rt.get(f"executions/{execution['id']}"), "FAILED")
    again = w.rt.post(f"instances/{execution['job_instance_id']}/executions", {}, 201)
    target = w.started_step(w.rt.move(again, "STARTED"), "parent")
    body = {"source_step_execution_id": parent["id"]}
    return Target(f"steps/{target['id']}/partitions/restart", body)


def _assign(w: World) -> Target:
    execution = w.started()
    (partition,) = w.plan(w.started_step(execution, "parent"))
    worker = w.started_step(execution, "worker")
    body = {"expected_version": partition["version"], "worker_step_execution_id": worker["id"]}
    return Target(f"partitions/{partition['id']}/assign", body)


def _complete(w: World) -> Target:
    _, _, assigned, worker = w.assigned()
    worker = w.rt.move_step(worker, "COMPLETED")
    body = {"expected_version": assigned["version"], "worker_step_execution_id": worker["id"]}
    return Target(f"partitions/{assigned['id']}/complete", body)


def _aggregate(w: World) -> Target:
    parent, _ = w.completed_partition()
    parent = w.rt.get(f"steps/{parent['id']}")
    return Target(f"steps/{parent['id']}/aggregate", {"expected_version": parent["version"]})


RECIPES: dict[str, Callable[[World], Target]] = {
    "register_definition": _register_definition,
    "register_definition_upgrade": _register_upgrade,
    "select_or_create_instance": _instance,
    "create_execution": _launch,
    "transition_execution": _execution_transition,
    "enrich_execution_exit_status": _execution_exit,
    "claim_execution": _claim,
    "observe_execution_control": _control,
    "create_step": _create_step,
    "append_flow_decision": _flow_decision,
    "recover_execution": _recover,
    "stop_execution": _stop,
    "abandon_execution": _abandon,
    "place_hold": _hold,
    "release_hold": _release,
    "survey_purge": _survey,
    "apply_purge": _apply,
    "transition_step": _step_transition,
    "enrich_step_exit_status": _step_exit,
    "commit_chunk": _chunk,
    "create_partition_plan": _plan,
    "restart_partition_plan": _restart_plan,
    "assign_partition": _assign,
    "complete_partition": _complete,
    "aggregate_partitions": _aggregate,
}


def valid_request(world: World, op: Operation) -> Target:
    """The operation's valid request: its recipe, else generic rows and a schema body."""
    recipe = RECIPES.get(op.operation_id)
    if recipe is not None:
        return recipe(world)
    if op.body is None:
        return Target(op.path(world.ids) + required_query(op), ok=(200,))
    return Target(op.path(world.ids), example(op.body), ok=())


def required_query(op: Operation) -> str:
    """``?…`` with a plausible value of each required query parameter ("" if none)."""
    base = {p["name"]: example(p["schema"]) for p in op.query if p.get("required")}
    return "?" + "&".join(f"{k}={quote(str(v), safe='')}" for k, v in base.items()) if base else ""


# =================================================================== checking


@cache
def _fingerprint_sql() -> str:
    """One statement: per batch table its row count, sum of versions, latest of
    every instant and count of every nullable column (a write moves one of them)."""
    quote_name = connection.ops.quote_name
    parts = []
    for model in apps.get_app_config("oxide_batch").get_models():
        table = quote_name(model._meta.db_table)
        aggregates = ["COUNT(*)"]
        for column in model._meta.concrete_fields:
            name = quote_name(column.column)
            if column.name == "version":
                aggregates.append(f"SUM({name})")
            elif isinstance(column, models.DateTimeField):
                aggregates.append(f"MAX({name})")
            elif column.null:
                aggregates.append(f"COUNT({name})")
        parts += [f"(SELECT {aggregate} FROM {table})" for aggregate in aggregates]
    return "SELECT " + ", ".join(parts)


def fingerprint() -> tuple[Any, ...]:
    with connection.cursor() as cursor:
        cursor.execute(_fingerprint_sql())
        return tuple(cursor.fetchone())


def snapshot() -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every batch table (the deep check, once per operation)."""
    return {
        model._meta.db_table: list(model._default_manager.order_by("pk").values_list())
        for model in apps.get_app_config("oxide_batch").get_models()
    }


@dataclass
class Attack:
    """One hostile request and the statuses its answer may have."""

    label: str
    method: str
    path: str
    data: bytes = b""
    content_type: str = "application/json"
    expect: tuple[int, ...] = (400,)


@dataclass
class Verdicts:
    """Bad answers collected over one operation, reported together."""

    client: APIClient
    bad: list[str] = field(default_factory=list)
    sent: int = 0
    last: Any = None

    def send(self, attack: Attack) -> Any:
        before = fingerprint()
        response = self.client.generic(
            attack.method,
            url(attack.path) if not attack.path.startswith("/") else attack.path,
            cast(Any, attack.data),
            content_type=attack.content_type,
        )
        self.sent += 1
        self.last = response
        problem = self._problem(response)
        success = response.status_code < 300
        if response.status_code not in attack.expect or (problem is None and not success):
            shown = problem if problem is not None else response.content[:300]
            self.bad.append(
                f"{attack.label}: {response.status_code} (expected {attack.expect}) {shown!r}"
            )
        elif fingerprint() != before:
            self.bad.append(f"{attack.label}: {response.status_code} but something was written")
        return response

    @staticmethod
    def _problem(response: Any) -> dict[str, Any] | None:
        if not response.get("Content-Type", "").startswith(PROBLEM_CONTENT_TYPE):
            return None
        try:
            body = json.loads(response.content)
        except ValueError:
            return None
        if not isinstance(body, dict) or not isinstance(body.get("code"), str):
            return None
        if body.get("status") != response.status_code:
            return None
        return body

    def assert_none(self) -> None:
        assert not self.bad, "\n".join(self.bad[:40]) + f"\n({len(self.bad)} of {self.sent})"


def encode(value: Any) -> bytes:
    # ensure_ascii: a lone surrogate travels as its \\uXXXX escape (it has no UTF-8).
    return json.dumps(value, ensure_ascii=True).encode("ascii")


# ============================================================ hostile values

NUL_AND_CONTROLS = ("\x00", "\x01", "\x08", "\x1b", "\x1f", "\x7f", "\x85", "\x9f")
SURROGATES = ("\ud800", "\udfff", "\udbff\udbff")


def string_values(node: dict[str, Any], base: Any, member: str) -> Iterator[tuple[str, Any]]:
    text = base if isinstance(base, str) and base else "x"
    controls = ("\x00",) if ADMITS_CONTROL.match(member) else NUL_AND_CONTROLS
    for character in controls:
        code = f"U+{ord(character):04X}"
        yield f"{code} inside", text[:1] + character + text[1:]
        yield f"{code} alone", character
        yield f"{code} trailing", text + character
    for surrogate in SURROGATES:
        yield f"lone surrogate {ord(surrogate[0]):X}", text + surrogate
    yield "1 MB", HUGE
    if "enum" in node:
        yield "unknown enum code", "NOT_A_CODE"
        yield "lower-case enum code", str(node["enum"][0]).lower()
        yield "empty enum code", ""
        yield "enum code with NUL", f"{node['enum'][0]}\x00"
    if node.get("format") == "date-time":
        yield "instant without offset", "2025-12-31T00:00:00"
        yield "instant past year 9999", "99999-01-01T00:00:00Z"
        yield "instant out of range", "9999-12-31T23:59:59-23:59"
        yield "instant as digits", "1735689600"
        yield "instant, NUL, garbage", "2025-12-31T00:00:00Z\x00garbage"
        yield "instant with NUL before the offset", "2025-12-31T00:00:00\x00Z"
    yield "integer for a string", 1
    yield "boolean for a string", True
    yield "array for a string", [text]


def integer_values(node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    yield "2^63", 2**63
    yield "2^64", 2**64
    yield "-2^63-1", -(2**63) - 1
    yield "10^40", 10**40
    maximum = node.get("maximum")
    if maximum is not None and maximum < 2**53 + 1:
        yield "2^53+1", 2**53 + 1
    if maximum is not None and maximum < MAX_BIGINT:
        yield "maximum+1", maximum + 1
    minimum = node.get("minimum")
    if minimum is not None:
        yield "minimum-1", minimum - 1
    yield "float with integral value", 1.0
    yield "float", 1.5
    yield "exponent", 1e3
    yield "true for an integer", True
    yield "false for an integer", False
    yield "string of digits", "1"
    yield "string with NUL", "1\x00"
    yield "object for an integer", {"value": 1}


def boolean_values() -> Iterator[tuple[str, Any]]:
    yield "1 for a boolean", 1
    yield "0 for a boolean", 0
    yield "string for a boolean", "true"
    yield "NUL for a boolean", "\x00"


def deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def free_json_values(base: Any) -> Iterator[tuple[str, Any]]:
    """NUL and control characters in the keys and leaves of a free-form value
    (opaque payloads excepted), a lone surrogate, nesting past 64 levels."""
    for path, leaf in _leaves(base):
        if OPAQUE.search(path):
            continue
        yield f"NUL in {path or 'value'}", _replace(base, path, f"{leaf}\x00")
    for path in _keys(base):
        if OPAQUE.search(path):
            continue
        for character in ("\x00", "\x01", "\x7f"):
            yield f"U+{ord(character):04X} in key {path}", _rename(base, path, character)
    yield "lone surrogate in a key", {"\ud800": 1}
    yield "nested 65 deep", deep(65)
    yield "integer for an object", 7
    yield "string for an object", "x"


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _leaves(child, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _leaves(child, f"{path}.{index}" if path else str(index))
    elif isinstance(value, str):
        yield path, value


def _keys(value: Any, path: str = "") -> Iterator[str]:
    if isinstance(value, dict):
        for key, child in value.items():
            here = f"{path}.{key}" if path else key
            yield here
            yield from _keys(child, here)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _keys(child, f"{path}.{index}" if path else str(index))


def _split(path: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in path.split(".")] if path else []


def _replace(value: Any, path: str, new: Any) -> Any:
    result = copy.deepcopy(value)
    parts = _split(path)
    if not parts:
        return new
    holder = result
    for part in parts[:-1]:
        holder = holder[part]
    holder[parts[-1]] = new
    return result


def _rename(value: Any, path: str, character: str) -> Any:
    result = copy.deepcopy(value)
    parts = _split(path)
    holder = result
    for part in parts[:-1]:
        holder = holder[part]
    holder[parts[-1] + character] = holder.pop(parts[-1])
    return result


def members(
    node: dict[str, Any], base: Any, path: str = ""
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(dotted path, schema) of every member of a body, nested objects and the
    first item of arrays of objects included."""
    node = resolve(node)
    for name, child in node.get("properties", {}).items():
        here = f"{path}.{name}" if path else name
        child = resolve(child)
        yield here, child
        value = base.get(name) if isinstance(base, dict) else None
        if child.get("type") == "object" and "properties" in child:
            yield from members(child, value if isinstance(value, dict) else {}, here)
        items = resolve(child.get("items", {}))
        if child.get("type") == "array" and "properties" in items and value:
            yield from members(items, value[0], f"{here}.0")


def member_values(member: str, node: dict[str, Any], base: Any) -> Iterator[tuple[str, Any]]:
    kind = node.get("type")
    if kind == "string" or "enum" in node:
        yield from string_values(node, base, member)
    elif kind == "integer":
        yield from integer_values(node)
    elif kind == "boolean":
        yield from boolean_values()
    elif kind == "array":
        yield "string for an array", "x"
        yield "object for an array", {"x": 1}
        yield "NUL item", ["\x00"]
        yield "nested 65 deep", deep(65)
    elif kind == "object" and "additionalProperties" in node:
        yield from free_json_values(base if isinstance(base, dict) and base else {"k": "v"})
    elif kind == "object" and "properties" in node:
        yield "string for an object", "x"
        yield "array for an object", [base]
    else:  # free-form JSON
        yield from free_json_values(base if base is not None else {"k": "v"})
    if not node.get("nullable"):
        yield "null", None


def body_attacks(op: Operation, target: Target) -> Iterator[Attack]:
    assert op.body is not None
    for member, node in members(op.body, target.body):
        base = _get(target.body, member)
        for label, value in member_values(member, node, base):
            body = _replace(target.body, member, value)
            expect = (400, *ALSO_EXPECTED.get((member, label), ()))
            yield Attack(f"{member}: {label}", op.method, target.path, encode(body), expect=expect)

    yield from whole_body_attacks(op, target)


def _get(value: Any, path: str) -> Any:
    for part in _split(path):
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def whole_body_attacks(op: Operation, target: Target) -> Iterator[Attack]:
    valid = encode(target.body)
    method, path = op.method, target.path

    def attack(label: str, data: bytes, **extra: Any) -> Attack:
        return Attack(f"body: {label}", method, path, data, **extra)

    if op.body and op.body.get("required"):
        yield attack("empty", b"")
        yield attack("empty object", b"{}")
    yield attack("null", b"null")
    yield attack("array", b"[]")
    yield attack("array of the valid body", b"[" + valid + b"]")
    yield attack("string", b'"x"')
    yield attack("number", b"1")
    yield attack("nested 65 deep", encode(deep(65)))
    yield attack("object nested 65 deep", b'{"a":' * 65 + b"1" + b"}" * 65)
    yield attack("truncated", valid[:-1])
    yield attack("trailing garbage", valid + b"x")
    yield attack("two documents", valid + valid)
    yield attack("raw NUL byte in a string", b'{"\x00": 1}')
    yield attack("raw control byte in a string", b'{"a\x01": 1}')
    yield attack("NUL outside a string", valid[:-1] + b"\x00}")
    yield attack("invalid UTF-8", valid[:-1] + b', "\xff": 1}')
    yield attack("surrogate encoded as UTF-8 bytes", valid[:-1] + b', "\xed\xa0\x80": 1}')
    yield attack("UTF-16 body", valid.decode().encode("utf-16"))
    yield attack("repeated member", valid[:-1] + b", " + valid[1:])
    yield attack("unknown member with NUL", encode({**target.body, "\x00": 1}))
    yield attack("unknown member, 1 MB name", encode({**target.body, HUGE: 1}))
    for content_type in (
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=xyz",
        "application/xml",
        "",
    ):
        yield attack(f"as {content_type or 'no content type'}", valid, content_type=content_type,
                     expect=(415,))  # fmt: skip
    yield attack("form-encoded pairs", b"a=1&b=2", content_type="application/x-www-form-urlencoded",
                 expect=(415,))  # fmt: skip


def oversized_attacks(op: Operation, target: Target) -> Iterator[Attack]:
    """Just above the limit → 413; exactly at it → not 413 (an unknown member here)."""
    for size, expect in ((BODY_LIMIT + 1, (413,)), (BODY_LIMIT, (400,))):
        padded = {**target.body, "padding": ""}
        padding = size - len(encode(padded))
        data = encode({**target.body, "padding": "p" * padding})
        assert len(data) == size
        yield Attack(f"body of {size} bytes", op.method, target.path, data, expect=expect)


ABSURD_IDS = (
    ("0", 400),
    ("-1", 400),
    (str(2**63), 400),
    (str(10**40), 400),
    ("9" * 4000, 400),
    (str(MAX_BIGINT), 404),
    ("9" * 4001, 404),  # past the converter's digits: no route
    ("%00", 404),
    ("1%00", 404),
    ("1%0A", 404),
    ("%ED%A0%80", 404),
    ("1.0", 404),
    ("0x10", 404),
)
NODE_IDS = (
    ("%00", 400),
    ("lo%00ad", 400),
    ("%01", 400),
    ("%7F", 400),
    ("%C2%85", 400),
    ("%20load", 400),
    ("x" * 129, 400),
    ("%ED%A0%80", (400, 404)),  # Django keeps invalid UTF-8 percent-encoded
    ("%FF", (400, 404)),
)


def path_attacks(op: Operation, target: Target, ids: dict[str, Any]) -> Iterator[Attack]:
    valid = encode(target.body) if op.mutating else b""
    query = "" if op.mutating else required_query(op)
    for name in op.path_names:
        choices = NODE_IDS if name == "node_id" else ABSURD_IDS
        for value, status in choices:
            path = op.path({**ids, name: value}) + query
            expect = status if isinstance(status, tuple) else (status,)
            yield Attack(f"path {name}={value[:24]}", op.method, path, valid, expect=expect)


def _path_ids(op: Operation, target: Target) -> dict[str, Any]:
    """The ids in the valid request's path, by parameter name."""
    pattern = re.escape(op.template)
    for name in op.path_names:
        pattern = pattern.replace(re.escape("{" + name + "}"), f"(?P<{name}>[^/]+)")
    match = re.fullmatch(pattern, target.path.split("?", 1)[0])
    assert match is not None, (op.template, target.path)
    return match.groupdict()


def query_values(node: dict[str, Any]) -> Iterator[tuple[str, str]]:
    node = resolve(node)
    items = resolve(node.get("items", {}))
    if "enum" in node or "enum" in items:
        yield "unknown code", "NOT_A_CODE"
        yield "lower-case code", str((node.get("enum") or items["enum"])[0]).lower()
    if node.get("type") == "integer":
        for label, value in (("2^63", 2**63), ("-1", -1), ("10^40", 10**40)):
            yield label, str(value)
        yield "float", "1.5"
        yield "boolean", "true"
        yield "digits with a space", " 1"
    if node.get("pattern") == "^[0-9a-f]{64}$":
        yield "upper-case digest", "AB" * 32
        yield "short digest", "ab"
    valid = str(example(node))
    for character in NUL_AND_CONTROLS:
        yield f"U+{ord(character):04X}", f"x{character}"
        yield f"U+{ord(character):04X} trailing", f"{valid}{character}"
    yield "100 KB", "x" * (100 * 1024)


INSTANT_PARAMETER = re.compile(r"^(created|ended)_(after|before)$")


def query_attacks(op: Operation, ids: dict[str, Any]) -> Iterator[Attack]:
    base = {p["name"]: example(p["schema"]) for p in op.query if p.get("required")}
    path = PREFIX + op.path(ids)
    for parameter in op.query:
        name = parameter["name"]
        values = list(query_values(parameter["schema"]))
        if INSTANT_PARAMETER.match(name):
            values += [
                ("garbage instant", "yesterday"),
                ("year 99999", "99999-01-01T00:00:00Z"),
                ("instant, NUL, garbage", "2025-12-31T00:00:00Z\x00garbage"),
                ("instant with NUL before the offset", "2025-12-31T00:00:00\x00Z"),
            ]
        if name == "cursor":
            values += [("not base64", "!!!"), ("forged cursor", "cD0tMQ==")]  # "p=-1"
        for label, value in values:
            query = "&".join(
                f"{quote(key)}={quote(str(v), safe='')}" for key, v in {**base, name: value}.items()
            )
            yield Attack(f"?{name}: {label}", "GET", f"{path}?{query}")
        yield Attack(
            f"?{name}: invalid UTF-8",
            "GET",
            f"{path}?{quote(name)}=%FF%ED%A0%80",
            expect=(200, 400),
        )
    required = [p["name"] for p in op.query if p.get("required")]
    for name in required:
        query = "&".join(f"{k}={quote(str(v))}" for k, v in base.items() if k != name)
        yield Attack(f"?{name}: missing", "GET", f"{path}?{query}")


# ==================================================================== fixtures


def build_world(monkeypatch: pytest.MonkeyPatch, settings: Any) -> World:
    """A superuser (every operation reached past authorization) on a fixed clock."""
    clock = FixedClock(EPOCH)
    monkeypatch.setattr(deps, "clock", clock)
    # Thousands of operator requests: the operator throttle is another test's subject.
    settings.OXIDE_BATCH_OPERATOR_THROTTLE_RATE = None
    user = User.objects.create_superuser("hostile", password=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    client.raise_request_exception = False  # a 500 is a verdict, not a crash of the test
    return World(client, clock)


@pytest.fixture
def world(db: None, monkeypatch: pytest.MonkeyPatch, settings: Any) -> World:
    return build_world(monkeypatch, settings)


def attack_then_succeed(world: World, op: Operation, attacks: Callable[[Target], Any]) -> Verdicts:
    """Send every attack on the operation's valid request, check that nothing was
    written at all, then send the valid request: it must succeed (so each refusal
    was the hostile part's doing)."""
    target = valid_request(world, op)
    verdicts = Verdicts(world.client)
    before = snapshot()
    for attack in attacks(target):
        verdicts.send(attack)
    verdicts.assert_none()
    assert snapshot() == before
    if target.ok:
        response = world.client.generic(
            op.method,
            url(target.path),
            cast(Any, encode(target.body)),
            content_type="application/json",
        )
        assert response.status_code in target.ok, (response.status_code, response.content[:500])
    return verdicts


# ======================================================================= tests


def test_every_mutating_operation_has_a_recipe() -> None:
    """A new operation is attacked with a schema-built body anyway; a recipe
    makes its valid request real, so the final success check can run."""
    assert {op.operation_id for op in BODY_OPERATIONS} <= set(RECIPES)
    assert set(RECIPES) <= {op.operation_id for op in OPERATIONS}


@pytest.mark.parametrize("op", BODY_OPERATIONS, ids=str)
def test_hostile_members_are_400_and_write_nothing(world: World, op: Operation) -> None:
    attack_then_succeed(world, op, lambda target: body_attacks(op, target))


@pytest.mark.parametrize("op", BODY_OPERATIONS, ids=str)
@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=BODY_LIMIT)
def test_a_body_past_the_limit_is_413(world: World, op: Operation) -> None:
    attack_then_succeed(world, op, lambda target: oversized_attacks(op, target))


@pytest.mark.parametrize("op", PATH_OPERATIONS, ids=str)
def test_absurd_path_segments_are_400_or_404(world: World, op: Operation) -> None:
    def attacks(target: Target) -> Iterator[Attack]:
        return path_attacks(op, target, _path_ids(op, target))

    attack_then_succeed(world, op, attacks)


@pytest.mark.parametrize("op", QUERY_OPERATIONS, ids=str)
def test_hostile_query_parameters_are_400(world: World, op: Operation) -> None:
    verdicts = Verdicts(world.client)
    for attack in query_attacks(op, world.ids):
        verdicts.send(attack)
    verdicts.assert_none()


# ================================================== hypothesis: any control text

STRING_MEMBERS = [
    (op, member)
    for op in BODY_OPERATIONS
    for member, node in members(op.body or {}, {})
    if node.get("type") == "string" or "enum" in node
]
# Text with at least one control (Cc) or surrogate (Cs) code point somewhere.
HOSTILE_CHARACTER = st.characters(categories=["Cc", "Cs"])
ANY_CHARACTER = st.characters(codec=None, categories=["L", "M", "N", "P", "S", "Z", "C"])
HOSTILE_TEXT = st.builds(
    lambda head, bad, tail: head + bad + tail,
    st.text(ANY_CHARACTER, max_size=12),
    HOSTILE_CHARACTER,
    st.text(ANY_CHARACTER, max_size=12),
)


def _admits(member: str, text: str) -> bool:
    """A partition key may hold any character but NUL and surrogates."""
    if not ADMITS_CONTROL.match(member):
        return False
    return not any(c == "\x00" or 0xD800 <= ord(c) <= 0xDFFF for c in text)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_control_or_surrogate_text_in_any_string_member_is_400(world: World, data: Any) -> None:
    op, member = data.draw(st.sampled_from(STRING_MEMBERS), label="member")
    text = data.draw(HOSTILE_TEXT, label="text")
    target = world.target(op)
    if _get(target.body, member) is None and "." in member:
        return  # a member of an absent optional object (the matrix covers it)
    if _admits(member, text):
        return
    verdicts = Verdicts(world.client)
    body = encode(_replace(target.body, member, text))
    verdicts.send(Attack(f"{op}: {member}={text!r}", op.method, target.path, body))
    verdicts.assert_none()


# ================================================ 2^53 + 1 is an integer, not a double

BEYOND_DOUBLE = 2**53 + 1  # the first integer a JSON double cannot hold


def test_integers_past_2_to_the_53_keep_every_digit(world: World) -> None:
    """Where 2^53+1 is in range it is accepted and answered exactly (a parser
    going through floats would round it to 2^53)."""
    step = world.started_step()
    counts = {"read": BEYOND_DOUBLE, "written": MAX_BIGINT}
    body = {"expected_version": step["version"], "counts": counts}
    committed = world.rt.post(f"steps/{step['id']}/checkpoint", body, 200)
    assert (committed["counts"]["read"], committed["counts"]["written"]) == tuple(counts.values())
    failure = {"category": "USER_COMPONENT", "failure_id": BEYOND_DOUBLE}
    failed = world.rt.move_step(committed, "FAILED", failure=failure)
    assert failed["failure"] == failure
    stale = {"expected_version": BEYOND_DOUBLE, "exit_code": "X"}
    response = world.rt.post(f"steps/{step['id']}/exit-status", stale)
    assert response.status_code == 409, response.content
    assert (response.json()["code"], response.json()["expected"]) == (
        "stale_version",
        BEYOND_DOUBLE,
    )


# ======================================== opaque payloads travel byte for byte

ODD_TEXT = "".join(chr(code) for code in range(0x20)) + "\x7f\x85\u2028\ufeff\uffff\U0001f600"


def test_opaque_payloads_and_partition_keys_keep_every_character(world: World) -> None:
    """What the contract admits (control characters, NUL included, inside
    checkpoint/context payloads; any character but NUL in a partition key) is
    stored and answered back exactly, on PostgreSQL too (text, never jsonb)."""
    payload = {"text": ODD_TEXT, ODD_TEXT: [ODD_TEXT], "nul": "\x00"}
    envelope = {"schema": "odd", "schema_version": 1, "payload": payload}
    step = world.started_step(name="parent")
    response = world.client.post(
        url(f"steps/{step['id']}/checkpoint"),
        encode({"expected_version": step["version"], "checkpoint": envelope, "context": envelope}),
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    stored = world.rt.get(f"steps/{step['id']}/checkpoint")
    assert stored["checkpoint"] == envelope
    assert stored["context"] == envelope
    key = ODD_TEXT.replace("\x00", "")[:40]
    entries = [{"key": key, "context": envelope}]
    response = world.client.post(
        url(f"steps/{step['id']}/partitions"), encode({"entries": entries}),
        content_type="application/json",
    )  # fmt: skip
    assert response.status_code == 201, response.content
    (partition,) = world.rt.get(f"steps/{step['id']}/partitions")["partitions"]
    assert (partition["key"], partition["context"]) == (key, envelope)


# ============================================ regressions the matrix found (issue 8)


@pytest.mark.parametrize("character", ["\x1c", "\x1f", "\x85", " ", "\n"])
def test_a_digest_with_a_trailing_control_or_space_is_refused(world: World, character: str) -> None:
    """DRF trimmed digests with ``str.strip`` (which takes U+001C–U+001F and U+0085
    for white space): ``<digest>\\x1f`` launched an attempt bound to ``<digest>``."""
    target = _launch(world)
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
    target = _apply(world)
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
    target = _apply(world)
    before = snapshot()
    forged = {**target.body, "plan": _replace(target.body["plan"], member, value)}
    response = world.rt.post(target.path, forged)
    assert response.status_code == 400, response.content
    (entry,) = response.json()["errors"]["plan"]
    assert entry["code"] == "malformed_purge_plan"
    assert member.rsplit(".", 1)[-1] in entry["message"]
    assert snapshot() == before
    world.rt.post(target.path, target.body, 200)
