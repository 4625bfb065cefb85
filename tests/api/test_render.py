"""The hand-built answers of the hot endpoints (``oxide_batch/api/render.py``)
are exactly what the documented ``Output`` serializers give: for every row of
a varied dataset, and for generated states (counts up to 2^63−1, instants with
microseconds and offsets, failures, every status)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oxide_batch import models
from oxide_batch.api import render
from oxide_batch.api import serializers as s
from oxide_batch.domain.execution import (
    ExecutionCounts,
    ExecutionMetadata,
    ExecutionTimestamps,
    FailureSummary,
    JobExecution,
    StepExecution,
)
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.roles import ensure_roles
from oxide_batch.selectors.executions import (
    DefinitionRef,
    ExecutionExtras,
    ExecutionRecord,
    execution_record,
)
from oxide_batch.selectors.steps import step_record
from tests.api.hostile.world import World, build_world
from tests.repository.test_statements import rich_rows

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db: None, monkeypatch: pytest.MonkeyPatch, settings: Any) -> World:
    ensure_roles()
    return build_world(monkeypatch, settings)


def test_every_execution_and_step_renders_as_its_serializer(world: World) -> None:
    rich_rows(world)
    execution_ids = list(models.JobExecution.objects.values_list("pk", flat=True))
    step_ids = list(models.StepExecution.objects.values_list("pk", flat=True))
    assert len(execution_ids) >= 5
    assert len(step_ids) >= 3
    for pk in execution_ids:
        record = execution_record(pk)
        assert render.execution_data(record) == s.ExecutionOutput(record).data
    for pk in step_ids:
        step = step_record(pk)
        assert render.step_data(step) == s.StepOutput(step).data


BIG = 2**63 - 1
instants = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(9000, 1, 1), timezones=st.just(UTC)
).map(lambda at: at.astimezone(timezone(timedelta(hours=5, minutes=30))))
counts = st.builds(
    ExecutionCounts,
    *(st.integers(min_value=0, max_value=BIG) for _ in range(6)),
)
failures = st.none() | st.builds(
    FailureSummary, st.sampled_from(list(FailureCategory)), st.integers(1, BIG)
)


@st.composite
def metadata(draw: st.DrawFn) -> ExecutionMetadata:
    """A valid state: timestamps in order, an end time exactly when finished,
    a failure when FAILED."""
    status = draw(st.sampled_from(list(BatchStatus)))
    created, started, ended = sorted(draw(st.lists(instants, min_size=3, max_size=3)))
    finished = status.is_finished
    failure = draw(failures)
    if status is BatchStatus.FAILED and failure is None:
        failure = FailureSummary(FailureCategory.USER_COMPONENT, 1)
    return ExecutionMetadata(
        status=status,
        exit_code=draw(st.from_regex(r"[A-Z_]{1,20}", fullmatch=True)),
        timestamps=ExecutionTimestamps(
            created,
            draw(st.none() | st.just(started)) if not finished else started,
            ended if finished else None,
        ),
        counts=draw(counts),
        failure=failure,
    )


@settings(max_examples=40, suppress_health_check=list(HealthCheck), deadline=None)
@given(
    state=metadata(),
    version=st.integers(0, BIG),
    updated_at=instants,
    extras=st.builds(
        ExecutionExtras,
        stop_requested_at=st.none() | instants,
        owner_recorded=st.booleans(),
        last_observed_at=st.none() | instants,
        last_activity_at=instants,
        definition=st.none()
        | st.builds(DefinitionRef, st.text(min_size=1), st.integers(1, 3), st.text(min_size=64)),
    ),
)
def test_generated_states_render_as_their_serializers(
    state: ExecutionMetadata,
    version: int,
    updated_at: datetime,
    extras: ExecutionExtras,
) -> None:
    execution = JobExecution(
        id=7,
        metadata=state,
        version=version,
        updated_at=updated_at,
        job_instance_id=3,
        job_name="job",
        attempt=2,
        definition_id=1,
    )
    record = ExecutionRecord(execution, extras)
    assert render.execution_data(record) == s.ExecutionOutput(record).data
    step = StepExecution(
        id=9,
        metadata=state,
        version=version,
        updated_at=updated_at,
        job_instance_id=3,
        job_execution_id=7,
        step_name="load",
        node_id="load",
    )
    assert render.step_data(step) == s.StepOutput(step).data
