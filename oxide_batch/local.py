"""``LocalRuntime``: the client's runtime API inside a Django project that has
the app installed — a management command, a Celery task, a script with Django
set up — going to the repository in process instead of over HTTP::

    from oxide_batch.local import LocalRuntime

    runtime = LocalRuntime(user="importer")      # None: no runtime user
    with runtime.job_run("nightly_import", {"business_date": "2026-07-29"}) as run:
        run.run_step("load", load)               # load(step) writes with the ORM

**Exactly-once output in the same database.** After a step starts, the work
between two chunk commits runs inside one open transaction on the default
database. ``step.commit(...)`` runs the chunk commit's unit of work inside it
(a savepoint) and then COMMITs: the job's own writes (Django ORM, or the same
connection) and the chunk (counts, checkpoint, context, skips) are durable
together, or not at all. A refused commit (stale, fenced, a stop race) rolls
the job's writes back with it; an exception in the work rolls them back before
the step is ended FAILED in a transaction of its own; a process killed
mid-chunk leaves nothing of that chunk (the server aborts the transaction of a
connection that dies). A COMMIT that fails with the connection raises
``CommitOutcomeUnknown``, and the client's reconcile rule decides (applied:
carry on; not applied: the chunk's writes are gone with it, so the commit is
not sent again and the step ends UNKNOWN).

**The API's own rules.** Every call is dispatched to the API's own DRF view,
resolved under the prefix the project mounts ``oxide_batch.urls`` at, with a
request built here (no WSGI handler, no middleware, no ``request_finished``
signal, which would close the connection and its open chunk transaction). The
view authenticates as the runtime user given (``user=None``: an in-process
caller that records no runtime user and holds every batch permission), checks
the input and answers exactly what it answers over HTTP; a problem raises the
same typed error the HTTP client raises (same ``code``). The launch, the claim
and the step's start commit in their own transactions, so a process killed
right after launching leaves an owned execution whose lease expires (a job run
is refused inside ``transaction.atomic()``). The heartbeat thread observes
control on a connection of its own, closed after each observation; the worker
threads of a partitioned step each hold their own chunk on their own
connection, and the parent step holds none.

See docs/runtime-guide.md ("Exactly-once output: the local runtime") and
decisions 440-451.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, cast

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction
from django.test import RequestFactory
from django.urls import Resolver404, resolve, reverse
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication

from oxide_batch.api.authentication import ALL_HELD, ATTRIBUTE, CHALLENGE
from oxide_batch.client.errors import ApiError, retry_after_seconds
from oxide_batch.client.jobs import DEFAULT_POLL_INTERVAL, JobRun
from oxide_batch.client.runtime import RuntimeClient
from oxide_batch.domain.errors import CommitOutcomeUnknown, OxideBatchError
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository.faults import translate, translate_commit

__all__ = ["LocalRuntime"]

#: The API's URL names whose POSTs drive the chunk transaction.
STEP_CREATE = "execution-steps"
STEP_TRANSITION = "step-transition"
CHUNK_COMMIT = "checkpoint"
#: A step that plans partitions is a parent: it has no chunk of its own.
PARTITION_PLAN = ("partitions", "partitions-restart")


class InProcessCaller:
    """The principal of ``LocalRuntime(user=None)``: an in-process caller
    (as the services and commands are), bound to no runtime user — its claims
    record none — and holding every batch permission."""

    pk = None
    id = None
    is_active = True
    is_authenticated = True
    is_anonymous = False
    is_staff = False
    is_superuser = True
    username = ""

    def __init__(self) -> None:
        setattr(self, ATTRIBUTE, ALL_HELD)

    def get_username(self) -> str:
        return self.username

    def has_perm(self, perm: str, obj: Any = None) -> bool:
        return True

    def __str__(self) -> str:
        return "in-process caller"


class _LocalAuthentication(BaseAuthentication):
    """Authenticates every in-process request as the runtime's principal."""

    principal: Any = None

    def authenticate(self, request: Any) -> tuple[Any, None]:
        user = self.principal
        if not user.is_active:
            # The token's refusal of an inactive user (DRF's wording).
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        return user, None

    def authenticate_header(self, request: Any) -> str:
        # A refusal is a 401, as the token's is over HTTP.
        return CHALLENGE


@dataclass
class _Chunk:
    """The open chunk transaction of one thread: the step it belongs to and
    the ``atomic`` entered by hand (``None`` between a refusal and a reopen)."""

    step_id: int
    atomic: transaction.Atomic | None = None
    #: The ``expected_version`` of a chunk commit whose COMMIT failed: the
    #: chunk's writes went with it, so the same commit is never sent again.
    lost_version: int | None = None


class LocalRuntime(RuntimeClient):
    """The runtime API in process (see the module docstring). ``user``: the
    username of the runtime user the claims record and whose batch
    permissions apply, as its token's would over HTTP (``None``: no runtime
    user, every permission). ``worker_name``, ``worker_host`` and
    ``send_identity`` as for :class:`RuntimeClient`; ``retry_budget``: seconds a
    call answered ``Unavailable`` outside a chunk is made again (inside an open
    chunk it is never: the chunk's writes went with the connection)."""

    def __init__(
        self,
        user: str | None = None,
        *,
        worker_name: str | None = None,
        worker_host: str | None = None,
        send_identity: bool = True,
        retry_budget: float | None = None,
    ) -> None:
        super().__init__(
            "http://in-process.invalid",
            "",
            worker_name=worker_name,
            worker_host=worker_host,
            send_identity=send_identity,
            retry_budget=retry_budget,
        )
        self.user = user
        self._principal: Any = None
        self._views: dict[Any, Any] = {}
        self._local = threading.local()
        self._factory: RequestFactory | None = None
        self._prefix: str | None = None

    # -- the high-level API ------------------------------------------------------------

    def job_run(
        self,
        job_name: str,
        parameters: Mapping[str, Any] | None = None,
        *,
        non_identifying: Mapping[str, Any] | None = None,
        definition_digest: str | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        owner_token: bytes | None = None,
    ) -> JobRun:
        """As :meth:`RuntimeClient.job_run`; leaving the run discards a chunk a
        step left open (a fenced step writes nothing, its output included)."""
        return _LocalJobRun(
            self,
            job_name,
            parameters,
            non_identifying=non_identifying,
            definition_digest=definition_digest,
            poll_interval=poll_interval,
            owner_token=owner_token,
        )

    def attempt_scope(self) -> contextlib.AbstractContextManager[Any]:
        """A savepoint inside the open chunk (the chunk-oriented step wraps each
        processing/writing attempt in it: a failed attempt's writes roll back
        and the chunk stays usable); nothing outside a chunk."""
        if not self.in_chunk():
            return contextlib.nullcontext()
        return transaction.atomic(using=DEFAULT_DB_ALIAS, savepoint=True)

    def in_chunk(self) -> bool:
        """Whether this thread's work runs inside an open chunk transaction."""
        chunk = self._chunk()
        return chunk is not None and chunk.atomic is not None

    # -- the transport -----------------------------------------------------------------

    def _request(
        self, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None
    ) -> tuple[int, Any]:
        if self.in_chunk():
            # Never sent again inside a chunk: a connection that failed took the
            # chunk's writes with it (decision 443).
            return self._send(method, path, body, query)
        return super()._request(method, path, body, query)

    def _send(
        self, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None
    ) -> tuple[int, Any]:
        """One call of the API's own view, in process; the chunk transaction
        opened, committed or rolled back around it as its route says."""
        request = self._build(method, path, body, query)
        try:
            match = resolve(request.path_info)
        except Resolver404:
            raise ApiError(404, "not_found", f"no API route {path!r}", {}) from None
        route = match.url_name if method == "POST" else None
        target = match.kwargs.get("step_id")
        chunk = self._chunk()
        mine = chunk is not None and target == chunk.step_id
        status = body.get("status") if isinstance(body, Mapping) else None
        try:
            if mine and route == CHUNK_COMMIT:
                # The chunk commit: with the work since the last one, or nothing.
                return self._commit(request, match, cast(_Chunk, chunk), body.get("finish") is None)
            if mine and route == STEP_TRANSITION:
                if status == BatchStatus.COMPLETED.value:
                    # COMPLETED without a last chunk: the writes since the last
                    # commit are durable with the step's end.
                    return self._commit(request, match, cast(_Chunk, chunk), False)
                # The step ends otherwise (FAILED, STOPPED…): its chunk's writes
                # roll back first, and the end is written in its own transaction.
                self._discard()
            if mine and route in PARTITION_PLAN:
                # A partitioned step's parent: what ran since its start commits
                # now, and its plan and workers' steps each commit on their own
                # (its workers' threads see them and hold their own chunks).
                self._close(commit=True)
                self._local.chunk = None
            answered = self._dispatch(request, match, method)
            if route in (STEP_CREATE, STEP_TRANSITION) and status == BatchStatus.STARTED.value:
                started = target if route == STEP_TRANSITION else answered[1]["id"]
                self._open(int(cast(int, started)))
            return answered
        finally:
            self._release_connection()

    def _release_connection(self) -> None:
        """Close the connection of a thread other than the main one when it
        holds no chunk (the heartbeat after each observation, a partition
        worker's thread once its step ended): such threads end without
        closing what Django opened for them."""
        if threading.current_thread() is threading.main_thread() or self.in_chunk():
            return
        connection = connections[DEFAULT_DB_ALIAS]
        if not connection.in_atomic_block:
            connection.close()

    def _commit(self, request: Any, match: Any, chunk: _Chunk, reopen: bool) -> tuple[int, Any]:
        """A write that ends a chunk (its commit, or the step's COMPLETED end):
        its unit of work nested in the open transaction (a savepoint), then
        COMMIT — or, refused, the chunk's writes rolled back with it. ``reopen``:
        the step goes on, so its next chunk's transaction begins."""
        sent_at = json.loads(request.body or b"{}").get("expected_version")
        if chunk.atomic is None or sent_at == chunk.lost_version:
            # The first send's COMMIT failed and a re-read found it not applied:
            # its writes are gone, and the write alone would lose them silently.
            raise CommitOutcomeUnknown()
        try:
            answered = self._dispatch(request, match, "POST")
        except BaseException:
            self._close(commit=False)
            with contextlib.suppress(OxideBatchError, DatabaseError):
                self._reopen(chunk)  # the refusal is what the caller must see
            raise
        try:
            self._close(commit=True)
        except CommitOutcomeUnknown:
            chunk.lost_version = sent_at
            with contextlib.suppress(OxideBatchError, DatabaseError):
                self._reopen(chunk)
            raise
        if reopen:
            self._reopen(chunk)
        return answered

    # -- the chunk transaction ---------------------------------------------------------

    def _chunk(self) -> _Chunk | None:
        return cast("_Chunk | None", getattr(self._local, "chunk", None))

    def _open(self, step_id: int) -> None:
        self._discard()
        chunk = _Chunk(step_id)
        self._local.chunk = chunk
        self._reopen(chunk)

    def _reopen(self, chunk: _Chunk) -> None:
        """Begin the chunk's next transaction. A database that cannot be reached
        now raises (``Unavailable``…): the job's next writes must not run
        outside a chunk, in autocommit."""
        atomic = transaction.atomic(using=DEFAULT_DB_ALIAS)
        try:
            atomic.__enter__()
        except DatabaseError as error:
            chunk.atomic = None
            mapped = translate(error)
            if mapped is None:
                raise
            raise mapped from error
        chunk.atomic = atomic

    def _close(self, *, commit: bool) -> None:
        """COMMIT (``CommitOutcomeUnknown`` when that failed with the connection)
        or roll back this thread's open chunk transaction."""
        chunk = self._chunk()
        if chunk is None or chunk.atomic is None:
            return
        atomic, chunk.atomic = chunk.atomic, None
        if not commit:
            transaction.set_rollback(True, using=DEFAULT_DB_ALIAS)
            with contextlib.suppress(DatabaseError):
                atomic.__exit__(None, None, None)
            return
        try:
            atomic.__exit__(None, None, None)
        except DatabaseError as error:
            mapped = translate_commit(error)
            if mapped is None:
                raise
            raise mapped from error

    def _discard(self) -> None:
        """Roll back and forget this thread's open chunk, if any."""
        self._close(commit=False)
        self._local.chunk = None

    # -- one request -------------------------------------------------------------------

    def _api_prefix(self) -> str:
        if self._prefix is None:
            self._prefix = reverse("oxide_batch:api:descriptor").removesuffix("descriptor")
        return self._prefix

    def _build(self, method: str, path: str, body: Any, query: Mapping[str, Any] | None) -> Any:
        if self._factory is None:
            self._factory = RequestFactory(
                headers={"accept": "application/json"}, SERVER_NAME=_host()
            )
        url = self._api_prefix() + path
        if method == "GET":
            data = {key: value for key, value in (query or {}).items() if value is not None}
            return self._factory.get(url, data)
        content = "" if body is None else json.dumps(body, allow_nan=False)
        return self._factory.generic(method, url, content, "application/json")

    def _dispatch(self, request: Any, match: Any, method: str) -> tuple[int, Any]:
        view = self._view(match.func)
        response = view(request, *match.args, **match.kwargs)
        if hasattr(response, "render"):
            response.render()
        status = int(response.status_code)
        payload = bytes(response.content)
        if status >= 400:
            retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            self._raise_problem(status, payload, method != "GET", retry_after=retry_after)
        return status, json.loads(payload) if payload else None

    def _view(self, func: Any) -> Any:
        """The route's view, built with the API's own ``as_view`` and this
        runtime's authentication (once per view class)."""
        view_class = getattr(func, "view_class", None)
        if view_class is None:
            return func  # the API's own 404 for what no route matched
        built = self._views.get(view_class)
        if built is None:
            authentication = type(
                "LocalAuthentication", (_LocalAuthentication,), {"principal": self._user()}
            )
            built = view_class.as_view(
                **{**(func.view_initkwargs or {}), "authentication_classes": [authentication]}
            )
            self._views[view_class] = built
        return built

    def _user(self) -> Any:
        """The principal the views see: the runtime user (read once), or the
        in-process caller. An unknown user is the API's 401."""
        if self._principal is None:
            if self.user is None:
                self._principal = InProcessCaller()
            else:
                model = get_user_model()
                try:
                    self._principal = model._default_manager.get_by_natural_key(self.user)
                except model.DoesNotExist:
                    raise ApiError(
                        401,
                        "authentication_failed",
                        f"no user {self.user!r} to run as (LocalRuntime(user=...))",
                        {},
                    ) from None
        return self._principal


class _LocalJobRun(JobRun):
    """A job run of :class:`LocalRuntime`: leaving it rolls back a chunk that a
    step left open (a fenced step ends without a write) before anything else."""

    client: LocalRuntime

    def __enter__(self) -> JobRun:
        if connections[DEFAULT_DB_ALIAS].in_atomic_block:
            # The launch would not commit on its own, nor would any chunk.
            raise RuntimeError(
                "LocalRuntime runs a job in autocommit: not inside transaction.atomic()"
            )
        return super().__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        self.client._discard()
        return super().__exit__(exc_type, exc, traceback)


def _host() -> str:
    """A host name the project accepts (``ALLOWED_HOSTS``): the API's pages
    link their next page with it."""
    for pattern in settings.ALLOWED_HOSTS:
        if pattern == "*":
            break
        name = pattern.removeprefix(".")
        if name:
            return name
    return "localhost"
