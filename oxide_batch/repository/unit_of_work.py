"""The unit of work: one transaction, rolled back unless ``commit()`` ran.

On PostgreSQL a mutation locks only the rows it changes (``FOR NO KEY UPDATE``,
so child inserts are not blocked) in a fixed order: instance, job execution,
parent step, partitions in key order, worker step. On SQLite the transaction
starts with ``BEGIN IMMEDIATE`` (settings), which takes the write lock up front.

The single-row statements every CAS shares (the locking read, the plain read,
the write of the changed columns) are built by the ORM once per model and
column set and then reused: the SQL, the result names and the converters are
exactly the ORM's, only the query building and compiling (most of an
operation's Python time) is not repeated. See docs/performance.md.
"""

from __future__ import annotations

import enum
import functools
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Self, TypeVar

from django.db import DatabaseError, connections, models, transaction
from django.db.models.sql import UpdateQuery

from oxide_batch.domain.errors import OxideBatchError, RepositoryError
from oxide_batch.domain.execution import ExecutionMetadata, JobExecution, StepExecution
from oxide_batch.domain.identifiers import IdentifierKind, validate_identifier
from oxide_batch.domain.state import StateLimits
from oxide_batch.repository import hooks
from oxide_batch.repository.faults import translate, translate_commit
from oxide_batch.repository.records import changed_columns, metadata_columns

if TYPE_CHECKING:
    from oxide_batch.repository.clock import Clock

P = ParamSpec("P")
R = TypeVar("R")
U = TypeVar("U", bound="UnitOfWorkBase")
E = TypeVar("E", JobExecution, StepExecution)

# Compiled once with this primary key, which the compiled parameters must then
# hold exactly once (in range for a 64-bit key, which no row uses: ids are
# checked before they reach a statement).
_SENTINEL_PK = 7_340_033_017_000_000_001
_MAX_PK = 2**63 - 1
_MISSING: Any = object()


class _Select:
    """A compiled single-row read: the ORM's SQL, result names and converters."""

    __slots__ = ("converters", "names", "sql")

    def __init__(self, sql: str, names: tuple[str, ...], converters: list[Any]) -> None:
        self.sql = sql
        self.names = names
        self.converters = converters


class _Update:
    """A compiled single-row write of a fixed column set (``None`` inlined as NULL,
    as the ORM does, so which values are ``None`` is part of the key)."""

    __slots__ = ("fields", "sql")

    def __init__(self, sql: str, fields: tuple[models.Field[Any, Any], ...]) -> None:
        self.sql = sql
        self.fields = fields


# Keyed by (database alias, model, columns, …); ``None`` marks a statement the
# ORM could not be trusted to compile the same way twice (then it runs as is).
_selects: dict[tuple[Any, ...], _Select | None] = {}
_updates: dict[tuple[Any, ...], _Update | None] = {}


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

    @functools.wraps(method)
    def wrapper(self: U, /, *args: P.args, **kwargs: P.kwargs) -> R:
        self._require_open()
        if self._depth:  # an operation calling another is observed once, as itself
            return method(self, *args, **kwargs)
        started = time.perf_counter()
        self._depth += 1
        try:
            result = method(self, *args, **kwargs)
        except DatabaseError as error:
            mapped = translate(error)
            self._poison(mapped)
            self._observe(name, started, args, kwargs, error=mapped or error)
            if mapped is None:
                raise
            raise mapped from error
        except OxideBatchError as error:
            self._observe(name, started, args, kwargs, error=error)
            raise
        finally:
            self._depth -= 1
        self._observe(name, started, args, kwargs, result=result)
        return result

    return wrapper


class UnitOfWorkBase:
    """Transaction handling shared by every repository operation."""

    def __init__(
        self, *, clock: Clock, using: str, state_limits: StateLimits | None = None
    ) -> None:
        self._clock = clock
        self._using = using
        self._state_limits = state_limits or StateLimits()
        self._state = _State.NEW
        self._fault: RepositoryError | None = None
        self._depth = 0
        self._atomic: transaction.Atomic | None = None
        self._outermost = False
        self._db: Any = None
        # What a failed COMMIT loses: the successful operations, as observed.
        self._observed: list[hooks.OperationEvent] = []

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
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        *,
        result: Any = None,
        error: BaseException | None = None,
    ) -> None:
        outcome = "ok" if error is None else getattr(error, "code", "database_error")
        event = hooks.OperationEvent(
            operation=name,
            outcome=outcome,
            seconds=time.perf_counter() - started,
            using=self._using,
            args=args,
            kwargs=kwargs,
            result=result,
            error=error,
        )
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

    def _lock_row(
        self, model: type[models.Model], pk: int, columns: tuple[str, ...]
    ) -> dict[str, Any] | None:
        """One locking read: ``SELECT … FOR NO KEY UPDATE`` of a single row."""
        return self._row(model, pk, columns, lock=True)

    def _read_row(
        self, model: type[models.Model], pk: int, columns: tuple[str, ...]
    ) -> dict[str, Any] | None:
        return self._row(model, pk, columns, lock=False)

    def _update(self, model: type[models.Model], pk: int, columns: Mapping[str, Any]) -> None:
        """One write of just the changed columns."""
        if columns:
            self._write(model, pk, columns)

    # -- the compiled single-row statements ---------------------------------------

    def _queryset(
        self, model: type[models.Model], pk: int, columns: tuple[str, ...], lock: bool
    ) -> Any:
        """What ``.filter(pk=…).values(…).first()`` runs (with the lock when asked)."""
        rows = model._default_manager.using(self._using)
        if lock:
            rows = rows.select_for_update(no_key=True)
        values = rows.filter(pk=pk).values(*columns)
        return (values if values.ordered else values.order_by("pk"))[:1]

    def _row(
        self,
        model: type[models.Model],
        pk: int,
        columns: tuple[str, ...],
        *,
        lock: bool,
        cursor: Any = None,
    ) -> dict[str, Any] | None:
        key = (self._using, model, columns, lock)
        select = _selects.get(key, _MISSING)
        if select is _MISSING:
            select = _selects[key] = self._compile_select(model, columns, lock)
        if select is None or type(pk) is not int or not 0 < pk <= _MAX_PK:
            row: dict[str, Any] | None = next(iter(self._queryset(model, pk, columns, lock)), None)
            return row
        if cursor is None:
            with self._connection.cursor() as cursor:
                cursor.execute(select.sql, (pk,))
                values = cursor.fetchone()
        else:
            cursor.execute(select.sql, (pk,))
            values = cursor.fetchone()
        if values is None:
            return None
        if select.converters:
            values = list(values)
            connection = self._connection
            for position, converters, expression in select.converters:
                value = values[position]
                for converter in converters:
                    value = converter(value, expression, connection)
                values[position] = value
        return dict(zip(select.names, values, strict=True))

    def _compile_select(
        self, model: type[models.Model], columns: tuple[str, ...], lock: bool
    ) -> _Select | None:
        """The ORM's statement for ``_row``, compiled once (inside the transaction,
        where ``select_for_update`` is allowed)."""
        query = self._queryset(model, _SENTINEL_PK, columns, lock).query
        compiler = query.get_compiler(using=self._using)
        sql, params = compiler.as_sql()
        if list(params) != [_SENTINEL_PK]:
            return None
        names = (
            tuple(query.selected)
            if query.selected
            else (*query.extra_select, *query.values_select, *query.annotation_select)
        )
        fields = [selected[0] for selected in compiler.select[0 : compiler.col_count]]
        if len(fields) != len(names):
            return None
        converters = [
            (position, tuple(converters), expression)
            for position, (converters, expression) in compiler.get_converters(fields).items()
        ]
        return _Select(sql, tuple(names), converters)

    def _write(
        self,
        model: type[models.Model],
        pk: int,
        columns: Mapping[str, Any],
        *,
        cursor: Any = None,
    ) -> None:
        key = (self._using, model, tuple((name, value is None) for name, value in columns.items()))
        update = _updates.get(key, _MISSING)
        if update is _MISSING:
            update = _updates[key] = self._compile_update(model, columns)
        if update is not None and type(pk) is int and 0 < pk <= _MAX_PK:
            connection = self._connection
            with transaction.mark_for_rollback_on_error(using=self._using):
                params = self._prepared(update.fields, columns, connection)
                if params is not None:
                    params.append(pk)
                    if cursor is None:
                        with connection.cursor() as cursor:
                            cursor.execute(update.sql, params)
                    else:
                        cursor.execute(update.sql, params)
                    return
        model._default_manager.using(self._using).filter(pk=pk).update(**columns)

    @staticmethod
    def _prepared(
        fields: tuple[models.Field[Any, Any], ...], columns: Mapping[str, Any], connection: Any
    ) -> list[Any] | None:
        """The parameters the ORM's UPDATE would send for ``columns`` (each value
        through its field's ``get_db_prep_save``), or ``None`` when it would not
        send them as plain parameters (an expression, a value that prepares to
        NULL): then the ORM runs the write itself."""
        params = []
        for field, value in zip(fields, columns.values(), strict=True):
            if value is None:
                continue
            if hasattr(value, "resolve_expression") or hasattr(value, "prepare_database_save"):
                return None
            prepared = field.get_db_prep_save(value, connection=connection)
            if prepared is None or hasattr(prepared, "as_sql"):
                return None
            params.append(prepared)
        return params

    def _compile_update(
        self, model: type[models.Model], columns: Mapping[str, Any]
    ) -> _Update | None:
        """The ORM's ``UPDATE … SET <columns> WHERE pk = …``, compiled once per
        column set; kept only if its parameters are exactly the prepared values
        and the key, in order."""
        if model._meta.parents:
            return None
        connection = self._connection
        query: Any = (
            model._default_manager.using(self._using)
            .filter(pk=_SENTINEL_PK)
            .query.chain(UpdateQuery)
        )
        query.add_update_values(dict(columns))
        if query.related_updates:
            return None
        query.clear_select_clause()
        fields = tuple(field for field, _, _ in query.values)
        if [field.attname for field in fields] != [
            getattr(model._meta.get_field(name), "attname", None) for name in columns
        ]:
            return None
        with transaction.mark_for_rollback_on_error(using=self._using):
            expected = self._prepared(fields, columns, connection)
            if expected is None:
                return None
            sql, params = query.get_compiler(using=self._using).as_sql()
        if list(params) != [*expected, _SENTINEL_PK]:
            return None
        return _Update(sql, fields)

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
        activity: bool = False,
    ) -> E:
        """The CAS every execution mutation shares: one locking read, the domain
        rule (``change``), one write of the changed columns (plus ``extra_columns``).

        ``activity`` marks a runtime write of a job execution (SPEC §9): it moves
        ``last_activity_at`` to the write time.
        """
        with self._connection.cursor() as cursor:
            row = self._row(model, pk, columns, lock=True, cursor=cursor)
            if row is None:
                raise not_found(pk)
            current = from_row(row)
            now = self.now()
            metadata, version = change(current, now)
            written = changed_columns(row, metadata_columns(metadata, version, now))
            written.update(extra_columns or {})
            if activity:
                written["last_activity_at"] = now
            if written:
                self._write(model, pk, written, cursor=cursor)
        return current.with_state(metadata, version, now)

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
