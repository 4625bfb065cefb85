"""Problems → the repository's typed errors, and the client's own
(:class:`ApiError`, :class:`InvalidRequest`, :class:`Throttled`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from oxide_batch.client.wire import (
    ERROR_ENTRY_MEMBERS,
    INVALID_REQUEST,
    PROBLEM_MEMBERS,
    error_fields,
)
from oxide_batch.domain.descriptor import RepositoryCapability
from oxide_batch.domain.errors import OxideBatchError, error_classes, rebuild_error


class ApiError(Exception):
    """A problem with no typed error of the repository behind it (401, 403, 404 of a
    route, 405, 413, 415, …): the HTTP status, the problem's code and the document."""

    def __init__(self, status: int, code: str, detail: str, problem: Mapping[str, Any]) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.problem = dict(problem)


class InvalidRequest(ApiError):
    """400 ``invalid_request`` that is not exactly one rebuildable domain error (a
    shape error, several fields): ``errors`` maps each field path to its entries
    (``{code, message, …}``)."""

    def __init__(
        self, errors: Mapping[str, list[Mapping[str, Any]]], detail: str, problem: Mapping[str, Any]
    ) -> None:
        super().__init__(400, INVALID_REQUEST, detail, problem)
        self.errors = {path: [dict(entry) for entry in found] for path, found in errors.items()}


THROTTLED_STATUS = 429


class Throttled(ApiError):
    """429: the caller's allowance is spent (the operator throttle answers
    ``throttled``; oxide_batch.api.throttling). Nothing was done: repeat the same
    request, with the same operation id, after ``retry_after`` seconds — the
    server's ``Retry-After`` (``None`` when it sent none, or an unreadable one)."""

    def __init__(
        self,
        code: str,
        detail: str,
        problem: Mapping[str, Any],
        retry_after: float | None = None,
    ) -> None:
        super().__init__(THROTTLED_STATUS, code, detail, problem)
        self.retry_after = retry_after


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """A ``Retry-After`` header in seconds from ``now``: delta-seconds or an
    HTTP-date (a past date is 0); ``None`` when absent or unreadable."""
    text = (value or "").strip()
    if text.isascii() and text.isdigit():
        seconds = float(text)
        return seconds if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC by RFC 5322
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _rebuild(code: str, fields: dict[str, Any]) -> OxideBatchError | None:
    if code not in error_classes():
        return None
    if code == "unsupported_capability" and isinstance(fields.get("capability"), str):
        # rebuild_error converts BatchStatus fields only; this one is a capability.
        try:
            fields = {**fields, "capability": RepositoryCapability(fields["capability"])}
        except ValueError:
            return None
    try:
        return rebuild_error(code, fields)
    except (TypeError, ValueError, AttributeError):
        return None


def error_from_problem(
    status: int, problem: Mapping[str, Any], *, retry_after: float | None = None
) -> Exception:
    """The exception a problem document stands for (``retry_after``: the answer's
    ``Retry-After`` in seconds, carried by :class:`Throttled`)."""
    code = str(problem.get("code", "unknown"))
    detail = str(problem.get("detail", ""))
    if status == THROTTLED_STATUS:
        return Throttled(code, detail, problem, retry_after)
    if code == INVALID_REQUEST:
        errors = problem.get("errors") or {}
        entries = [entry for found in errors.values() for entry in found]
        if len(entries) == 1 and isinstance(entries[0], Mapping):
            entry = entries[0]
            rebuilt = _rebuild(str(entry.get("code")), error_fields(entry, ERROR_ENTRY_MEMBERS))
            if rebuilt is not None:
                return rebuilt
        return InvalidRequest(errors, detail, problem)
    fields = error_fields(problem, PROBLEM_MEMBERS)
    replayed = fields.pop("replayed", False) is True
    rebuilt = _rebuild(code, fields)
    if rebuilt is not None:
        if replayed:
            # A recorded refusal answered again (an operator endpoint's replay).
            rebuilt.replayed = True  # type: ignore[attr-defined]
        return rebuilt
    return ApiError(status, code, detail, problem)


# ----------------------------------------------------------- the runtime helper's own


class StopRequested(Exception):
    """An operator's stop reached the runtime: the execution is STOPPING. Raised by
    :mod:`oxide_batch.client.jobs` at a chunk or step boundary; the step and job
    context managers end their rows STOPPED (the job's swallows it)."""

    def __init__(self, execution_id: int) -> None:
        super().__init__(f"execution {execution_id}: a stop was requested")
        self.execution_id = execution_id


class ExecutionFenced(Exception):
    """The execution (or the step) is no longer this runtime's to write: an
    operator recovered or abandoned it, or another owner's token is recorded. The
    context managers write nothing more; the runtime must stop working on it."""

    def __init__(self, execution_id: int, status: str, *, step_id: int | None = None) -> None:
        where = f"execution {execution_id}" + ("" if step_id is None else f", step {step_id}")
        super().__init__(f"{where} is {status}: no longer this runtime's to write")
        self.execution_id = execution_id
        self.status = status
        self.step_id = step_id


class LostWrite(ExecutionFenced):
    """The repository refused a write as ``version_ahead``: it no longer has a
    write it acknowledged to this runtime (a database failover lost it). The
    execution is marked (it counts as an unknown commit) and this runtime must
    stop: the context managers write nothing more — continuing would redo or
    skip work from an older checkpoint. An operator decides (``UNKNOWN_EFFECT``)."""

    def __init__(
        self, execution_id: int, expected: int, stored: int, *, step_id: int | None = None
    ):
        Exception.__init__(
            self,
            f"execution {execution_id}"
            + ("" if step_id is None else f", step {step_id}")
            + f": the repository lost an acknowledged write (expected version {expected}, "
            f"stored {stored}); stopped, an operator decides",
        )
        self.execution_id = execution_id
        self.status = "LOST_WRITE"
        self.step_id = step_id
        self.expected = expected
        self.stored = stored


class StepSkipped(Exception):
    """A restart skips this step: it COMPLETED (or was ABANDONED) in an earlier
    attempt (contract §2.3.2, as Spring Batch skips a completed step). ``run.run_step``
    skips its work and goes on; ``with run.step(...)`` cannot skip its block, so
    it raises this on entering — use ``run.run_step(name, work)`` in a job that
    may restart, or ``allow_start_if_complete=True`` to run the step again."""

    def __init__(self, step_name: str, status: str, earlier_step_execution_id: int | None) -> None:
        super().__init__(
            f"step {step_name!r} is {status} in an earlier attempt (step execution "
            f"{earlier_step_execution_id}): a restart skips it — run it with "
            "run.run_step(name, work), which skips it, or allow_start_if_complete=True"
        )
        self.step_name = step_name
        self.status = status
        self.earlier_step_execution_id = earlier_step_execution_id


class StepFailed(Exception):
    """A step ended FAILED (or UNKNOWN) without an exception of this process to
    show — a partitioned step whose aggregation took a worker's failure.
    ``failure`` is the summary the step carries (category and failure id)."""

    def __init__(self, step_id: int, status: str, failure: Any) -> None:
        super().__init__(f"step {step_id} ended {status}")
        self.step_id = step_id
        self.status = status
        self.failure = failure


class SkipLimitExceeded(Exception):
    """A chunk-oriented step met one skippable failure more than its skip
    policy's ``limit`` allows (counting the skips its step execution already
    committed, including those a restart took over). The step fails under the
    category of that last failure (``cause``, also the ``__cause__``)."""

    def __init__(self, limit: int, phase: str, item: str, cause: BaseException) -> None:
        super().__init__(
            f"skip limit {limit} exceeded ({phase} of item {item!r}): "
            f"{type(cause).__name__}: {cause}"
        )
        self.limit = limit
        self.phase = phase
        self.item = item
        self.cause = cause
