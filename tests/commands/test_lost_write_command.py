"""A lost write waits for a person, on the command paths (issue 38 point 5,
contract §2.5.14): ``batch_recover ID --resolve-lost-write --note …`` resolves
the marker of a FAILED execution, after which its instance restarts; the
watchdog reports an execution it leaves to a human once per change, not once
per pass; ``oxide_batch_unresolved_lost_writes`` counts the unresolved markers."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.db.models import F

from oxide_batch import models
from oxide_batch.domain import BatchStatus, JobExecution, LifecycleTransition
from oxide_batch.domain.errors import LostWriteUnresolved, VersionAhead
from oxide_batch.management.commands import batch_watchdog
from oxide_batch.observability import metrics
from oxide_batch.repository import DjangoJobRepository, FixedClock
from oxide_batch.services import bootstrap
from oxide_batch.services.watchdog import Holdoff, watchdog_actor
from tests.commands import test_watchdog_command as watchdog_commands
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus
system_repo = watchdog_commands.system_repo
old_database = watchdog_commands.old_database
run, exit_code, text = watchdog_commands.run, watchdog_commands.exit_code, watchdog_commands.text
NOTE = "ledger checked: chunk 4 was applied"
GAUGE = "oxide_batch_unresolved_lost_writes"


def lose_a_write(repo: DjangoJobRepository, execution: JobExecution) -> JobExecution:
    """Make the store lose the execution's last write and let a write see it
    (``version_ahead`` marks the execution); the execution as stored now."""
    models.JobExecution.objects.filter(pk=execution.id).update(version=F("version") - 1)
    with pytest.raises(VersionAhead), repo.begin() as uow:
        uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(S.COMPLETED)
        )
    with repo.begin() as uow:
        return uow.get_job_execution(execution.id)


def restart(repo: DjangoJobRepository, execution: JobExecution) -> JobExecution:
    with repo.begin() as uow:
        again = uow.create_job_execution(execution.job_instance_id)
        uow.commit()
    return again


@pytest.fixture
def marked_failed(system_repo, clock: FixedClock) -> JobExecution:
    started = move(system_repo, launch(system_repo, key(run="lost")), S.STARTED, clock=clock)
    return move(system_repo, lose_a_write(system_repo, started), S.FAILED, clock=clock)


def test_the_command_resolves_a_failed_executions_marker_and_the_restart_goes_ahead(
    system_repo, marked_failed
) -> None:
    with pytest.raises(LostWriteUnresolved) as refused:
        restart(system_repo, marked_failed)
    assert refused.value.execution_id == marked_failed.id
    args = ("batch_recover", str(marked_failed.id), "--resolve-lost-write", "--yes")
    document = run(*args, "--note", NOTE, "--operation-id", "cli-lw-1")
    assert (document["outcome"], document["changed"]) == ("APPLIED", True)
    assert document["record"]["action"] == "RESOLVE_LOST_WRITE"
    replay = run(*args, "--note", NOTE, "--operation-id", "cli-lw-1")
    assert (replay["outcome"], replay["record"]["id"]) == ("REPLAYED", document["record"]["id"])
    stored = models.JobExecution.objects.get(pk=marked_failed.id).lost_write_resolution
    assert stored is not None
    assert (stored["reason_code"], stored["note"]) == ("LOST_WRITE_RESOLVED", NOTE)
    assert restart(system_repo, marked_failed).attempt == 2


def test_the_command_needs_a_note_and_refuses_the_recoverys_flags(marked_failed) -> None:
    pk = str(marked_failed.id)
    assert exit_code("batch_recover", pk, "--resolve-lost-write", "--yes") == 2
    assert exit_code("batch_recover", pk, "--resolve-lost-write", "--note", NOTE,
                     "--expected-version", "3", "--yes") == 2  # fmt: skip
    assert exit_code("batch_recover", pk, "--resolve-lost-write", "--note", " x", "--yes") == 2
    assert exit_code("batch_recover", pk, "--reason", "X", "--yes") == 2  # no recovery flags
    assert not models.OperatorRequest.objects.exists()


def test_the_watchdog_says_left_to_a_human_once_per_change(system_repo, clock) -> None:
    with system_repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key("watched_job")).instance
        execution = uow.create_job_execution(instance.id)
        uow.claim_execution_owner(execution.id, execution.version, watchdog_commands.OWNER)
        uow.commit()
    started = move(system_repo, execution, S.STARTED, clock=clock)
    lose_a_write(system_repo, started)
    clock.advance(watchdog_commands.TTL + timedelta(seconds=1))
    # The loop's body, three passes of one watchdog (as `batch_watchdog` runs).
    out = io.StringIO()
    command = batch_watchdog.Command(stdout=out)
    command.json_output, command.verbosity = False, 1
    watchdog = bootstrap.watchdog(actor=watchdog_actor())
    holdoff = Holdoff(ttl=watchdog.lease_ttl, now=watchdog.now)
    repeated = []
    for _ in range(3):
        report = command._pass(watchdog, holdoff)
        (action,) = report.actions
        assert (action.kind.value, action.detail) == ("skipped", "unknown_commit")
        repeated.append(action.repeated)
        command._emit(command._document(report, holdoff))
    assert repeated == [False, True, True]
    assert out.getvalue().count("left to a human") == 1


def lost_write_gauge() -> float:
    """The gauge as the collector gives it (no /metrics route: the host project
    mounts none)."""
    metrics.GAUGES.invalidate()
    (family,) = [f for f in metrics.GAUGES.collect() if f.name == GAUGE]
    (sample,) = family.samples
    return float(sample.value)


def test_the_gauge_counts_unresolved_markers(system_repo, clock, settings, marked_failed):
    settings.OXIDE_BATCH_METRICS_GAUGE_TTL = timedelta(0)
    started = move(system_repo, launch(system_repo, key(run="other")), S.STARTED, clock=clock)
    lose_a_write(system_repo, started)
    assert lost_write_gauge() == 2
    run("batch_recover", str(marked_failed.id), "--resolve-lost-write", "--yes",
        "--note", NOTE, "--operation-id", "cli-lw-2")  # fmt: skip
    assert lost_write_gauge() == 1
