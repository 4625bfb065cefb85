"""Operator commands for when no browser is at hand (contract §6.4): the same
validation, idempotency and audit as the services, and the exit codes of §6.2."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.repository import DjangoJobRepository
from tests.helpers import launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus


@pytest.fixture
def system_repo(monkeypatch, clock):
    """Commands build their own repository: give it the test clock."""
    original = DjangoJobRepository.__init__

    def with_test_clock(self, clock_=None, **kwargs):
        original(self, clock_ or clock, **kwargs)

    monkeypatch.setattr(DjangoJobRepository, "__init__", with_test_clock)
    return DjangoJobRepository()


def run(*args: str) -> Any:
    out = io.StringIO()
    call_command(*args, "--json", stdout=out, stderr=io.StringIO())
    return json.loads(out.getvalue())


def exit_code(*args: str) -> int:
    with pytest.raises(CommandError) as error:
        call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
    return error.value.returncode


@pytest.fixture
def orphan(system_repo, clock):
    execution = move(system_repo, launch(system_repo), S.STARTED, clock=clock)
    clock.advance(timedelta(minutes=30))
    return execution


def test_list_the_attempts_of_an_instance_and_the_unresolved(orphan):
    by_instance = run("batch_executions", "--instance", str(orphan.job_instance_id))
    assert [row["id"] for row in by_instance["executions"]] == [orphan.id]
    unresolved = run("batch_executions", "--unresolved-for", "15m")
    assert [row["id"] for row in unresolved["executions"]] == [orphan.id]
    assert unresolved["executions"][0]["owner_recorded"] is False
    assert run("batch_executions", "--unresolved-for", "1h")["executions"] == []


def test_show_prints_the_proposal(orphan):
    shown = run("batch_show", str(orphan.id))
    assert shown["execution"]["status"] == "STARTED"
    assert shown["proposal"]["eligible"] is True
    assert len(shown["proposal"]["evidence_digest"]) == 64


def test_recover_with_the_shown_digest_then_replay(orphan):
    digest = run("batch_show", str(orphan.id))["proposal"]["evidence_digest"]
    args = (
        "batch_recover", str(orphan.id), "--expected-version", "1", "--disposition",
        "MARK_FAILED", "--reason", "WORKER_LOST", "--evidence-digest", digest,
        "--operation-id", "rec-1", "--yes", "--actor", "ops:carol",
    )  # fmt: skip
    applied = run(*args)
    assert (applied["outcome"], applied["execution"]["status"]) == ("APPLIED", "FAILED")
    assert applied["decision"]["resulting_status"] == "FAILED"
    replayed = run(*args)
    assert replayed["outcome"] == "REPLAYED"
    row = models.OperatorRequest.objects.get()
    assert (row.actor, row.action) == ("ops:carol", "RECOVER")


def test_stop_abandon_and_holds(system_repo, clock):
    execution = move(system_repo, launch(system_repo), S.STARTED, clock=clock)
    stopped = run(
        "batch_stop", str(execution.id), "--expected-version", "1", "--operation-id", "s-1"
    )
    assert (stopped["outcome"], stopped["changed"]) == ("APPLIED", True)
    failed = move(system_repo, execution, S.FAILED, clock=clock)
    abandoned = run(
        "batch_abandon", str(failed.id), "--expected-version", str(failed.version),
        "--reason", "NOT_NEEDED", "--operation-id", "a-1", "--yes",
    )  # fmt: skip
    assert abandoned["execution"]["status"] == "ABANDONED"
    instance = str(execution.job_instance_id)
    held = run("batch_hold", instance, "--reason", "LEGAL_HOLD", "--operation-id", "h-1")
    assert held["outcome"] == "APPLIED"
    assert models.JobInstance.objects.get(pk=instance).hold_reason_code == "LEGAL_HOLD"
    run("batch_hold", instance, "--reason", "CLEARED", "--release", "--operation-id", "h-2")
    assert models.JobInstance.objects.get(pk=instance).hold_reason_code is None


def test_exit_codes(orphan):
    target = str(orphan.id)
    common = ("--operation-id", "x-1", "--yes")
    # 2: no operation id without a terminal, and invalid input.
    assert exit_code("batch_stop", target, "--expected-version", "1") == 2
    assert exit_code("batch_stop", target, "--expected-version", "1", "--operation-id", "a b") == 2
    # 4: not found.
    assert exit_code("batch_stop", "999999", "--expected-version", "0", *common) == 4
    # 5: a stale version is a conflict.
    assert exit_code("batch_stop", target, "--expected-version", "0", *common) == 5
    # 8: a destructive action without --yes and without a terminal.
    abandon = ("batch_abandon", target, "--expected-version", "1", "--reason", "X")
    assert exit_code(*abandon, "--operation-id", "x-2") == 8
    # 3: refused by a rule (abandon of a STARTED execution), and audited.
    assert exit_code(*abandon, "--operation-id", "x-3", "--yes") == 3
    assert models.OperatorRequest.objects.get(operation_id="x-3").outcome == "REJECTED"
    # 5: evidence that changed since the proposal.
    recover = ("batch_recover", target, "--expected-version", "1", "--disposition", "ABANDON")
    assert exit_code(*recover, "--reason", "X", "--evidence-digest", "0" * 64, *common) == 5


def test_a_command_is_in_the_admin_history_under_its_logins_account(
    system_repo, clock, monkeypatch
):
    """Decision 155: the admin history credits the account of the login that
    ran the command — never one named by ``--actor``, the audit's free-text
    label, which anyone may write; a login with no account leaves no entry
    (the audit rows keep the actor)."""
    from django.contrib.admin.models import LogEntry
    from django.contrib.auth import get_user_model

    carol = get_user_model().objects.create_user("carol")
    get_user_model().objects.create_user("olga")
    execution = move(system_repo, launch(system_repo), S.STARTED, clock=clock)
    args = ("batch_stop", str(execution.id), "--expected-version", "1")
    monkeypatch.setattr("getpass.getuser", lambda: "carol")
    run(*args, "--operation-id", "s-1")  # cli:carol, carol's login
    run(*args, "--operation-id", "s-2", "--actor", "olga")  # a label, not olga's account
    instance = str(execution.job_instance_id)
    run("batch_hold", instance, "--reason", "LEGAL_HOLD", "--operation-id", "h")
    monkeypatch.setattr("getpass.getuser", lambda: "mallory")  # a login with no account
    run(*args, "--operation-id", "s-3", "--actor", "carol")
    entries = LogEntry.objects.order_by("id")
    operations = dict(models.OperatorRequest.objects.values_list("id", "operation_id"))
    credited = [
        (e.user_id, e.object_id, e.change_message.rsplit("(", 1)[-1].rstrip(")")) for e in entries
    ]
    assert [(user, target) for user, target, _ in credited] == [
        (carol.pk, str(execution.id)),
        (carol.pk, str(execution.id)),
        (carol.pk, instance),
    ]
    assert [operation for *_, operation in credited][:2] == ["s-1", "s-2"]
    assert "s-3" in operations.values()  # applied, audited, in no account's history
    actors = dict(models.OperatorRequest.objects.values_list("operation_id", "actor"))
    assert (actors["s-1"], actors["s-2"], actors["s-3"]) == ("cli:carol", "olga", "carol")
