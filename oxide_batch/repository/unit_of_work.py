"""The unit of work: one transaction, rolled back unless ``commit()`` ran.

On PostgreSQL a mutation locks only the rows it changes (``FOR NO KEY UPDATE``,
so child inserts are not blocked) in a fixed order: instance, job execution,
parent step, partitions in key order, worker step. On SQLite the transaction
starts with ``BEGIN IMMEDIATE`` (settings), which takes the write lock up front.

The single-row statements every CAS shares (the locking read, the plain read,
the write of the changed columns) are explicit SQL built once per model and
column set (``statements.py``): no ORM query is built or compiled on the hot
path. See docs/performance.md.
"""

from __future__ import annotations

import enum
import functools
import hmac
import inspect
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Self, TypeVar

from django.db import DatabaseError, connections, models, transaction
from django.db.models import Q

from oxide_batch import models as tables  # noqa: TID251 (the model layer)
from oxide_batch.domain.errors import (
    ExecutionOwned,
    InvalidState,
    OxideBatchError,
    RepositoryError,
    VersionAhead,
)
from oxide_batch.domain.events import SERVICE, Actor, Event
from oxide_batch.domain.evidence import claimed_by_another, instant_text
from oxide_batch.domain.execution import (
    ExecutionMetadata,
    FailureSummary,
    JobExecution,
    StepExecution,
)
from oxide_batch.domain.fused import WriteControl
from oxide_batch.domain.names import IdentifierKind, validate_identifier
from oxide_batch.domain.recovery import fenced_hint
from oxide_batch.domain.state import StateLimits
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository import hooks, outbox, statements
from oxide_batch.repository.failure_details import insert_failure_detail
from oxide_batch.repository.faults import translate, translate_commit
from oxide_batch.repository.records import changed_columns, execution_columns, metadata_columns

if TYPE_CHECKING:
    from oxide_batch.repository.clock import Clock

P = ParamSpec("P")
R = TypeVar("R")
U = TypeVar("U", bound="UnitOfWorkBase")
E = TypeVar("E", JobExecution, StepExecution)

_MAX_PK = 2**63 - 1
logger = logging.getLogger(__name__)


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled back"


def operation(method: Callable[Concatenate[U, P], R]) -> Callable[Concatenate[U, P], R]:
    """Map database faults of one repository operation to domain errors.

    After a fault the transaction is poisoned (PostgreSQL refuses further
    statements), so the unit of work is marked for rollback and ``commit()``
    raises the same error instead of silently committing nothing.
    """

    name = method.__name__
    # The row an operation works on is its first argument when that is an id
    # (``job_execution_id``, ``step_execution_id``, …): a refusal names it.
    first = next(iter(list(inspect.signature(method).parameters)[1:2]), None)
    target = first if first in hooks.TARGET_IDS else None

    def aimed(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, int] | None:
        if target is None:
            return None
        value = args[0] if args else kwargs.get(target)
        return (target, value) if type(value) is int else None

    @functools.wraps(method)
    def wrapper(self: U, /, *args: P.args, **kwargs: P.kwargs) -> R:
        self._require_open()
        if self._depth:  # an operation calling another is observed once, as itself
            return method(self, *args, **kwargs)
        started = time.perf_counter()
        self._operations += 1
        self._depth += 1
        self._recorded = []
        try:
            result = method(self, *args, **kwargs)
            # The outbox (issue 41): the events the operation's facts call for,
            # in its transaction — every path that ends an execution, one place.
            outbox.write_events(self._using, self._recorded)
        except DatabaseError as error:
            mapped = translate(error)
            self._poison(mapped)
            self._observe(name, started, aimed(args, kwargs), error=mapped or error)
            if mapped is None:
                raise
            raise mapped from error
        except OxideBatchError as error:
            self._observe(name, started, aimed(args, kwargs), error=error)
            raise
        finally:
            self._depth -= 1
        self._observe(name, started, aimed(args, kwargs))
        return result

    return wrapper


class UnitOfWorkBase:
    """Transaction handling shared by every repository operation."""

    def __init__(
        self,
        *,
        clock: Clock,
        using: str,
        state_limits: StateLimits | None = None,
        runtime_user_id: int | None = None,
        owner_token: bytes | None = None,
    ) -> None:
        self._clock = clock
        self._using = using
        # The runtime user this unit of work writes for (contract §2.5.2: only
        # the claimant writes): its claim records this user, and its runtime writes
        # to an execution another user claimed are refused. ``None``: an
        # in-process caller (services, commands, tests), bound by neither.
        self._runtime_user_id = runtime_user_id
        # The owner token the runtime's writes carry (contract §2.5.2: a write carrying
        # one must carry the owner's), and what their answers compare it with.
        self._owner_token = owner_token
        self._state_limits = state_limits or StateLimits()
        self._state = _State.NEW
        self._fault: RepositoryError | None = None
        self._depth = 0
        self._atomic: transaction.Atomic | None = None
        self._outermost = False
        self._db: Any = None
        # Job executions this unit of work locked with their extras, as last
        # written (``execution_image``): id → row.
        self._execution_images: dict[int, dict[str, Any]] = {}
        # The operations this work began (an operation calling another counts once).
        self._operations = 0
        # What ``recovery_evidence(lock=True)`` locked — the execution's row and
        # all its steps' rows, as read under the lock — with the operation it
        # was: the ``recover_job_execution`` that is the very next operation
        # writes from them and locks nothing twice (:meth:`_held_for_recovery`).
        self._recovery_locked: dict[int, tuple[int, dict[str, Any], list[dict[str, Any]]]] = {}
        # The execution whose row (or a step of which) this work last locked:
        # a ``VersionAhead`` refused here marks it (:meth:`_record_lost_write`).
        self._execution_in_hand: int | None = None
        # What the rows this work locked showed of each execution's control
        # (token, stop request, fence): id → :class:`WriteControl` columns.
        self._control_rows: dict[int, tuple[bytes | None, datetime | None, int | None]] = {}
        # Steps this work created, with what they took over (``steps.StepState``).
        self._created_steps: dict[int, Any] = {}
        # What a failed COMMIT loses: the successful operations, as observed.
        self._observed: list[hooks.OperationEvent] = []
        # The facts the running operation made true (:meth:`_record`).
        self._recorded: list[Event] = []

    # -- transaction boundary ---------------------------------------------------

    def __enter__(self) -> Self:
        if self._state is not _State.NEW:
            raise RuntimeError("a unit of work is entered once")
        connection = self._db = connections[self._using]
        self._outermost = not connection.in_atomic_block
        if self._outermost and connection.errors_occurred:
            # A connection that failed (e.g. a database restart) is replaced
            # here rather than failing the next caller too.
            connection.close_if_unusable_or_obsolete()
        self._atomic = transaction.atomic(using=self._using)
        try:
            self._atomic.__enter__()
        except DatabaseError as error:
            mapped = translate(error)
            if mapped is None:
                raise
            raise mapped from error
        self._state = _State.OPEN
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._state is _State.OPEN:
            self._finish_rollback(exc_type, exc, traceback)
            if isinstance(exc, VersionAhead):
                self._record_lost_write(exc)

    def _record_lost_write(self, ahead: VersionAhead) -> None:
        """Mark the execution a ``version_ahead`` refusal concerns, in a
        transaction of its own (the refused work rolled back): the caller saw a
        version this row never reached here, so an acknowledged write was lost.
        A new marker writes its ``execution.lost_write`` event in that same
        transaction (issue 41): no event without its marker, nor the reverse.
        The marker counts as the unknown-commit marker until an operator decides;
        the first detection is kept until then (a later loss marks it anew).
        Best effort: a database that fails now leaves the refusal itself to tell."""
        if ahead.job_execution_id is None:
            ahead.job_execution_id = self._execution_in_hand
        if ahead.job_execution_id is None:
            return
        marker = {
            "detected_at": instant_text(self.now()),
            "expected_version": ahead.expected,
            "stored_version": ahead.actual,
        }
        try:
            with transaction.atomic(using=self._using):
                # A loss after an operator resolved the last one is a new marker.
                marked = (
                    tables.JobExecution.objects.using(self._using)
                    .filter(
                        Q(lost_write__isnull=True) | Q(lost_write_resolution__isnull=False),
                        pk=ahead.job_execution_id,
                    )
                    .update(lost_write=marker, lost_write_resolution=None)
                )
                if marked:  # a new marker, and its event (issue 41), together
                    outbox.write_lost_write_event(
                        self._using, ahead.job_execution_id, marker=marker, now=self.now()
                    )
        except DatabaseError:
            logger.warning("the lost-write marker of %s was not recorded", ahead.job_execution_id)

    def commit(self) -> None:
        """Make the work durable.

        Raises ``CommitOutcomeUnknown`` when the connection failed while COMMIT
        was in flight (re-read before retrying, never repeat blindly), and
        ``ConcurrentModification`` when the server refused the commit. Either
        way the repository observers hear it (``hooks.notify_commit_failed``):
        the work's on-commit callbacks never run.
        """
        self._require_open()
        if self._fault is not None:
            self._finish_rollback(None, None, None)
            raise self._fault
        assert self._atomic is not None
        self._state = _State.COMMITTED
        try:
            self._atomic.__exit__(None, None, None)
        except DatabaseError as error:
            mapped = translate_commit(error) if self._outermost else translate(error)
            if self._outermost:
                # Only a real COMMIT counts; a nested unit of work released a savepoint.
                self._commit_failed(mapped or error)
            if mapped is None:
                raise
            raise mapped from error

    def rollback(self) -> None:
        self._require_open()
        self._finish_rollback(None, None, None)

    def _finish_rollback(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._atomic is not None
        self._state = _State.ROLLED_BACK
        transaction.set_rollback(True, using=self._using)
        try:
            self._atomic.__exit__(exc_type, exc, traceback)
        except DatabaseError as error:
            # The connection died (e.g. a database restart): the ROLLBACK failed,
            # Django dropped the connection and then failed to reconnect to restore
            # autocommit. The server discards the transaction by itself; the error
            # already on its way (or the recorded fault) is what the caller must
            # see, not the reconnect's raw OperationalError.
            if exc is not None or self._fault is not None:
                return
            mapped = translate(error)
            if mapped is None:
                raise
            raise mapped from error

    def _observe(
        self,
        name: str,
        started: float,
        target: tuple[str, int] | None,
        *,
        error: BaseException | None = None,
    ) -> None:
        outcome = "ok" if error is None else getattr(error, "code", "database_error")
        event = hooks.OperationEvent(
            operation=name,
            outcome=outcome,
            seconds=time.perf_counter() - started,
            using=self._using,
            target=target,
            # A refused operation made nothing true (its work rolls back).
            events=tuple(self._recorded) if error is None else (),
            error=error,
        )
        self._recorded = []
        if error is None:
            self._observed.append(event)
        hooks.notify(event)

    def _commit_failed(self, error: BaseException) -> None:
        hooks.notify_commit_failed(
            hooks.CommitFailure(
                outcome=getattr(error, "code", "database_error"),
                using=self._using,
                operations=tuple(self._observed),
                error=error,
            )
        )

    def _require_open(self) -> None:
        if self._state is not _State.OPEN:
            raise RuntimeError(f"the unit of work is {self._state.value}")

    def _poison(self, fault: RepositoryError | None) -> None:
        self._fault = fault or self._fault
        transaction.set_rollback(True, using=self._using)

    # -- helpers for operations --------------------------------------------------

    def _record(self, *events: Event) -> None:
        """What the running operation made true, from the rows it locked and wrote."""
        self._recorded.extend(events)

    @property
    def _actor(self) -> Actor:
        """Who this work writes for: its runtime user, else an in-process caller."""
        user = self._runtime_user_id
        return SERVICE if user is None else Actor("runtime", user)

    def now(self) -> datetime:
        """The repository clock (millisecond precision)."""
        return self._clock.now()

    @property
    def _connection(self) -> Any:
        # The unit of work runs in one thread: the wrapper it entered with.
        return self._db if self._db is not None else connections[self._using]

    @staticmethod
    def _id(kind: IdentifierKind, value: int) -> int:
        return validate_identifier(kind, value)

    def _held_for_recovery(self, pk: int) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The rows ``recovery_evidence(lock=True)`` locked for ``pk``, when it was
        the operation right before this one (nothing ran between to move them)."""
        held = self._recovery_locked.pop(pk, None)
        self._recovery_locked.clear()
        if held is None or held[0] != self._operations - 1:
            return None
        return held[1], held[2]

    def _lock_row(
        self, model: type[models.Model], pk: int, columns: tuple[str, ...]
    ) -> dict[str, Any] | None:
        """One locking read: ``SELECT … FOR NO KEY UPDATE`` of a single row."""
        row = self._row(model, pk, columns, lock=True)
        if row is not None and model is tables.JobExecution:
            self._execution_in_hand = pk
        return row

    def _lock_execution(
        self, pk: int, columns: tuple[str, ...], cursor: Any = None, *, parameters: bool = False
    ) -> dict[str, Any] | None:
        """One locking read of a job execution with its extras
        (``statements.lock_execution``), kept as its image: the operation
        updates the returned row with what it writes."""
        statement = statements.lock_execution(self._connection, columns, parameters=parameters)
        row = self._run(statement, pk, cursor)
        if row is not None:
            self._execution_images[pk] = row
            self._execution_in_hand = pk
            if "owner_token" in row:
                self._remember_control(
                    pk, row["owner_token"], row["stop_requested_at"], row["recovery_decision_id"]
                )
        return row

    def _lock_step(
        self, pk: int, columns: tuple[str, ...], cursor: Any = None, *, parameters: bool = False
    ) -> dict[str, Any] | None:
        """One locking read of a step with its job execution's claimant
        (``statements.lock_step``), which :meth:`_check_claimant` reads."""
        statement = statements.lock_step(self._connection, columns, parameters=parameters)
        row = self._run(statement, pk, cursor)
        if row is not None and "job_execution_id" in row:
            self._execution_in_hand = row["job_execution_id"]
            self._remember_control(
                row["job_execution_id"],
                self._step_owner_token(row),
                row["job_execution__stop_requested_at"],
                row["job_execution__recovery_decision_id"],
            )
        return row

    @staticmethod
    def _step_owner_token(row: Mapping[str, Any]) -> Any:
        """Whose token a write to this step must carry: a claimed partition
        worker's own (issue 43, decision 462), else the execution's."""
        own = row.get("step_owner_token")
        return row["job_execution__owner_token"] if own is None else own

    def _check_step_writer(self, row: Mapping[str, Any]) -> None:
        """A runtime write to a step (its row locked with ``statements.lock_step``):
        the execution's claimant and the owner's token (:meth:`_check_claimant`) —
        a claimed worker's own token for its step, and such a worker is fenced
        with its execution (decision 466: a recovered execution takes no write
        from any of its workers)."""
        execution_id = row["job_execution_id"]
        self._check_claimant(
            execution_id, row["job_execution__owner_user_id"], self._step_owner_token(row)
        )
        decision = row["job_execution__recovery_decision_id"]
        if row.get("step_owner_token") is not None and decision is not None:
            raise InvalidState(
                id=row["id"], status=BatchStatus(row["status"]), hint=fenced_hint(decision)
            )

    def _claimed_by(self, job_execution_id: int, row: Mapping[str, Any], prefix: str = "") -> None:
        """A write under ``job_execution_id``: check its claimant and recorded
        owner token (:meth:`_check_claimant`) from ``row`` — the execution's
        columns, named ``prefix`` + column when joined into another row — and
        keep them for the write's answer (:meth:`write_control`)."""
        token = row[f"{prefix}owner_token"]
        self._execution_in_hand = job_execution_id
        self._check_claimant(job_execution_id, row[f"{prefix}owner_user_id"], token)
        self._remember_control(
            job_execution_id,
            token,
            row[f"{prefix}stop_requested_at"],
            row[f"{prefix}recovery_decision_id"],
        )

    def _remember_control(
        self,
        job_execution_id: int,
        owner_token: Any,
        stop_requested_at: datetime | None,
        recovery_decision_id: int | None,
    ) -> None:
        token = None if owner_token is None else bytes(owner_token)
        self._control_rows[job_execution_id] = (token, stop_requested_at, recovery_decision_id)

    def write_control(self, job_execution_id: int | None = None) -> WriteControl | None:
        """The control state of an execution as the rows this unit of work
        locked showed it (its own row, or a step's with the execution's columns
        joined), compared with the owner token the work carries — what a runtime
        write answers with, no query added; ``None`` when nothing of it was read.
        Without an id: the execution this work last locked a row of (a
        partition's or a plan's, whose answer names no execution)."""
        if job_execution_id is None:
            job_execution_id = self._execution_in_hand
        found = None if job_execution_id is None else self._control_rows.get(job_execution_id)
        if found is None:
            return None
        token, stop_requested_at, decision = found
        return WriteControl.of(
            recorded_token=token,
            carried_token=self._owner_token,
            stop_requested_at=stop_requested_at,
            recovery_decision_id=decision,
        )

    def _run(
        self, statement: statements.SelectRow, pk: int, cursor: Any = None
    ) -> dict[str, Any] | None:
        """One single-row statement by primary key, on ``cursor`` or a new one
        (``None`` for a key no row can have: ids are checked before they get here)."""
        if type(pk) is not int or not 0 < pk <= _MAX_PK:
            return None
        connection = self._connection
        if cursor is None:
            with connection.cursor() as cursor:
                return statement.run(cursor, connection, pk)
        return statement.run(cursor, connection, pk)

    def _check_claimant(
        self, job_execution_id: int, owner_user_id: int | None, recorded_token: Any = None
    ) -> None:
        """Refuse a runtime write to an execution (or anything under it) that
        another runtime user claimed: ``ExecutionOwned(other_user=True)``. Nothing
        to check when no user claimed it or this unit of work writes for no one.
        When the work carries an owner token and ``recorded_token`` (the
        execution's) is given, another recorded token is ``ExecutionOwned`` too
        (contract §2.5.2: a write carrying an owner token must carry the owner's); an
        unclaimed execution has no owner's token to compare with."""
        if claimed_by_another(owner_user_id, self._runtime_user_id):
            raise ExecutionOwned(id=job_execution_id, other_user=True)
        carried = self._owner_token
        if (
            carried is not None
            and recorded_token is not None
            and not hmac.compare_digest(bytes(recorded_token), carried)
        ):
            raise ExecutionOwned(id=job_execution_id, other_user=False)

    def execution_image(self, job_execution_id: int) -> Mapping[str, Any] | None:
        """The row of a job execution this unit of work locked and wrote, with
        its extras (``statements.EXECUTION_EXTRAS``), as it now stands — or
        ``None`` when it did not lock that execution."""
        return self._execution_images.get(job_execution_id)

    def _read_row(
        self, model: type[models.Model], pk: int, columns: tuple[str, ...]
    ) -> dict[str, Any] | None:
        return self._row(model, pk, columns, lock=False)

    def _update(self, model: type[models.Model], pk: int, columns: Mapping[str, Any]) -> None:
        """One write of just the changed columns."""
        if columns:
            self._write(model, pk, columns)

    # -- the single-row statements (explicit SQL, ``statements.py``) -------------------

    def _row(
        self,
        model: type[models.Model],
        pk: int,
        columns: tuple[str, ...],
        *,
        lock: bool,
        cursor: Any = None,
    ) -> dict[str, Any] | None:
        """One row's ``columns`` by primary key, locked when asked."""
        return self._run(statements.select(self._connection, model, columns, lock=lock), pk, cursor)

    def _write(
        self,
        model: type[models.Model],
        pk: int,
        columns: Mapping[str, Any],
        *,
        cursor: Any = None,
    ) -> None:
        """One row's ``columns`` written (an ORM expression among the values, or a
        key no row can have, goes through the ORM's ``update()``)."""
        if not (type(pk) is int and 0 < pk <= _MAX_PK) or not all(
            statements.plain(value) for value in columns.values()
        ):
            model._default_manager.using(self._using).filter(pk=pk).update(**columns)
            return
        connection = self._connection
        statement = statements.update(connection, model, tuple(columns))
        with transaction.mark_for_rollback_on_error(using=self._using):
            if cursor is None:
                with connection.cursor() as cursor:
                    statement.run(cursor, connection, pk, tuple(columns.values()))
            else:
                statement.run(cursor, connection, pk, tuple(columns.values()))

    def _compare_and_swap(
        self,
        model: type[models.Model],
        pk: int,
        columns: tuple[str, ...],
        from_row: Callable[[dict[str, Any]], E],
        not_found: Callable[[int], Exception],
        change: Callable[[E, datetime], tuple[ExecutionMetadata, int]],
        extra_columns: Mapping[str, Any] | None = None,
        *,
        facts: Callable[[E, E], Iterable[Event]],
        activity: bool = False,
        execution: bool = False,
        failure_detail: FailureSummary | None = None,
    ) -> E:
        """The CAS every execution mutation shares: one locking read, the domain
        rule (``change``), one write of the changed columns (plus ``extra_columns``).

        ``failure_detail``: a failure whose detail is kept (contract §2, "Failure
        detail"): the locking read carries the instance's parameters and the
        detail is inserted after the write — one INSERT more, nothing else.

        ``activity`` marks a runtime write (contract §2.5.3): it moves the row's
        ``last_activity_at`` to the write time (a step's, or a job execution's).
        ``execution``: the row is a job execution, locked with its extras and kept
        as its image — a move to FAILED records ``failed_at`` once —; otherwise a
        step, locked with its execution's claimant. Either way the claimant is
        checked first (:meth:`_check_claimant`), before any rule. ``facts`` names
        what the write made true from the row as locked and as written.
        """
        with_parameters = failure_detail is not None
        with self._connection.cursor() as cursor:
            if execution:
                row = self._lock_execution(pk, columns, cursor, parameters=with_parameters)
            else:
                row = self._lock_step(pk, columns, cursor, parameters=with_parameters)
            if row is None:
                raise not_found(pk)
            if execution:
                self._check_claimant(pk, row["owner_user_id"], row["owner_token"])
            else:
                self._check_step_writer(row)
            current = from_row(row)
            now = self.now()
            metadata, version = change(current, now)
            if execution:
                written = execution_columns(row, metadata, version, now)
            else:
                written = changed_columns(row, metadata_columns(metadata, version, now))
            written.update(extra_columns or {})
            if activity:
                written["last_activity_at"] = now
            if written:
                self._write(model, pk, written, cursor=cursor)
                row.update(written)
        if failure_detail is not None:
            insert_failure_detail(
                self._using,
                row,
                failure_detail,
                job_execution_id=pk if execution else row["job_execution_id"],
                step_execution_id=None if execution else pk,
                now=now,
            )
        changed = current.with_state(metadata, version, now)
        if activity and not execution:
            # A step's own activity (its fresh copy: ``with_state`` made it).
            object.__setattr__(changed, "last_activity_at", now)
        self._record(*facts(current, changed))
        return changed

    def _insert_unless_conflict(
        self,
        model: type[models.Model],
        values: Mapping[str, Any],
        conflict_fields: tuple[str, ...] = (),
    ) -> int | None:
        """``INSERT … ON CONFLICT DO NOTHING RETURNING id``: the new id, or ``None``
        when the row would violate a unique constraint (on ``conflict_fields`` when
        given, on any otherwise) — race-free, one statement."""
        connection = self._connection
        meta = model._meta
        quote = connection.ops.quote_name

        def column(name: str) -> models.Field[Any, Any]:
            field = meta.get_field(name)
            assert isinstance(field, models.Field)
            return field

        columns, params = [], []
        for name, value in values.items():
            field = column(name)
            columns.append(quote(field.column))
            params.append(field.get_db_prep_save(value, connection))
        target = ""
        if conflict_fields:
            target = "(" + ", ".join(quote(column(name).column) for name in conflict_fields) + ") "
        sql = (
            f"INSERT INTO {quote(meta.db_table)} ({', '.join(columns)}) "  # nosec B608 # quoted model identifiers
            f"VALUES ({', '.join(['%s'] * len(columns))}) "
            f"ON CONFLICT {target}DO NOTHING RETURNING {quote(column(meta.pk.name).column)}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        return None if row is None else int(row[0])
