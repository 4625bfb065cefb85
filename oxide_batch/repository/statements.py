"""The hot single-row statements as explicit, parameterised SQL.

Every compare-and-swap reads one row by its key (locking it on PostgreSQL with
``FOR NO KEY UPDATE``, so inserts of child rows are not blocked) and writes the
columns it changed. Those two statements are written out here, built once per
(database, table, column set) from the models' public ``_meta`` (table and
column names, each field's ``get_db_prep_save`` and ``from_db_value``) — no
ORM query is built or compiled per request, and nothing here touches Django's
private query classes. The SQL text of a statement never changes, so psycopg
prepares it after a few executions (``prepare_threshold``, settings).

Values come back as the ORM would return them: the decoding per column type is
spelled out in :func:`_decoder` (``tests/repository/test_statements.py``
checks every statement against the ORM's answer on both databases).

Each statement has a name (``lock ob_job_execution(id,status,…)``) for the
tests and the logs of this module; the SQL itself is plain.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import models
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from oxide_batch import models as models_  # noqa: TID251 (the model layer)
from oxide_batch.facts import newest_step_write_sql

Decoder = Callable[[Any, Any], Any]


def _decoded(
    values: Sequence[Any], decoders: tuple[tuple[int, Decoder], ...], connection: Any
) -> list[Any]:
    """A fetched row as the ORM would return it (``None`` stays ``None``)."""
    row = list(values)
    for position, decode in decoders:
        if row[position] is not None:
            row[position] = decode(row[position], connection)
    return row


@dataclass(frozen=True)
class SelectRow:
    """``SELECT <columns> FROM <table> WHERE <pk> = %s`` (``FOR NO KEY UPDATE``
    on PostgreSQL when ``lock``)."""

    name: str
    sql: str
    columns: tuple[str, ...]
    decoders: tuple[tuple[int, Decoder], ...]

    def run(self, cursor: Any, connection: Any, pk: int) -> dict[str, Any] | None:
        cursor.execute(self.sql, (pk,))
        values = cursor.fetchone()
        if values is None:
            return None
        return dict(zip(self.columns, _decoded(values, self.decoders, connection), strict=True))


@dataclass(frozen=True)
class UpdateRow:
    """``UPDATE <table> SET <column> = %s, … WHERE <pk> = %s``."""

    name: str
    sql: str
    fields: tuple[models.Field[Any, Any], ...]

    def run(self, cursor: Any, connection: Any, pk: int, values: Sequence[Any]) -> None:
        params = [
            None if value is None else field.get_db_prep_save(value, connection=connection)
            for field, value in zip(self.fields, values, strict=True)
        ]
        params.append(pk)
        cursor.execute(self.sql, params)


def plain(value: Any) -> bool:
    """A value these statements send as a parameter (not an ORM expression,
    not a model instance): anything else goes through the ORM's ``update()``."""
    return not (hasattr(value, "resolve_expression") or hasattr(value, "prepare_database_save"))


def _field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or not field.concrete:
        raise ValueError(f"{model.__name__}.{name} is not a column")
    return field


def _sqlite_datetime(value: Any, connection: Any) -> datetime:
    """SQLite keeps an instant as text in UTC (what the ORM stored)."""
    if isinstance(value, datetime):
        parsed: datetime | None = value
    else:
        parsed = parse_datetime(value)
    if parsed is None:
        raise ValueError(f"not a stored instant: {value!r}")
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, connection.timezone)
    return parsed


def _from_db_value(field: models.Field[Any, Any]) -> Decoder:
    def decode(value: Any, connection: Any) -> Any:
        return field.from_db_value(value, None, connection)  # type: ignore[attr-defined]

    return decode


def _decoder(field: models.Field[Any, Any], vendor: str) -> Decoder | None:
    """How a column's raw value becomes the ORM's value (``None`` stays ``None``)."""
    kind = field.get_internal_type()
    if hasattr(field, "from_db_value"):  # JSONField: the stored text, parsed
        return _from_db_value(field)
    if vendor == "sqlite":
        if kind == "DateTimeField":
            return _sqlite_datetime
        if kind == "BooleanField":
            return lambda value, _connection: bool(value)
        if kind == "DurationField":  # microseconds (PostgreSQL: an interval)
            return lambda value, _connection: timedelta(microseconds=value)
    return None


def _decoders(
    fields: Sequence[models.Field[Any, Any]], vendor: str
) -> tuple[tuple[int, Decoder], ...]:
    """(position, decoder) of each fetched column whose raw value needs decoding."""
    return tuple(
        (position, decoder)
        for position, field in enumerate(fields)
        if (decoder := _decoder(field, vendor)) is not None
    )


def _name(kind: str, table: str, columns: Sequence[str]) -> str:
    return f"{kind} {table}({','.join(columns)})"


# Built once per (vendor, model, columns[, lock]); the SQL text never changes.
_selects: dict[tuple[Any, ...], SelectRow] = {}
_updates: dict[tuple[Any, ...], UpdateRow] = {}


def select(
    connection: Any, model: type[models.Model], columns: tuple[str, ...], *, lock: bool
) -> SelectRow:
    """The single-row read of ``columns`` (field names or attnames) of ``model``."""
    key = (connection.vendor, model, columns, lock)
    statement = _selects.get(key)
    if statement is None:
        statement = _selects[key] = _select(connection, model, columns, lock)
    return statement


def update(connection: Any, model: type[models.Model], columns: tuple[str, ...]) -> UpdateRow:
    """The single-row write of ``columns`` (field names or attnames) of ``model``."""
    key = (connection.vendor, model, columns)
    statement = _updates.get(key)
    if statement is None:
        statement = _updates[key] = _update(connection, model, columns)
    return statement


def _select(
    connection: Any, model: type[models.Model], columns: tuple[str, ...], lock: bool
) -> SelectRow:
    quote = connection.ops.quote_name
    fields = [_field(model, name) for name in columns]
    table = model._meta.db_table
    pk = model._meta.pk
    assert pk is not None
    name = _name("lock" if lock else "read", table, columns)
    locking = " FOR NO KEY UPDATE" if lock and connection.vendor == "postgresql" else ""
    selected = ", ".join(quote(field.column) for field in fields)
    sql = (
        f"SELECT {selected} "  # nosec B608 # quoted model identifiers
        f"FROM {quote(table)} WHERE {quote(pk.column)} = %s{locking}"
    )
    decoders = _decoders(fields, connection.vendor)
    return SelectRow(name, sql, columns, decoders)


def _update(connection: Any, model: type[models.Model], columns: tuple[str, ...]) -> UpdateRow:
    quote = connection.ops.quote_name
    fields = tuple(_field(model, name) for name in columns)
    table = model._meta.db_table
    pk = model._meta.pk
    assert pk is not None
    name = _name("write", table, columns)
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    sql = (
        f"UPDATE {quote(table)} SET {assignments} "  # nosec B608 # quoted model identifiers
        f"WHERE {quote(pk.column)} = %s"
    )
    return UpdateRow(name, sql, fields)


# What an execution's API answer shows beyond its own columns, read with the
# execution by ``lock_execution`` (names as the ORM's ``values()`` spells them).
EXECUTION_EXTRAS = (
    "newest_step_write_at",
    "definition__job_name",
    "definition__revision",
    "definition__manifest_format",
    "definition__manifest_digest",
)
_locked_executions: dict[tuple[Any, ...], SelectRow] = {}
# The instance's parameters, read with the row by a failing transition that
# carries a failure's detail (its hidden values are scrubbed from it): that
# read only, never the hot path's (decision 304).
PARAMETERS_EXTRA = "job_instance__identifying_parameters"
_locked_with_parameters: dict[tuple[Any, ...], SelectRow] = {}


def lock_execution(
    connection: Any, columns: tuple[str, ...], *, parameters: bool = False
) -> SelectRow:
    """The locking read of one job execution's ``columns`` together with what
    its answer shows beyond them (``EXECUTION_EXTRAS``): its definition (a join;
    only the execution row is locked) and its newest step write (a subquery on
    the steps' index led by the execution id). The API's answer to a
    transition, a claim or a control observation is then built from the row
    this read locked and the columns the operation wrote: the row is read once.
    With ``parameters`` the instance's identifying parameters come too
    (``PARAMETERS_EXTRA``, a join on the instance's primary key).
    """
    key = (connection.vendor, columns)
    cache = _locked_with_parameters if parameters else _locked_executions
    statement = cache.get(("execution", *key) if parameters else key)
    if statement is None:
        statement = _lock_execution(connection, columns, parameters)
        cache[("execution", *key) if parameters else key] = statement
    return statement


def _parameters_join(connection: Any, alias: str) -> tuple[str, str, models.Field[Any, Any]]:
    """The join of a row's (``alias``) job instance and its selected parameters."""
    quote = connection.ops.quote_name
    instance = models_.JobInstance
    field = _field(instance, "identifying_parameters")
    join = (
        f" LEFT JOIN {quote(instance._meta.db_table)} i "
        f"ON i.{quote(_pk(instance).column)} = {alias}.{quote('job_instance_id')}"
    )
    return join, f"i.{quote(field.column)}", field


def _lock_execution(connection: Any, columns: tuple[str, ...], parameters: bool) -> SelectRow:
    quote = connection.ops.quote_name
    execution, step, definition = models_.JobExecution, models_.StepExecution, models_.JobDefinition
    fields = [_field(execution, name) for name in columns]
    step_activity = _field(step, "last_activity_at")
    definition_fields = [
        _field(definition, name.removeprefix("definition__")) for name in EXECUTION_EXTRAS[1:]
    ]

    def column(alias: str, field: models.Field[Any, Any]) -> str:
        return f"{alias}.{quote(field.column)}"

    newest = newest_step_write_sql(connection, column("e", _pk(execution)))
    selected = ", ".join(
        [
            *(column("e", field) for field in fields),
            newest,
            *(column("d", field) for field in definition_fields),
        ]
    )
    locking = " FOR NO KEY UPDATE OF e" if connection.vendor == "postgresql" else ""
    join, extra_fields = "", []
    extras: tuple[str, ...] = EXECUTION_EXTRAS
    if parameters:
        join, selected_parameters, field = _parameters_join(connection, "e")
        selected += f", {selected_parameters}"
        extra_fields, extras = [field], (*EXECUTION_EXTRAS, PARAMETERS_EXTRA)
    sql = (
        f"SELECT {selected} FROM {quote(execution._meta.db_table)} e "  # nosec B608 # quoted model identifiers
        f"LEFT JOIN {quote(definition._meta.db_table)} d "
        f"ON {column('d', _pk(definition))} = {column('e', _field(execution, 'definition_id'))}"
        f"{join} WHERE {column('e', _pk(execution))} = %s{locking}"
    )
    all_fields = [*fields, step_activity, *definition_fields, *extra_fields]
    decoders = _decoders(all_fields, connection.vendor)
    name = _name(
        "lock+extras" + ("+parameters" if parameters else ""), execution._meta.db_table, columns
    )
    return SelectRow(name, sql, (*columns, *extras), decoders)


# What a step's locking read carries of its job execution: the user whose token
# claimed it (contract §2.5.2) and the control state a
# runtime write answers with (the token, a stop request, the recovery fence),
# named as ``values()`` would.
STEP_EXTRAS = (
    "job_execution__owner_user_id",
    "job_execution__owner_token",
    "job_execution__stop_requested_at",
    "job_execution__recovery_decision_id",
)
# What a step's locking read carries of the step itself beyond ``columns``: a
# claimed partition worker's own owner token (issue 43, decision 462), which a
# write to that step is checked against instead of the execution's.
STEP_OWN_EXTRAS = ("step_owner_token",)
# What the claim's shared read of a partitioned parent carries of its execution
# beyond ``STEP_EXTRAS`` (issue 43, decision 460).
CLAIM_EXTRAS = (
    *STEP_EXTRAS,
    "job_execution__status",
    "job_execution__restart_of_id",
)
_locked_steps: dict[tuple[Any, ...], SelectRow] = {}
_shared_parents: dict[tuple[Any, ...], SelectRow] = {}


def share_claim_parent(connection: Any, columns: tuple[str, ...]) -> SelectRow:
    """The claim's read of a partitioned parent step (issue 43, decision 460):
    ``FOR SHARE OF s`` on PostgreSQL — claimants share it, so none waits on
    another, while an aggregation or a recovery (``FOR NO KEY UPDATE``) waits
    for them and they for it — with its execution's claimant, control, status
    and restart link (``CLAIM_EXTRAS``, a join; the execution row is not
    locked). SQLite's ``BEGIN IMMEDIATE`` already serializes writers."""
    key = (connection.vendor, columns)
    statement = _shared_parents.get(key)
    if statement is None:
        statement = _shared_parents[key] = _lock_step(
            connection, columns, False, extras=CLAIM_EXTRAS, mode="FOR SHARE"
        )
    return statement


def lock_step(connection: Any, columns: tuple[str, ...], *, parameters: bool = False) -> SelectRow:
    """The locking read of one step's ``columns`` together with its job
    execution's claimant (``STEP_EXTRAS``, a join on the execution's primary
    key; only the step row is locked): a runtime's step write checks who may
    write in the same one statement, so a chunk commit stays BEGIN, one locking
    read, one write, COMMIT. With ``parameters`` the instance's identifying
    parameters come too (``PARAMETERS_EXTRA``)."""
    key = (connection.vendor, columns)
    if parameters:
        statement = _locked_with_parameters.get(("step", *key))
        if statement is None:
            statement = _locked_with_parameters[("step", *key)] = _lock_step(
                connection, columns, parameters
            )
        return statement
    statement = _locked_steps.get(key)
    if statement is None:
        statement = _locked_steps[key] = _lock_step(connection, columns, parameters)
    return statement


def _lock_step(
    connection: Any,
    columns: tuple[str, ...],
    parameters: bool,
    *,
    extras: tuple[str, ...] = STEP_EXTRAS,
    mode: str = "FOR NO KEY UPDATE",
) -> SelectRow:
    quote = connection.ops.quote_name
    step, execution = models_.StepExecution, models_.JobExecution
    fields = [_field(step, name) for name in columns]
    own = [_field(step, name.removeprefix("step_")) for name in STEP_OWN_EXTRAS]
    joined = [_field(execution, name.removeprefix("job_execution__")) for name in extras]

    def column(alias: str, field: models.Field[Any, Any]) -> str:
        return f"{alias}.{quote(field.column)}"

    selected = ", ".join(
        [
            *(column("s", field) for field in fields),
            *(column("s", field) for field in own),
            *(column("e", field) for field in joined),
        ]
    )
    locking = f" {mode} OF s" if connection.vendor == "postgresql" else ""
    join = ""
    extras = (*STEP_OWN_EXTRAS, *extras)
    joined = [*own, *joined]
    if parameters:
        join, selected_parameters, field = _parameters_join(connection, "s")
        selected += f", {selected_parameters}"
        joined, extras = [*joined, field], (*extras, PARAMETERS_EXTRA)
    sql = (
        f"SELECT {selected} FROM {quote(step._meta.db_table)} s "  # nosec B608 # quoted model identifiers
        f"JOIN {quote(execution._meta.db_table)} e "
        f"ON {column('e', _pk(execution))} = {column('s', _field(step, 'job_execution_id'))}"
        f"{join} WHERE {column('s', _pk(step))} = %s{locking}"
    )
    decoders = _decoders([*fields, *joined], connection.vendor)
    kind = "lock+claimant" if mode == "FOR NO KEY UPDATE" else "share+claim"
    name = _name(kind + ("+parameters" if parameters else ""), step._meta.db_table, columns)
    return SelectRow(name, sql, (*columns, *extras), decoders)


def _pk(model: type[models.Model]) -> models.Field[Any, Any]:
    pk = model._meta.pk
    assert pk is not None
    return pk


# -- authentication ----------------------------------------------------------------------

# What a request reads of its token and of its user (the audit actor, the
# throttle's ident, authorization); the user's primary key and username come too.
TOKEN_FIELDS = (
    "id",
    "user_id",
    "name",
    "key_prefix",
    "digest",
    "expires_at",
    "revoked_at",
    "job_patterns",
)
USER_FLAGS = ("is_active", "is_superuser")


@dataclass(frozen=True)
class CredentialsRead:
    """The token of a key prefix, its user's loaded fields, and the codenames of
    the batch permissions the user holds directly or through a group — one row
    per held permission (one row with ``NULL`` when none), no row for an unknown
    prefix."""

    name: str
    sql: str
    token_fields: tuple[str, ...]  # attnames, in the order ``Model.from_db`` takes them
    user_fields: tuple[str, ...]
    decoders: tuple[tuple[int, Decoder], ...]
    parameters: tuple[str, ...]  # the bound values before the prefix

    def run(self, cursor: Any, connection: Any, prefix: str) -> list[list[Any]]:
        cursor.execute(self.sql, (*self.parameters, prefix))
        return [_decoded(values, self.decoders, connection) for values in cursor.fetchall()]


_credentials: dict[tuple[Any, ...], CredentialsRead] = {}
# A codename or an app label: what may be written into a statement as a literal.
_CODE_LITERAL = re.compile(r"[A-Za-z0-9_]{1,100}")


def credentials(connection: Any, app_label: str, codenames: tuple[str, ...]) -> CredentialsRead:
    """The authentication read: Django's ``ModelBackend`` rule (a permission held
    directly, or through one of the user's groups, matched by its content
    type's app label and its codename), for ``codenames`` of ``app_label``.
    The tables and columns are the models' own (``AUTH_USER_MODEL`` and its
    ``PermissionsMixin`` relations); ``tests/api/test_authentication.py`` checks
    the answer against ``User.has_perm`` and the ORM on both databases."""
    key = (connection.vendor, app_label, codenames)
    statement = _credentials.get(key)
    if statement is None:
        statement = _credentials[key] = _credentials_read(connection, app_label, codenames)
    return statement


def analyze_credentials_tables(connection: Any) -> None:
    """``ANALYZE`` the tables the authentication read joins (PostgreSQL only).

    Autovacuum analyzes a table only after 50 changes or more; the auth and
    token tables of most deployments never see that many, so PostgreSQL plans
    the read — every request's first statement — on its default guesses and
    scans the permissions once per content type of the app: ten times the
    time it takes with statistics (docs/performance.md). Run after ``migrate``
    (``apps.py``), when those tables hold their rows."""
    if connection.vendor != "postgresql":
        return
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission
    from django.contrib.contenttypes.models import ContentType

    user_model: Any = get_user_model()
    tables = [
        models_.ApiToken,
        user_model,
        Permission,
        ContentType,
        user_model._meta.get_field("user_permissions").remote_field.through,
        user_model._meta.get_field("groups").remote_field.through,
        Group._meta.get_field("permissions").remote_field.through,
    ]
    names = ", ".join(connection.ops.quote_name(model._meta.db_table) for model in tables)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {names}")  # nosec B608 # quoted model identifiers


def _through_column(through: type[models.Model], target: type[models.Model]) -> str:
    """The column of a many-to-many table that points at ``target``."""
    for field in through._meta.concrete_fields:
        if field.related_model is target:
            return str(field.column)
    raise ValueError(f"{through.__name__} has no column pointing at {target.__name__}")


def _credentials_read(
    connection: Any, app_label: str, codenames: tuple[str, ...]
) -> CredentialsRead:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission
    from django.contrib.contenttypes.models import ContentType

    quote = connection.ops.quote_name
    token_model = models_.ApiToken
    user_model: Any = get_user_model()
    wanted = {user_model._meta.pk.name, user_model.USERNAME_FIELD, *USER_FLAGS}
    user_fields = [f for f in user_model._meta.concrete_fields if f.name in wanted]
    token_fields = [_field(token_model, name) for name in TOKEN_FIELDS]
    direct: Any = user_model._meta.get_field("user_permissions").remote_field.through
    membership: Any = user_model._meta.get_field("groups").remote_field.through
    granted: Any = Group._meta.get_field("permissions").remote_field.through

    def table(model: Any) -> str:
        return str(quote(model._meta.db_table))

    def column(alias: str, name: str) -> str:
        return f"{alias}.{quote(name)}"

    user_pk = column("u", _pk(user_model).column)
    permission = column("p", _pk(Permission).column)
    codename = column("p", _field(Permission, "codename").column)
    selected = ", ".join(
        [
            *(column("t", field.column) for field in token_fields),
            *(column("u", field.column) for field in user_fields),
            codename,
        ]
    )
    # The codenames and the app label are constants of the code, written into
    # the statement as literals (checked), not bound: bound, PostgreSQL's
    # generic plan of the prepared statement (after five runs on a connection)
    # scanned the permission table once per content type of the app and built
    # the parameter array on every row — 0.3 ms of the server's time on each
    # request, ten times the statement with literals (docs/performance.md).
    for constant in (*codenames, app_label):
        if not _CODE_LITERAL.fullmatch(constant):
            raise ValueError(f"not a code constant: {constant!r}")
    placeholders = ", ".join(f"'{codename}'" for codename in codenames)
    sql = (
        f"SELECT {selected} FROM {table(token_model)} t "  # nosec B608 # quoted model identifiers
        f"JOIN {table(user_model)} u "
        f"ON {user_pk} = {column('t', _field(token_model, 'user').column)} "
        f"LEFT JOIN {table(Permission)} p ON {codename} IN ({placeholders}) "
        f"AND {column('p', _field(Permission, 'content_type').column)} IN "
        f"(SELECT {column('c', _pk(ContentType).column)} FROM {table(ContentType)} c "
        f"WHERE {column('c', _field(ContentType, 'app_label').column)} = '{app_label}') "
        f"AND ({permission} IN (SELECT {column('d', _through_column(direct, Permission))} "
        f"FROM {table(direct)} d WHERE {column('d', _through_column(direct, user_model))} "
        f"= {user_pk}) "
        f"OR {permission} IN (SELECT {column('g', _through_column(granted, Permission))} "
        f"FROM {table(granted)} g JOIN {table(membership)} m "
        f"ON {column('m', _through_column(membership, Group))} "
        f"= {column('g', _through_column(granted, Group))} "
        f"WHERE {column('m', _through_column(membership, user_model))} = {user_pk})) "
        f"WHERE {column('t', _field(token_model, 'key_prefix').column)} = %s"
    )
    loaded = [*token_fields, *user_fields]
    decoders = _decoders(loaded, connection.vendor)
    return CredentialsRead(
        name=f"read {token_model._meta.db_table}+credentials",
        sql=sql,
        token_fields=tuple(f.attname for f in token_fields),
        user_fields=tuple(f.attname for f in user_fields),
        decoders=decoders,
        parameters=(),
    )
