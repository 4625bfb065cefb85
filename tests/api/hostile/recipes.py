"""A valid request of each operation against real rows: a recipe per mutating
operation; any other operation gets the world's generic rows and a body or
query built from the schema."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from tests.api.hostile.schema import INPUT_DIGEST, Operation, example
from tests.api.hostile.world import CHECKPOINT, CONTEXT, FLOW, FLOW_V2, TOKEN, Target, World
from tests.api.support import FAILURE


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


def _launch_run(w: World) -> Target:
    body = {
        "job_name": "flow_job",
        "identifying_parameters": {"run": "launched"},
        "owner_token": "0f" * 16,
        "definition_digest": w.definition(),
    }
    return Target("launches", body)


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


def _resolve_lost_write(w: World) -> Target:
    execution = w.rt.move(w.started(), "FAILED")
    body = {"reason_code": "TARGET_CHECKED", "note": "checked", "operation_id": "lw-1"}
    return Target(f"executions/{execution['id']}/lost-write/resolve", body)


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


MAIL_RULE = {"jobs": ["import_*"], "events": ["execution.failed"], "email": ["oncall@example.com"]}


def _rule(w: World) -> str:
    name = w.unique("rule-")
    w.rt.post("notifications/rules", {"name": name, **MAIL_RULE}, 201)
    return name


def _create_rule(w: World) -> Target:
    return Target("notifications/rules", {"name": "oncall", **MAIL_RULE})


def _rule_action(action: str) -> Callable[[World], Target]:
    def recipe(w: World) -> Target:
        suffix = "" if action == "remove" else f"/{action}"
        return Target(f"notifications/rules/{_rule(w)}{suffix}", {})

    return recipe


def _redeliver(w: World) -> Target:
    from oxide_batch import models

    rule = models.NotificationRule.objects.get(name=_rule(w))
    now = w.clock.now()
    event = models.NotificationEvent.objects.create(
        kind="execution.failed", job_name="import_job", occurred_at=now, dispatched_at=now
    )
    dead = models.NotificationDelivery.objects.create(
        event=event,
        rule=rule,
        webhook_id=w.unique("msg_hostile_"),
        state="dead",
        attempts=5,
        next_attempt_at=now,
        created_at=now,
    )
    return Target(f"notifications/deliveries/{dead.pk}/redeliver", {})


def _set_deadline(w: World) -> Target:
    return Target("notifications/deadlines", {"job_name": "import_job", "max_duration": "2h"})


def _clear_deadline(w: World) -> Target:
    w.rt.put("notifications/deadlines", {"job_name": "import_job", "expect_every": "1d"}, 200)
    return Target("notifications/deadlines", {"job_name": "import_job"})


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


def _claim_partition(w: World) -> Target:
    execution = w.started()
    parent = w.started_step(execution, "parent")
    w.plan(parent, ("a", "b"))
    body = {"owner_token": "c3" * 16, "worker": {"host": "h", "pid": 7, "name": "n", "client": "c"}}
    return Target(f"steps/{parent['id']}/partitions/claim", body)


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
    "launch": _launch_run,
    "transition_execution": _execution_transition,
    "enrich_execution_exit_status": _execution_exit,
    "claim_execution": _claim,
    "observe_execution_control": _control,
    "create_step": _create_step,
    "append_flow_decision": _flow_decision,
    "recover_execution": _recover,
    "stop_execution": _stop,
    "abandon_execution": _abandon,
    "resolve_lost_write": _resolve_lost_write,
    "place_hold": _hold,
    "release_hold": _release,
    "survey_purge": _survey,
    "apply_purge": _apply,
    "create_notification_rule": _create_rule,
    "remove_notification_rule": _rule_action("remove"),
    "enable_notification_rule": _rule_action("enable"),
    "disable_notification_rule": _rule_action("disable"),
    "test_notification_rule": _rule_action("test"),
    "redeliver_notification": _redeliver,
    "set_deadline": _set_deadline,
    "clear_deadline": _clear_deadline,
    "transition_step": _step_transition,
    "enrich_step_exit_status": _step_exit,
    "commit_chunk": _chunk,
    "create_partition_plan": _plan,
    "restart_partition_plan": _restart_plan,
    "claim_partition": _claim_partition,
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


def cached_request(world: World, op: Operation) -> Target:
    """The operation's valid request, made once per world."""
    if op.operation_id not in world.targets:
        world.targets[op.operation_id] = valid_request(world, op)
    return world.targets[op.operation_id]
