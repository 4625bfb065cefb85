"""Small builders shared by the repository tests."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oxide_batch.conf import SETTING_NAMES
from oxide_batch.domain import (
    BatchStatus,
    FailureCategory,
    FailureSummary,
    JobExecution,
    JobInstanceKey,
    JobParameter,
    LifecycleTransition,
    ParameterType,
)
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.repository import DjangoJobRepository, FixedClock, SystemClock
from oxide_batch.repository.tokens import issue_api_token
from tests.fakes import FakeJobRepository

if TYPE_CHECKING:
    from oxide_batch.services.audit import Actor
    from oxide_batch.services.operator import OperatorResult, OperatorService

ROOT = Path(__file__).resolve().parents[1]

#: The repositories the tests' builders work with: the adapter and the fake.
Repository = DjangoJobRepository | FakeJobRepository


def refuse_parallel_workers(why: str) -> None:
    """Fail a test that cannot run beside other pytest-xdist workers
    (scripts/test runs the ``serial`` tests in one process, after the others)."""
    import pytest

    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        pytest.fail(f"{why}: run it with -m serial and without -n")


def api_token(user: Any, name: str = "test") -> str:
    """A new API token of ``user`` (committed unless in the test's transaction)."""
    return issue_api_token(user=user, name=name, now=SystemClock().now()).token


def key(job: str = "import_job", run: str = "2026-07-29") -> JobInstanceKey:
    return JobInstanceKey.of(job, [JobParameter("business_date", ParameterType.STRING, run)])


def failure(failure_id: int = 99) -> FailureSummary:
    return FailureSummary(FailureCategory.USER_COMPONENT, failure_id)


def launch(repo: Repository, job_key: JobInstanceKey | None = None) -> JobExecution:
    """Select-or-create the instance of ``job_key`` and create an attempt; committed."""
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(job_key or key()).instance
        execution = uow.create_job_execution(instance.id)
        uow.commit()
    return execution


def move(
    repo: Repository,
    execution: JobExecution,
    *targets: BatchStatus,
    clock: FixedClock | None = None,
) -> JobExecution:
    """Transition ``execution`` through ``targets`` (one second apart), committed."""
    for target in targets:
        if clock is not None:
            clock.advance(timedelta(seconds=1))
        with repo.begin() as uow:
            execution = uow.transition_job_execution(
                execution.id,
                execution.version,
                LifecycleTransition(
                    target, failure=failure() if target is BatchStatus.FAILED else None
                ),
            )
            uow.commit()
    return execution


def stored_execution(repo: Repository, execution_id: int) -> Any:
    """An execution's committed row: the model's on the Django adapter, the
    fake's :class:`~tests.fakes.StoredExecution` (the same column names) on the fake."""
    if isinstance(repo, FakeJobRepository):
        return repo.stored_execution(execution_id)
    from oxide_batch import models

    return models.JobExecution.objects.get(pk=execution_id)


def stored_counts(repo: Repository) -> tuple[int, int]:
    """How many instances and executions are stored (committed)."""
    if isinstance(repo, FakeJobRepository):
        return len(repo.tables.instances), len(repo.tables.executions)
    from oxide_batch import models

    return models.JobInstance.objects.count(), models.JobExecution.objects.count()


def recover_as_proposed(
    service: OperatorService,
    execution_id: int,
    *,
    actor: Actor,
    operation_id: str,
    disposition: RecoveryDisposition = RecoveryDisposition.MARK_FAILED,
    reason_code: str = "STALE_WORKER",
    failure_category: FailureCategory | None = None,
    failure_id: int | None = None,
) -> OperatorResult:
    """Propose the recovery of ``execution_id`` and apply it at the proposal's
    version and evidence digest, as an operator confirming the proposal does."""
    proposal = service.propose(execution_id)
    return service.recover(
        execution_id,
        expected_version=proposal.version,
        disposition=disposition,
        reason_code=reason_code,
        evidence_digest=proposal.evidence_digest,
        actor=actor,
        operation_id=operation_id,
        failure_category=failure_category,
        failure_id=failure_id,
    )


def error_field_value(hint: Any, *, number: int = 1, status: Any = None) -> Any:
    """A value of an error field's type ``hint`` (for building every error class):
    ``number`` for ints, ``status`` for ``BatchStatus`` (default STARTED); an
    optional field is given, a list holds one item."""
    import enum
    import types
    import typing

    from oxide_batch.domain.descriptor import RepositoryCapability
    from oxide_batch.domain.status import BatchStatus

    arguments = [argument for argument in typing.get_args(hint) if argument is not type(None)]
    if isinstance(hint, types.UnionType) and len(arguments) == 1:
        return error_field_value(arguments[0], number=number, status=status)
    if typing.get_origin(hint) is list:
        return [error_field_value(arguments[0], number=number, status=status)]
    if hint is bool:
        return True
    if hint is int:
        return number
    if hint is str:
        return "x"
    if hint is BatchStatus:
        return status or BatchStatus.STARTED
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return RepositoryCapability.STEP_PARTITIONS
    raise AssertionError(f"no value for {hint!r}")


def run_python(args: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The checkout's Python on ``args`` (``manage.py …``, ``-c …``), with the
    caller's ``DATABASE_URL`` and app settings left out, SQLite on
    ``/dev/null``, and ``environment`` on top."""
    base = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and k not in SETTING_NAMES}
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**base, "SQLITE_PATH": os.devnull, **environment},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
