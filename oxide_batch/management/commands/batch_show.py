"""``manage.py batch_show ID``: one execution with its recovery proposal — whether
it may be recovered and by which rule (contract §2.5.4: an owner's lease, else the
inactivity threshold; UNKNOWN always), and the command line that would — and what
a restart would do, step by step (``restart_plan``, contract §2.3.6)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.domain.durations import format_duration
from oxide_batch.domain.evidence import UNKNOWN_EFFECT
from oxide_batch.domain.worker import WorkerIdentity, describe_worker
from oxide_batch.management.commands._cli import OxideCommand
from oxide_batch.management.commands._operator import (
    execution_json,
    instant,
    parse_instant,
    proposal_json,
    service,
)
from oxide_batch.selectors.executions import execution_view
from oxide_batch.selectors.restart_plan import execution_restart_plan, plan_document

WATCHDOG = "watchdog (manage.py batch_watchdog)"


class Command(OxideCommand):
    help = "Show one execution and its recovery proposal (lease, eligibility, evidence, digest)."
    read_only = True

    def add_command_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("execution_id", type=int)

    def run(self, **options: Any) -> dict[str, Any]:
        # The proposal first: it validates the id (and answers not found).
        proposal = service().propose(options["execution_id"])
        view = execution_view(options["execution_id"])
        return {
            "execution": execution_json(view, proposal.evidence.owner_user),
            "proposal": proposal_json(proposal),
            "restart_plan": plan_document(execution_restart_plan(options["execution_id"])),
        }

    def render(self, document: dict[str, Any]) -> None:
        execution, proposal = document["execution"], document["proposal"]
        self.stdout.write(
            f"execution {execution['id']} of {execution['job_name']} attempt "
            f"{execution['attempt']}: {execution['status']} (version {execution['version']})"
        )
        owner = describe_worker_json(execution["worker"])
        if owner is not None:
            self.stdout.write(f"owner: {owner}")
        failure = execution["failure"]
        if failure is not None:
            self.stdout.write(
                f"failure: {failure['category']} (failure id {failure['failure_id']})"
            )
            if failure["logs_url"]:
                self.stdout.write(f"logs: {failure['logs_url']}")
        inactive = span(proposal["inactive_seconds"])
        self.stdout.write(f"last activity: {proposal['last_activity_at']} ({inactive} ago)")
        self.stdout.write(f"recovery: {verdict(execution, proposal)}")
        command = recover_command(execution, proposal)
        if command is not None:
            label = "to recover" if proposal["eligible"] else "to recover now (override)"
            self.stdout.write(f"{label}: {command}")
        self.stdout.write(f"evidence digest: {proposal['evidence_digest']}")
        self.stdout.write(json.dumps(proposal["evidence"], indent=2))
        for line in plan_lines(document["restart_plan"]):
            self.stdout.write(line)


def plan_lines(plan: dict[str, Any]) -> list[str]:
    """The restart plan in words: refused or not, then one line per step."""
    refusal = plan["refusal"]
    lines = [
        "restart: would be accepted (the same definition)"
        if refusal is None
        else f"restart: refused — {refusal['code']}: {refusal['detail']}"
    ]
    for step in plan["steps"]:
        source = (
            f"step execution {step['from_step_execution_id']}, attempt {step['from_attempt']}, "
            f"{step['status']}"
        )
        lines.append(f"  {step['step_name']}: {step['action']} — {step['reason']} ({source})")
    if plan["steps_left_off"]:
        lines.append("  … more steps: see batch_show --json")
    lines.extend(f"  {node['node_id']}: run — {node['reason']}" for node in plan["unreached"])
    return lines


def describe_worker_json(worker: dict[str, Any] | None) -> str | None:
    """The ``worker`` member as one line (decision 310), or ``None``."""
    if worker is None:
        return None
    return describe_worker(WorkerIdentity.from_data(worker), worker.get("user"))


def span(seconds: int) -> str:
    return format_duration(timedelta(seconds=seconds))


def verdict(execution: dict[str, Any], proposal: dict[str, Any]) -> str:
    """Eligibility in words, with the rule that decided it and what comes next."""
    pk, status = execution["id"], execution["status"]
    inactive, threshold = proposal["inactive_seconds"], proposal["threshold_seconds"]
    unknown_commit = proposal["evidence"]["markers"]["unknown_commit"]
    # Only a person resolves an unknown commit (the watchdog leaves it alone).
    unknown = (
        "the unknown-commit marker is set, so no watchdog acts on it: MARK_FAILED needs "
        f"--reason {UNKNOWN_EFFECT}"
    )
    eligibility = proposal["eligibility"]
    if eligibility == "unknown_status":
        return (
            "eligible: UNKNOWN — its last commit may or may not have applied, so no watchdog "
            "acts on it; an operator decides: MARK_FAILED with --reason UNKNOWN_EFFECT, or ABANDON"
        )
    if eligibility == "lease_expired":
        ago = span(inactive - proposal["lease_ttl_seconds"])
        then = unknown if unknown_commit else f"a running {WATCHDOG} fails it on its next pass"
        return (
            f"eligible (lease expired at {proposal['lease_expires_at']}, {ago} ago, TTL "
            f"{span(proposal['lease_ttl_seconds'])}) — {then}"
        )
    if eligibility == "inactive":
        return (
            f"eligible (inactive {span(inactive)}, threshold {span(threshold)}, "
            "no owner recorded)" + (f" — {unknown}" if unknown_commit else "")
        )
    reason = proposal["reason_code"]
    if reason == "recovery_not_allowed":
        return f"not eligible: recovery_not_allowed — a {status} execution is not recovered"
    force = f"recover now with batch_recover {pk} --force --note …"
    if proposal["rule"] == "lease":
        held = span(proposal["lease_ttl_seconds"] - inactive)
        return (
            f"not eligible: {reason} — its owner's lease is held until "
            f"{proposal['lease_expires_at']} ({held} from now); the {WATCHDOG} fails it once "
            f"the lease expires, or {force}"
        )
    stale_at = parse_instant(proposal["last_activity_at"]) + timedelta(seconds=threshold)
    return (
        f"not eligible: {reason} — inactive {span(inactive)}, threshold {span(threshold)}, "
        f"no owner recorded (no watchdog acts on it): recoverable after "
        f"{instant(stale_at)}, or {force}"
    )


def recover_command(execution: dict[str, Any], proposal: dict[str, Any]) -> str | None:
    """The ``batch_recover`` line for this proposal (``--force --note`` while not
    stale), or ``None`` when nothing may recover it. The version is the
    evidence's: the one its digest was computed with."""
    if proposal["reason_code"] == "recovery_not_allowed":
        return None
    line = (
        f"manage.py batch_recover {execution['id']} --expected-version "
        f"{proposal['evidence']['version']} --evidence-digest {proposal['evidence_digest']} "
        "--disposition MARK_FAILED|ABANDON --reason CODE"
    )
    return line if proposal["eligible"] else f"{line} --force --note TEXT"
