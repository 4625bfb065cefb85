"""``purge_batch_metadata`` and ``prune_batch_audit`` (contract §6.3, §6.2):
exit codes, --json, confirmation, operation ids, dry runs, reruns and re-surveys.

In-process runs use ``call_command`` (a refusal is a ``CommandError`` carrying the
exit code); the terminal-less behaviour and argument errors run ``manage.py`` in
a subprocess, which stops before it would touch the database.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.domain.errors import RetentionPlanStale
from oxide_batch.domain.retention import format_instant
from oxide_batch.management.commands import _cli
from oxide_batch.services.retention import RetentionService
from tests.repository.test_retention import (
    DAY,
    _audit_row,
    audit_rows,
    build_instance,
    hold,
    rows_of,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_terminal")]
S = BatchStatus
ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(ROOT / ".venv" / "bin" / "python")
PURGE = "purge_batch_metadata"


@pytest.fixture
def no_terminal(monkeypatch):
    monkeypatch.setattr(_cli, "stdin_is_terminal", lambda: False)


@pytest.fixture(autouse=True)
def no_min_age():
    with override_settings(OXIDE_BATCH_PURGE_MIN_AGE=timedelta(0)):
        yield


@pytest.fixture
def world(repo, clock):
    """Two eligible instances (one with flow decisions and partitions), and a held,
    a running and a young one that must survive."""
    world = {
        "old": build_instance(repo, clock, "old"),
        "rich": build_instance(repo, clock, "rich", rich=True),
        "held": build_instance(repo, clock, "held"),
        "running": build_instance(repo, clock, "running", (S.FAILED, S.STARTED)),
    }
    hold(repo, world["held"])
    world["cutoff"] = clock.now() + timedelta(seconds=1)
    clock.advance(2 * DAY)
    world["young"] = build_instance(repo, clock, "young")
    return world


def run(*args, stdout=None):
    out, err = stdout or io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def refused(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as error:
        call_command(*args, stdout=out, stderr=err)
    return error.value.returncode, str(error.value), out.getvalue()


def purge(world, *extra):
    return (PURGE, "--ended-before", format_instant(world["cutoff"]), *extra)


def manage(*args, env=None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "SQLITE_PATH": os.devnull, **(env or {})}
    return subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=ROOT,
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def eligible_gone(world) -> bool:
    return all(set(rows_of(world[name]).values()) == {0} for name in ("old", "rich"))


def survivors_intact(world) -> bool:
    return all(rows_of(world[name])["job_instances"] == 1 for name in ("held", "running", "young"))


# -- runs -----------------------------------------------------------------------------


def test_a_dry_run_surveys_and_deletes_nothing(world):
    before = {name: rows_of(world[name]) for name in ("old", "rich")}
    out, _ = run(*purge(world, "--dry-run", "--json"))
    document = json.loads(out)
    assert (document["ok"], document["outcome"], document["dry_run"]) == (True, "DRY_RUN", True)
    plan = document["plan"]
    assert set(plan) == {
        "cutoff",
        "job_name",
        "statuses",
        "bound",
        "candidates",
        "counts",
        "held_excluded",
        "plan_digest",
    }
    assert {c["instance_id"] for c in plan["candidates"]} == {world["old"], world["rich"]}
    assert plan["held_excluded"] == 1
    assert {name: rows_of(world[name]) for name in ("old", "rich")} == before
    assert models.RetentionRecord.objects.filter(action="APPLY_PURGE").count() == 0


def test_a_run_deletes_exactly_the_eligible_instances_and_their_children(world):
    expected = {
        kind: rows_of(world["old"])[kind] + rows_of(world["rich"])[kind]
        for kind in rows_of(world["old"])
    }
    audit_before = audit_rows()
    out, _ = run(*purge(world, "--operation-id", "nightly", "--yes", "--batch-size", "1"))
    assert "purged in 2 batch(es)" in out
    assert "held instances kept: 1" in out
    assert eligible_gone(world)
    assert survivors_intact(world)
    records = models.RetentionRecord.objects.filter(action="APPLY_PURGE").order_by("id")
    assert [r.operation_id for r in records] == ["nightly:1", "nightly:2"]
    assert sum(r.deleted_job_instances for r in records) == expected["job_instances"] == 2
    assert sum(r.deleted_step_partitions for r in records) == expected["step_partitions"]
    assert audit_rows()["RetentionRecord"] == audit_before["RetentionRecord"] + 2


def test_a_rerun_deletes_nothing_more(world):
    run(*purge(world, "--operation-id", "nightly", "--yes"))
    counts = {name: rows_of(world[name]) for name in ("held", "running", "young")}
    replay = json.loads(run(*purge(world, "--operation-id", "nightly", "--yes", "--json"))[0])
    assert replay["outcome"] == "REPLAYED"
    assert [b["outcome"] for b in replay["batches"]] == ["REPLAYED"]
    fresh = json.loads(run(*purge(world, "--operation-id", "again", "--yes", "--json"))[0])
    assert (fresh["outcome"], fresh["batches"], fresh["counts"]["job_instances"]) == (
        "APPLIED",
        [],
        0,
    )
    assert {name: rows_of(world[name]) for name in ("held", "running", "young")} == counts


def test_json_output_is_exactly_one_object(world):
    out, _ = run(*purge(world, "--operation-id", "nightly", "--yes", "--json"))
    assert len(out.strip().splitlines()) == 1
    document = json.loads(out)
    assert (document["command"], document["ok"], document["exit_code"]) == (PURGE, True, 0)
    assert document["counts"]["job_instances"] == 2
    assert document["held_excluded"] == 1


def test_a_stale_plan_is_resurveyed(world, repo, monkeypatch):
    survey = RetentionService.survey
    held = []

    def survey_then_hold(self, **kwargs):
        plan = survey(self, **kwargs)
        if not held and plan.candidates:
            hold(repo, plan.instance_ids[0])  # a hold placed after the survey
            held.append(plan.instance_ids[0])
        return plan

    monkeypatch.setattr(RetentionService, "survey", survey_then_hold)
    document = json.loads(run(*purge(world, "--operation-id", "n", "--yes", "--json"))[0])
    assert document["resurveys"] == 1
    assert document["counts"]["job_instances"] == 1
    assert rows_of(held[0])["job_instances"] == 1


def test_a_plan_stale_four_times_in_a_row_exits_5(world, monkeypatch):
    def stale(self, plan, **kwargs):
        raise RetentionPlanStale()

    monkeypatch.setattr(RetentionService, "apply", stale)
    code, message, out = refused(*purge(world, "--operation-id", "n", "--yes", "--json"))
    assert code == 5
    assert "retention_plan_stale" in message
    document = json.loads(out)
    assert (document["ok"], document["error"]["code"]) == (False, "retention_plan_stale")
    assert document["progress"]["resurveys"] == 3
    assert not eligible_gone(world)


def interrupt_after_first_batch(monkeypatch):
    apply = RetentionService.apply
    calls = []

    def interrupted_second_batch(self, plan, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return apply(self, plan, **kwargs)

    monkeypatch.setattr(RetentionService, "apply", interrupted_second_batch)
    return apply


def test_an_interrupted_run_keeps_committed_batches_and_a_rerun_resumes(world, monkeypatch):
    apply = interrupt_after_first_batch(monkeypatch)
    args = purge(world, "--operation-id", "night", "--yes", "--batch-size", "1")
    code, message, _ = refused(*args)
    assert (code, message.split(":")[0]) == (1, "interrupted")
    assert "--operation-id night" in message
    assert sum(rows_of(world[name])["job_instances"] for name in ("old", "rich")) == 1

    monkeypatch.setattr(RetentionService, "apply", apply)
    document = json.loads(run(*args, "--json")[0])
    assert [b["outcome"] for b in document["batches"]] == ["REPLAYED", "APPLIED"]
    assert [b["operation_id"] for b in document["batches"]] == ["night:1", "night:2"]
    assert eligible_gone(world)
    assert survivors_intact(world)


def test_the_progress_bar_shows_only_on_a_terminal(world, capsys):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    run(*purge(world, "--operation-id", "n", "--yes"), stdout=Terminal())
    assert "purged" in capsys.readouterr().err


# -- safeguards ---------------------------------------------------------------------------


def test_without_a_terminal_a_run_needs_an_operation_id(world):
    code, message, _ = refused(*purge(world, "--yes"))
    assert (code, message.split(":")[0]) == (2, "operation_id_required")
    assert not eligible_gone(world)


def test_without_a_terminal_a_run_needs_explicit_confirmation(world):
    code, message, _ = refused(*purge(world, "--operation-id", "n"))
    assert (code, message.split(":")[0]) == (8, "confirmation_required")
    assert not eligible_gone(world)


def test_a_dry_run_needs_neither_confirmation_nor_an_operation_id(world):
    out, _ = run(*purge(world, "--dry-run"))
    assert "dry run, nothing deleted" in out


@pytest.mark.parametrize(("answer", "confirmed"), [("no", False), ("", False), (" YES ", True)])
def test_on_a_terminal_the_operator_confirms(world, monkeypatch, answer, confirmed):
    prompts = []
    monkeypatch.setattr(_cli, "stdin_is_terminal", lambda: True)
    monkeypatch.setattr(_cli, "ask", lambda text: prompts.append(text) or answer)
    if confirmed:
        _, err = run(*purge(world))
        assert err.startswith("operation-id: purge-")
        assert eligible_gone(world)
    else:
        code, _, _ = refused(*purge(world))
        assert code == 8
        assert not eligible_gone(world)
    assert "[DESTRUCTIVE]" in prompts[0]
    assert prompts[0].endswith("confirm (yes/no): ")


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("--batch-size", "0"), "batch_bound_out_of_range"),
        (("--batch-size", "1001"), "batch_bound_out_of_range"),
        (("--status", "STARTED"), "non_terminal_status"),
        (("--reason", "not a code"), "invalid_characters"),
        (("--job-name", " padded "), "name_has_surrounding_whitespace"),
        (("--actor", "bad actor"), "invalid_characters"),
        (("--operation-id", "x" * 57), "operation_id_too_long"),
    ],
)
def test_invalid_input_exits_2_with_its_code(world, args, code):
    exit_code, message, out = refused(
        *purge(world, "--operation-id", "n", "--yes", "--json"), *args
    )
    assert (exit_code, message.split(":")[0]) == (2, code)
    assert json.loads(out)["error"]["code"] == code


def test_a_cutoff_younger_than_the_minimum_age_exits_2(world):
    with override_settings(OXIDE_BATCH_PURGE_MIN_AGE=timedelta(days=36500)):
        code, message, _ = refused(PURGE, "--older-than", "1h", "--dry-run")
    assert (code, message.split(":")[0]) == (2, "age_bound_too_small")


# -- the real process -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        ((PURGE, "--older-than", "90d", "--yes"), 2, "--operation-id"),
        ((PURGE, "--older-than", "90d", "--operation-id", "n"), 8, "add --yes (or --no-input)"),
        ((PURGE, "--older-than", "ninety days", "--operation-id", "n", "--yes"), 2, "90s"),
        ((PURGE, "--ended-before", "yesterday", "--operation-id", "n", "--yes"), 2, "date"),
        ((PURGE, "--operation-id", "n", "--yes"), 2, "--older-than"),
        ((PURGE, "--older-than", "1d", "--ended-before", "2026-01-01"), 2, "not allowed"),
        (("prune_batch_audit", "--older-than", "365d"), 8, "--yes"),
        (("prune_batch_audit", "--older-than", "1y", "--yes"), 2, "duration"),
    ],
)
def test_exit_codes_of_the_real_process_without_a_terminal(args, code, needle):
    result = manage(*args)
    assert result.returncode == code, result.stderr
    assert needle in result.stderr
    assert "Traceback" not in result.stderr


def test_with_json_a_usage_error_is_still_one_object():
    result = manage(PURGE, "--older-than", "soon", "--json")
    assert result.returncode == 2
    document = json.loads(result.stdout)
    assert (document["ok"], document["exit_code"], document["error"]["code"]) == (
        False,
        2,
        "usage",
    )


def test_an_unreachable_database_exits_7():
    result = manage(
        PURGE,
        "--older-than",
        "90d",
        "--dry-run",
        env={"DATABASE_URL": "postgres://nobody@127.0.0.1:9/none"},
    )
    assert result.returncode == 7, result.stderr
    assert "unavailable" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_real_process_purges_and_a_rerun_replays(repo, clock):
    instance_id = build_instance(repo, clock, "old")
    settings = connection.settings_dict
    url = f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"
    args = (PURGE, "--older-than", "1h", "--operation-id", "proc", "--yes", "--json")
    first = manage(*args, env={"DATABASE_URL": url})
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["counts"]["job_instances"] == 1
    assert rows_of(instance_id)["job_instances"] == 0
    again = manage(*args, env={"DATABASE_URL": url})
    assert (again.returncode, json.loads(again.stdout)["outcome"]) == (0, "REPLAYED")


# -- audit pruning --------------------------------------------------------------------------


@pytest.fixture
def old_audit(clock):
    long_ago = clock.now() - 4000 * DAY
    for model in (models.RecoveryDecision, models.OperatorRequest, models.RetentionRecord):
        _audit_row(model, long_ago)
        _audit_row(model, long_ago + timedelta(seconds=1))


def test_prune_batch_audit_dry_run_counts_and_deletes_nothing(old_audit):
    document = json.loads(
        run("prune_batch_audit", "--older-than", "365d", "--dry-run", "--json")[0]
    )
    assert document["counts"] == {
        "recovery_decisions": 2,
        "operator_requests": 2,
        "retention_records": 2,
    }
    assert sum(audit_rows().values()) == 6


def test_prune_batch_audit_deletes_old_rows(old_audit):
    out, _ = run("prune_batch_audit", "--older-than", "365d", "--yes", "--batch-size", "1")
    assert "deleted" in out
    assert sum(audit_rows().values()) == 0


def test_prune_batch_audit_refuses_a_young_age_and_needs_confirmation(old_audit):
    assert refused("prune_batch_audit", "--older-than", "1h", "--yes")[0] == 2
    assert refused("prune_batch_audit", "--older-than", "365d")[0] == 8
    assert sum(audit_rows().values()) == 6


def test_the_commands_are_listed():
    result = subprocess.run(
        [sys.executable, "manage.py", "help"],
        cwd=ROOT,
        env={**os.environ, "SQLITE_PATH": os.devnull},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert PURGE in result.stdout
    assert "prune_batch_audit" in result.stdout
    assert "_cli" not in result.stdout


# -- a run's criteria belong to its operation id (contract §2.5.11) -------------------------


@pytest.mark.parametrize(
    "other",
    [
        ("--job-name", "another_job"),
        ("--status", "COMPLETED"),
        ("--batch-size", "2"),
        ("--reason", "OTHER_REASON"),
        ("--cutoff-shift",),
    ],
    ids=["job-name", "status", "batch-size", "reason", "cutoff"],
)
def test_a_rerun_with_other_criteria_under_the_same_operation_id_exits_5(world, monkeypatch, other):
    """Hole: a resume replayed the recorded batches and carried on under the new
    criteria. Now any other criterion is ``operation_id_conflict``, nothing deleted."""
    apply = interrupt_after_first_batch(monkeypatch)
    args = ("--operation-id", "night", "--yes", "--batch-size", "1")
    code, _, _ = refused(*purge(world, *args))
    assert code == 1
    monkeypatch.setattr(RetentionService, "apply", apply)
    left = sum(rows_of(world[name])["job_instances"] for name in ("old", "rich"))
    assert left == 1
    records_before = models.RetentionRecord.objects.count()

    if other == ("--cutoff-shift",):
        shifted = format_instant(world["cutoff"] + timedelta(seconds=1))
        rerun = (PURGE, "--ended-before", shifted, *args)
    else:
        rerun = (*purge(world, *args), *other)
    code, message, out = refused(*rerun, "--json")

    assert (code, message.split(":")[0]) == (5, "operation_id_conflict")
    assert json.loads(out)["error"]["code"] == "operation_id_conflict"
    assert sum(rows_of(world[name])["job_instances"] for name in ("old", "rich")) == left
    assert models.RetentionRecord.objects.count() == records_before
    assert survivors_intact(world)


def test_a_rerun_with_the_same_age_resumes_under_a_cutoff_that_moved(world, monkeypatch):
    """``--older-than`` is the criterion, not the instant it gave: a rerun later
    resumes (the same age is the same request)."""
    apply = interrupt_after_first_batch(monkeypatch)
    args = (PURGE, "--older-than", "1d", "--operation-id", "aged", "--yes", "--batch-size", "1")
    code, _, out = refused(*args, "--json")
    assert code == 1
    first_cutoff = json.loads(out)["progress"]["criteria"]["cutoff"]
    monkeypatch.setattr(RetentionService, "apply", apply)
    time.sleep(0.01)
    document = json.loads(run(*args, "--json")[0])
    assert document["criteria"]["cutoff"] > first_cutoff
    outcomes = [b["outcome"] for b in document["batches"]]
    assert outcomes[0] == "REPLAYED", outcomes
    assert set(outcomes[1:]) == {"APPLIED"}, outcomes
    assert eligible_gone(world)
    other_age = (PURGE, "--older-than", "2d", *args[3:])
    assert refused(*other_age)[0] == 5


def test_a_stale_attempt_is_audited_and_the_resurvey_applies_under_the_next_attempt_id(
    world, repo, monkeypatch
):
    survey = RetentionService.survey
    held = []

    def survey_then_hold(self, **kwargs):
        plan = survey(self, **kwargs)
        if not held and plan.candidates:
            hold(repo, plan.instance_ids[0])
            held.append(plan.instance_ids[0])
        return plan

    monkeypatch.setattr(RetentionService, "survey", survey_then_hold)
    document = json.loads(run(*purge(world, "--operation-id", "n", "--yes", "--json"))[0])
    assert [b["operation_id"] for b in document["batches"]] == ["n:1.r1"]
    recorded = models.RetentionRecord.objects.filter(action="APPLY_PURGE").order_by("id")
    assert [(r.operation_id, r.outcome, r.rejection_code) for r in recorded] == [
        ("n:1", "REJECTED", "retention_plan_stale"),
        ("n:1.r1", "APPLIED", None),
    ]
    # A rerun walks past the refusal and replays the applied attempt.
    monkeypatch.setattr(RetentionService, "survey", survey)
    replay = json.loads(run(*purge(world, "--operation-id", "n", "--yes", "--json"))[0])
    assert [(b["operation_id"], b["outcome"]) for b in replay["batches"]] == [
        ("n:1.r1", "REPLAYED")
    ]
    assert recorded.count() == 2
