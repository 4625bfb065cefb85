"""Owner leases and the operator's override in the commands (contract §2.5.3, §2.5.5): an owned
execution waits for its lease, an unowned one for the stale threshold;
``batch_recover --force --note`` recovers earlier and the decision records the
override and its note; ``batch_show`` and ``batch_executions`` show the lease
and the rule; the usage and refusals keep contract §6.2's exit codes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from oxide_batch import models
from oxide_batch.domain import BatchStatus, JobExecution
from oxide_batch.domain.retention import format_instant
from oxide_batch.management.commands import _cli
from tests.commands import test_contract_commands as contract_commands
from tests.commands import test_operator_commands as operator_commands
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus
system_repo = operator_commands.system_repo
run = operator_commands.run
refused = contract_commands.refused
text = contract_commands.text
OWNER = b"\x07" * 16
TTL = timedelta(seconds=60)  # OXIDE_BATCH_LEASE_TTL's default
NOTE = "worker host decommissioned (ticket OPS-42)"


@pytest.fixture(autouse=True)
def no_terminal(monkeypatch):
    monkeypatch.setattr(_cli, "stdin_is_terminal", lambda: False)


@pytest.fixture
def owned(system_repo, clock) -> JobExecution:
    """A STARTED execution whose runtime claimed it, last active 10 s ago: its
    lease is held for another 50 s."""
    with system_repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key("owned_job")).instance
        execution = uow.create_job_execution(instance.id)
        uow.claim_execution_owner(execution.id, execution.version, OWNER)
        uow.commit()
    started = move(system_repo, execution, S.STARTED, clock=clock)
    clock.advance(timedelta(seconds=10))
    return started


def recover(execution: JobExecution, *extra: str, operation_id: str = "rec-1") -> tuple[str, ...]:
    """``batch_recover`` of ``execution`` with the digest ``batch_show`` gives now."""
    digest = run("batch_show", str(execution.id))["proposal"]["evidence_digest"]
    return (
        "batch_recover", str(execution.id), "--expected-version", str(execution.version),
        "--disposition", "MARK_FAILED", "--reason", "WORKER_LOST", "--evidence-digest",
        digest, "--operation-id", operation_id, "--yes", "--actor", "ops:carol", *extra,
    )  # fmt: skip


def nothing_recorded(execution: JobExecution) -> bool:
    stored = models.JobExecution.objects.get(pk=execution.id)
    return (
        (stored.status, stored.version) == (execution.status.value, execution.version)
        and not models.OperatorRequest.objects.exists()
        and not models.RecoveryDecision.objects.exists()
    )


# -- batch_recover --force --note --------------------------------------------------------


def test_force_with_a_note_recovers_an_owned_execution_before_its_lease_expires(owned):
    args = recover(owned, "--force", "--note", NOTE)
    applied = run(*args)
    assert (applied["outcome"], applied["exit_code"]) == ("APPLIED", 0)
    assert applied["execution"]["status"] == "FAILED"
    decision = applied["decision"]
    assert (decision["eligibility"], decision["override"]) == ("operator_override", True)
    assert decision["override_note"] == NOTE
    stored = models.RecoveryDecision.objects.get()
    assert (stored.eligibility, stored.override_note) == ("operator_override", NOTE)
    # The same request again (same operation id and arguments) replays, exit 0.
    replayed = run(*args)
    assert (replayed["outcome"], replayed["exit_code"]) == ("REPLAYED", 0)
    assert replayed["decision"] == decision
    assert models.RecoveryDecision.objects.count() == 1


def test_the_text_output_says_the_decision_was_an_override_with_its_note(owned):
    args = recover(owned, "--force", "--note", NOTE)
    shown = text(*args)
    assert shown.startswith(f"recovered: execution {owned.id} (owned_job attempt 1) STARTED ->")
    assert f"eligibility: operator_override (before the rules allowed it); note: {NOTE}" in shown
    assert "by ops:carol (operation rec-1)" in shown
    again = text(*args)
    assert again.startswith("replayed (recorded before, nothing done again): execution")


def test_force_on_an_execution_the_rules_allow_records_their_eligibility(owned, clock):
    clock.advance(TTL)  # the lease expired: no override is needed
    decision = run(*recover(owned, "--force", "--note", NOTE))["decision"]
    assert (decision["eligibility"], decision["override"]) == ("lease_expired", False)
    assert decision["override_note"] == NOTE


@pytest.mark.parametrize(
    ("extra", "code", "says"),
    [
        (("--force",), "override_note_required", "--force needs --note TEXT"),
        (("--note", NOTE), "override_note_without_force", "give it with --force"),
        (("--force", "--note", "bell\x07"), "recovery_field_control_character", "--note"),
        (("--force", "--note", " padded"), "recovery_field_surrounding_whitespace", "--note"),
        (("--force", "--note", ""), "recovery_field_empty", "--note must not be empty"),
    ],
)
def test_a_flawed_override_is_a_usage_error_and_nothing_is_applied(owned, extra, code, says):
    exit_code, message, document = refused(*recover(owned, *extra))
    assert exit_code == 2 == document["exit_code"]
    assert document["error"]["code"] == code
    assert message.startswith(f"{code}: ")
    assert says in message
    assert nothing_recorded(owned)  # no effect, no audit row (input, not a rule)


def test_force_on_a_completed_execution_is_refused_by_the_rule(system_repo, clock):
    completed = move(system_repo, launch(system_repo), S.STARTED, S.COMPLETED, clock=clock)
    exit_code, _, document = refused(*recover(completed, "--force", "--note", NOTE))
    assert (exit_code, document["error"]["code"]) == (3, "recovery_not_allowed")
    assert models.OperatorRequest.objects.get().rejection_code == "recovery_not_allowed"
    assert not models.RecoveryDecision.objects.exists()


def test_not_stale_without_force_says_force_and_note_exist(owned):
    exit_code, message, document = refused(*recover(owned))
    assert (exit_code, document["error"]["code"]) == (3, "execution_not_stale")
    hint = document["error"]["hint"]
    assert "--force --note TEXT" in hint
    assert "batch_watchdog" in hint  # an owned execution: the watchdog acts on expiry
    assert message.splitlines()[-1] == f"hint: {hint}"
    # An owned execution waits for its lease: the TTL decided, not the stale threshold.
    assert document["error"]["setting"] == "OXIDE_BATCH_LEASE_TTL"
    # Refused by a rule: audited, and the same request replays as the same refusal.
    assert models.OperatorRequest.objects.get().rejection_code == "execution_not_stale"
    again, _, replayed = refused(*recover(owned))
    assert (again, replayed["error"]["hint"]) == (3, hint)


def test_not_stale_without_an_owner_names_the_stale_threshold(system_repo, clock):
    fresh = move(system_repo, launch(system_repo), S.STARTED, clock=clock)
    _, _, document = refused(*recover(fresh))
    assert document["error"]["setting"] == "OXIDE_BATCH_RECOVERY_STALE_AFTER"
    assert "no owner is recorded" in document["error"]["hint"]
    assert "--force --note TEXT" in document["error"]["hint"]


# -- batch_show and batch_executions: the lease and the rule ----------------------------


def test_show_gives_an_owned_executions_lease_and_rule(owned, clock):
    expires = format_instant(clock.now() - timedelta(seconds=10) + TTL)
    shown = run("batch_show", str(owned.id))
    proposal = shown["proposal"]
    # The earlier keys stay (scripts read them); the lease's are added.
    assert set(proposal) >= {
        "eligible", "last_activity_at", "reason_code", "inactive_seconds",
        "threshold_seconds", "evidence", "evidence_digest",
    }  # fmt: skip
    assert {"owner_recorded", "last_activity_at", "lease_expires_at"} <= set(shown["execution"])
    assert (proposal["eligible"], proposal["reason_code"]) == (False, "execution_not_stale")
    assert (proposal["eligibility"], proposal["rule"]) == (None, "lease")
    assert (proposal["lease_ttl_seconds"], proposal["threshold_seconds"]) == (60, 60)
    assert proposal["lease_expires_at"] == expires == shown["execution"]["lease_expires_at"]
    lines = text("batch_show", str(owned.id)).splitlines()
    assert lines[2] == (
        f"recovery: not eligible: execution_not_stale — its owner's lease is held until "
        f"{expires} (50 s from now); the watchdog (manage.py batch_watchdog) fails it once "
        f"the lease expires, or recover now with batch_recover {owned.id} --force --note …"
    )
    assert lines[3].startswith(f"to recover now (override): manage.py batch_recover {owned.id} ")
    assert lines[3].endswith("--force --note TEXT")


def test_show_says_when_the_lease_expired(owned, clock):
    expires = format_instant(clock.now() - timedelta(seconds=10) + TTL)
    clock.advance(timedelta(seconds=65))  # expired 15 s ago
    proposal = run("batch_show", str(owned.id))["proposal"]
    assert (proposal["eligible"], proposal["eligibility"]) == (True, "lease_expired")
    recovery = text("batch_show", str(owned.id)).splitlines()[2]
    assert recovery.startswith(f"recovery: eligible (lease expired at {expires}, 15 s ago")
    assert "batch_watchdog" in recovery


def test_show_gives_an_unowned_executions_inactivity_rule(system_repo, clock):
    orphan = move(system_repo, launch(system_repo), S.STARTED, clock=clock)
    clock.advance(timedelta(minutes=16))
    shown = run("batch_show", str(orphan.id))
    proposal = shown["proposal"]
    assert (proposal["eligibility"], proposal["rule"]) == ("inactive", "inactivity")
    assert proposal["threshold_seconds"] == 900
    assert proposal["lease_expires_at"] is None is shown["execution"]["lease_expires_at"]
    lines = text("batch_show", str(orphan.id)).splitlines()
    assert lines[2] == "recovery: eligible (inactive 16 min, threshold 15 min, no owner recorded)"
    assert not lines[3].endswith("--force --note TEXT")  # no override needed


def test_the_list_shows_the_lease_of_owned_executions_only(owned, system_repo, clock):
    orphan = move(system_repo, launch(system_repo, key("orphan_job")), S.STARTED, clock=clock)
    clock.advance(timedelta(seconds=1))  # both inactive: the owned one for 12 s
    expires = format_instant(clock.now() - timedelta(seconds=12) + TTL)
    rows = {
        row["id"]: row for row in run("batch_executions", "--unresolved-for", "0s")["executions"]
    }
    assert rows[owned.id]["lease_expires_at"] == expires
    assert rows[orphan.id]["lease_expires_at"] is None
    lines = text("batch_executions", "--unresolved-for", "0s").splitlines()
    assert "LEASE" in lines[0].split()
    by_id = {int(line.split()[0]): line for line in lines[1:]}
    assert "held 48 s" in by_id[owned.id]
    assert "held" not in by_id[orphan.id]
    clock.advance(timedelta(minutes=5))
    assert "expired 4 min" in text("batch_executions", "--instance", str(owned.job_instance_id))
