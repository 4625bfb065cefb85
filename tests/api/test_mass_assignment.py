"""Mass assignment is impossible (issue 8): protected state changes only through
its own operation.

For every mutating operation (enumerated from the OpenAPI schema, so a new one
is covered), a valid request plus one member that tries to set protected state
— a member of any representation the API answers (``status``, ``version``,
``id``, ``owner_recorded``, ``stop_requested``, ``hold``, ``created_at``,
``job_instance_id``, ``outcome``, …) or a known alias (``owner``,
``owner_token``, ``held``, ``actor``) — is refused: 400 ``invalid_request``
naming that member with ``unknown_member`` (inside a checkpoint or context
envelope, a closed object validated whole: ``invalid_envelope`` naming the
envelope), nothing written. Members the operation declares are its contract
and are left out (``status`` is the transition's business, ``owner_token`` the
claim's).

Then each operation's valid request is applied once, and the rows it changed
are compared with a table of what the operation may change: the status moves
only by a transition (or an operation whose contract is one), the exit code only
by exit-status, the owner token only by a claim, the stop request only by a
stop; and a row's version moves by exactly 1 whenever versioned state changes,
never otherwise (contract §2, §3.2; docs/decisions.md 29: stop requests, claims and
observations leave it alone).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps

from tests.api.hostile.recipes import valid_request
from tests.api.hostile.schema import BODY_OPERATIONS, Operation, example, resolve, schema
from tests.api.hostile.values import members, replace_at, value_at
from tests.api.hostile.verdicts import Attack, Verdicts, encode, send
from tests.api.hostile.world import TOKEN, World

# Aliases a client might try that no representation spells this way.
ALIASES: dict[str, Any] = {
    "owner": "someone",
    "owner_token": TOKEN,
    "held": True,
    "actor": "admin",
    "hold": {"actor": "admin", "reason_code": "LEGAL_HOLD"},
    "outcome": "APPLIED",
    "stop_requested": True,
    "job_instance_id": 1,
}
# Sent one at a time (the rest of the schema's members: all at once).
ONE_BY_ONE = (
    "status", "version", "id", "owner", "owner_token", "owner_recorded", "stop_requested",
    "hold", "held", "created_at", "ended_at", "job_instance_id", "actor", "outcome",
)  # fmt: skip
# Injected into nested request objects (failure, counts, partition entries, plan).
NESTED = ("status", "version", "id")


def _response_properties(node: dict[str, Any], found: dict[str, dict[str, Any]]) -> None:
    node = resolve(node)
    for name, child in node.get("properties", {}).items():
        found.setdefault(name, resolve(child))
        if name == "results":  # a page: its rows' members
            _response_properties(resolve(child).get("items", {}), found)


def protected_members() -> dict[str, Any]:
    """Every member of every success representation, with a plausible value."""
    found: dict[str, dict[str, Any]] = {}
    for item in schema()["paths"].values():
        for operation in item.values():
            for status, response in operation["responses"].items():
                body = response.get("content", {}).get("application/json")
                if status.startswith("2") and body:
                    _response_properties(body["schema"], found)
    values = {name: example(node) for name, node in found.items()}
    return {**values, **ALIASES}


PROTECTED = protected_members()


def extras_for(op: Operation) -> dict[str, Any]:
    declared = set(resolve(op.body or {}).get("properties", {}))
    return {name: value for name, value in PROTECTED.items() if name not in declared}


def nested_objects(op: Operation, body: dict[str, Any]) -> Iterator[str]:
    """Dotted paths of the nested request objects present in ``body``."""
    for path, node in members(op.body or {}, body):
        value = value_at(body, path)
        if node.get("type") == "object" and "properties" in node and isinstance(value, dict):
            yield path


def refused_members(response: Any) -> dict[str, list[str]]:
    """The problem's ``errors``: field path → codes (and, for a plan, messages)."""
    body = json.loads(response.content)
    return {
        path: [entry["code"] for entry in entries] + [entry["message"] for entry in entries]
        for path, entries in body.get("errors", {}).items()
    }


def closed_envelopes(op: Operation, body: dict[str, Any]) -> set[str]:
    """Dotted paths of the checkpoint/context envelopes in ``body`` whose schema
    is closed (``additionalProperties: false``: exactly schema, schema_version,
    payload — contract §2.3.3)."""
    nodes = dict(members(op.body or {}, body))
    return {
        path
        for path in nested_objects(op, body)
        if set(nodes[path].get("properties", {})) == {"schema", "schema_version", "payload"}
        and nodes[path].get("additionalProperties") is False
    }


def names_unknown(errors: dict[str, list[str]], path: str, closed: Collection[str] = ()) -> bool:
    """``path`` refused as an unknown member — directly; inside a purge plan,
    whose shape problems are one ``malformed_purge_plan`` naming the member; or
    inside a closed envelope, whose shape problems are one ``invalid_envelope``
    naming the envelope (oxide_batch.domain.state: an envelope is validated
    whole, "expected {schema, schema_version, payload}")."""
    if "unknown_member" in errors.get(path, ()):
        return True
    container = path.rpartition(".")[0]
    if container in closed and "invalid_envelope" in errors.get(container, ()):
        return True
    head, _, rest = path.partition(".")
    return any(
        "malformed_purge_plan" in codes and f"{rest}: unknown member" in " ".join(codes)
        for key, codes in errors.items()
        if key == head
    )


# ======================================================================= refusals


def test_protected_members_are_the_representations_members() -> None:
    """The list is the schema's, so a new protected member is covered too."""
    assert {"status", "version", "id", "owner_recorded", "stop_requested", "created_at"} <= set(
        PROTECTED
    )
    assert {"ended_at", "job_instance_id", "hold", "exit_code", "counts", "attempt"} <= set(
        PROTECTED
    )
    assert {"actor", "outcome", "replayed", "changed", "record"} <= set(PROTECTED)


@pytest.mark.parametrize("op", BODY_OPERATIONS, ids=str)
def test_a_member_that_sets_protected_state_is_refused(world: World, op: Operation) -> None:
    target = valid_request(world, op)
    verdicts = Verdicts(world.client)
    wrong: list[str] = []
    extras = extras_for(op)
    assert extras, op
    attempts = [
        (name, {**target.body, name: value}) for name, value in extras.items() if name in ONE_BY_ONE
    ]
    for path in nested_objects(op, target.body):
        for name in NESTED:
            nested = {**value_at(target.body, path), name: PROTECTED[name]}
            attempts.append((f"{path}.{name}", replace_at(target.body, path, nested)))
    closed = closed_envelopes(op, target.body)
    for path, body in attempts:
        response = verdicts.send(Attack(f"+{path}", op.method, target.path, encode(body)))
        if response.status_code == 400 and not names_unknown(
            refused_members(response), path, closed
        ):
            wrong.append(f"+{path}: {refused_members(response)}")
    verdicts.assert_none()
    assert not wrong, "\n".join(wrong)
    # Every member of every representation at once: each one named.
    verdicts.send(Attack("+all", op.method, target.path, encode({**target.body, **extras})))
    verdicts.assert_none()
    errors = refused_members(verdicts.last)
    assert {name for name in extras if not names_unknown(errors, name)} == set()
    # The same request without them is the operation's own business.
    response = send(world, op, target, target.body)
    assert response.status_code in target.ok, response.content


# ======================================= protected state moves only through its own operation

RUNTIME_WRITE = {"updated_at", "last_activity_at"}
ENDING = {"ended_at", "failure_category", "failure_id"}
COUNTS = {
    f"{name}_count"
    for name in ("read", "processed", "written", "filtered", "committed", "rolled_back")
}
LIFECYCLE = {"status", "started_at", *ENDING, *RUNTIME_WRITE}
CHECKPOINT = {"checkpoint", "checkpoint_checksum", "context", "context_checksum"}
HOLD = {"hold_actor", "hold_user_id", "hold_reason_code", "hold_placed_at"}
# Evidence and bookkeeping that never move the version (docs/decisions.md 29).
VERSIONLESS = {"owner_token", "owner_user_id", "stop_requested_at", "stop_requested_by",
               "last_observed_at", "last_activity_at", "lease_ttl", "lost_write_resolution",
               *HOLD}  # fmt: skip


@dataclass(frozen=True)
class May:
    """What one successful request of an operation may do: the columns of
    existing rows it may change (by model), the models it may add rows to, and
    whether it may delete."""

    change: dict[str, set[str]]
    add: frozenset[str] = frozenset()
    delete: bool = False
    # The version a new row starts at: 0, but a fused launch's attempt is
    # inserted where create + claim + start leave it, 1 (decision 159).
    starts_at: int = 0


def may(change: dict[str, set[str]] | None = None, *add: str, delete: bool = False) -> May:
    return May(change or {}, frozenset(add), delete)


AUDITED = ("OperatorRequest",)
# A move that ends an execution writes its notification event with it (the
# transactional outbox, issue 41; decision 240).
OUTBOX = "NotificationEvent"
RULE_AUDIT = "NotificationRuleChange"
DEADLINE_AUDIT = "JobDeadlineChange"
CONTRACT: dict[str, May] = {
    "register_definition": may(None, "JobDefinition"),
    "register_definition_upgrade": may(None, "DefinitionUpgrade"),
    "select_or_create_instance": may(None, "JobInstance"),
    "create_execution": may(None, "JobExecution"),
    # contract §4.2: the instance (when new) and its attempt, inserted claimed and STARTED.
    "launch": May({}, frozenset({"JobInstance", "JobExecution"}), starts_at=1),
    # A move to FAILED records when it failed (kept by a later abandon), a move to
    # STOPPING when the runtime acknowledged the stop (decision 197).
    "transition_execution": may(
        {"JobExecution": {*LIFECYCLE, *COUNTS, "version", "failed_at", "stopping_at"}}, OUTBOX
    ),
    "enrich_execution_exit_status": may({"JobExecution": {"exit_code", "version", *RUNTIME_WRITE}}),
    # The claimant's user too (contract §2.5.2: only its writes are accepted afterwards).
    # The claim records the lease TTL it granted (contract §2.5.3, decision 212).
    "claim_execution": may({"JobExecution": {"owner_token", "owner_user_id", "lease_ttl"}}),
    # The owner's observation of a stop request moves it to STOPPING (version + 1).
    "observe_execution_control": may(
        {
            "JobExecution": {
                "last_observed_at",
                "last_activity_at",
                "status",
                "version",
                "stopping_at",
            }
        }
    ),
    "create_step": may(None, "StepExecution"),
    "append_flow_decision": may(None, "FlowDecision"),
    # Recovery resolves the unfinished steps and marks what it resolved (contract §2.5.6).
    "recover_execution": may(
        {
            # Not the runtime's activity: last_activity_at stays, on both (issue 25).
            "JobExecution": {
                "status",
                "version",
                "recovery_decision_id",
                "updated_at",
                "failed_at",
                *ENDING,
            },
            "StepExecution": {"status", "version", "recovery_decision_id", "updated_at", *ENDING},
        },
        *AUDITED,
        "RecoveryDecision",
        OUTBOX,
    ),
    "stop_execution": may({"JobExecution": {"stop_requested_at", "stop_requested_by"}}, *AUDITED),
    # An operator's abandon is not the runtime's activity: last_activity_at stays.
    "abandon_execution": may(
        {"JobExecution": {"status", "version", *ENDING, "updated_at"}}, *AUDITED, OUTBOX
    ),
    # A resolution writes its record and nothing of the run (contract §2.5.14).
    "resolve_lost_write": may({"JobExecution": {"lost_write_resolution"}}, *AUDITED),
    "place_hold": may({"JobInstance": HOLD}, "RetentionRecord"),
    "release_hold": may({"JobInstance": HOLD}, "RetentionRecord"),
    "survey_purge": may(),
    "apply_purge": may(None, "RetentionRecord", delete=True),
    # Notifications (issue 41): each change with its own audit row, nothing else.
    "create_notification_rule": may(None, "NotificationRule", RULE_AUDIT),
    "remove_notification_rule": may(None, RULE_AUDIT, delete=True),
    "enable_notification_rule": may({"NotificationRule": {"enabled", "updated_at"}}, RULE_AUDIT),
    "disable_notification_rule": may({"NotificationRule": {"enabled", "updated_at"}}, RULE_AUDIT),
    "test_notification_rule": may(None, RULE_AUDIT),
    "redeliver_notification": may(
        {"NotificationDelivery": {"state", "attempts", "next_attempt_at", "settled_at"}},
        RULE_AUDIT,
    ),
    "set_deadline": may(None, "JobDeadline", DEADLINE_AUDIT),
    "clear_deadline": may(None, DEADLINE_AUDIT, delete=True),
    "transition_step": may({"StepExecution": {*LIFECYCLE, *COUNTS, "version"}}),
    "enrich_step_exit_status": may({"StepExecution": {"exit_code", "version", *RUNTIME_WRITE}}),
    "commit_chunk": may({"StepExecution": {*COUNTS, *CHECKPOINT, "version", *RUNTIME_WRITE}}),
    "create_partition_plan": may(None, "StepPartition"),
    "restart_partition_plan": may(None, "StepPartition"),
    "assign_partition": may(
        {"StepPartition": {"status", "version", "worker_step_execution_id", "exit_code", *COUNTS}}
    ),
    "complete_partition": may({"StepPartition": {"status", "version", "exit_code", *COUNTS}}),
    # Issue 43: a new worker step, created STARTED (version 1), and the
    # partition's assignment (and retries).
    "claim_partition": May(
        {
            "StepPartition": {
                "status",
                "version",
                "worker_step_execution_id",
                "exit_code",
                *COUNTS,
                "retries",
            }
        },
        frozenset({"StepExecution"}),
        starts_at=1,
    ),
    "aggregate_partitions": may({"StepExecution": {*LIFECYCLE, *COUNTS, "exit_code", "version"}}),
}


def rows() -> dict[tuple[str, Any], dict[str, Any]]:
    return {
        (model.__name__, row["pk"]): row
        for model in apps.get_app_config("oxide_batch").get_models()
        for row in model._default_manager.values(
            "pk", *(field.attname for field in model._meta.concrete_fields)
        )
    }


def test_every_mutating_operation_has_a_contract_row() -> None:
    assert {op.operation_id for op in BODY_OPERATIONS} == set(CONTRACT)


@pytest.mark.parametrize("op", BODY_OPERATIONS, ids=str)
def test_protected_state_changes_only_through_its_own_operation(
    world: World, op: Operation
) -> None:
    target = valid_request(world, op)
    world.clock.advance(timedelta(seconds=1))  # so a written instant shows
    before = rows()
    response = send(world, op, target, target.body)
    assert response.status_code in target.ok, response.content
    after = rows()
    contract = CONTRACT[op.operation_id]
    gone = {key[0] for key in before if key not in after}
    assert not gone or contract.delete, gone
    added = {key[0] for key in after if key not in before}
    assert added <= contract.add, added
    for key, row in after.items():
        if key not in before:
            assert row.get("version", contract.starts_at) == contract.starts_at, (key, row)
            continue
        changed = {column for column in row if row[column] != before[key][column]}
        allowed = contract.change.get(key[0], set())
        assert changed <= allowed, (key, changed - allowed)
        if "version" in row:
            bumped = row["version"] - before[key]["version"]
            versioned = changed - VERSIONLESS - {"version"}
            assert bumped == (1 if versioned else 0), (key, changed, bumped)


def test_a_transition_never_sets_the_exit_code_and_exit_status_never_the_status(
    world: World,
) -> None:
    """The two CAS writes of an execution keep to their own columns, each one
    version step, whatever order they come in."""
    execution = world.started()
    path = f"executions/{execution['id']}"
    enriched = world.rt.post(
        f"{path}/exit-status", {"expected_version": execution["version"], "exit_code": "X1"}, 200
    )
    assert (enriched["status"], enriched["exit_code"]) == ("STARTED", "X1")
    assert enriched["version"] == execution["version"] + 1
    moved = world.rt.move(enriched, "COMPLETED")
    assert (moved["status"], moved["exit_code"]) == ("COMPLETED", "X1")
    assert moved["version"] == enriched["version"] + 1
    # A stop request and a claim are evidence, not state: no version step.
    other = world.started()
    stopped = world.rt.post(
        f"executions/{other['id']}/stop",
        {"expected_version": other["version"], "operation_id": "stop-x"},
        200,
    )["execution"]
    assert (stopped["stop_requested"], stopped["status"]) == (True, "STARTED")
    assert stopped["version"] == other["version"]
