"""The HTTP transport the clients share: ``urllib`` (stdlib only), token auth,
JSON bodies, problems raised as the repository's typed errors.

Every call is one HTTP request. A problem answer raises the typed error it
names (``StaleVersion``, ``ExecutionAlreadyActive``, …) or
:class:`~oxide_batch.client.errors.ApiError`; a 429 (an operator past
``OXIDE_BATCH_OPERATOR_THROTTLE_RATE``: ``throttled``) raises
:class:`~oxide_batch.client.errors.Throttled`, whose ``retry_after`` is the
answer's ``Retry-After`` in seconds — nothing was done, the same request may be
sent again after it; a server that cannot be reached raises ``Unavailable``; a
mutation whose answer was lost after it was sent raises ``CommitOutcomeUnknown``
(re-read before retrying, never repeat blindly).

**Retries within a budget.** A request answered ``Unavailable`` did nothing (the
server was not reached, or it answered 503 ``unavailable``: its database could not
be reached, e.g. during a failover), so it is sent again — reads and writes alike —
after a pause that starts at 0.1 s and doubles up to 2 s (with jitter), for at
most ``retry_budget`` seconds from the first refusal; then ``Unavailable``
propagates. Once a claim has announced the lease's TTL the budget is at most half
of it (:meth:`ApiTransport.effective_retry_budget`), so a runtime gives up well
before its lease expires and the watchdog could recover its execution. Writes are
compare-and-swaps: a write sent again either applies once or answers
``stale_version``; that answer carries ``resent = True`` so that the caller can
reconcile it by reading what is stored (``oxide_batch.client.reconcile.settle``).
``retry_budget=0`` sends every request once.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib import error as urlerror
from urllib import parse, request

from oxide_batch.client.errors import (
    THROTTLED_STATUS,
    ApiError,
    Throttled,
    error_from_problem,
    retry_after_seconds,
)
from oxide_batch.domain.errors import CommitOutcomeUnknown, StaleVersion, Unavailable

API_PREFIX = "/api/v1/"

#: The first pause before a request answered ``Unavailable`` is sent again (seconds),
#: doubled after each refusal up to RETRY_MAX_PAUSE.
RETRY_FIRST_PAUSE = 0.1
RETRY_MAX_PAUSE = 2.0
#: The share of the lease's TTL the retry budget may take at most.
LEASE_SHARE = 0.5

log = logging.getLogger("oxide_batch.client")


class ApiTransport:
    """One server's API, authenticated with a token."""

    #: Seconds a request answered ``Unavailable`` is sent again when the
    #: constructor is not told (``RuntimeClient`` sets its own).
    default_retry_budget = 0.0

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retry_budget: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # urllib would also open file: and other schemes; the API is HTTP only.
        if parse.urlsplit(base_url).scheme.lower() not in {"http", "https"}:
            raise ValueError(f"the API's base URL must be http(s)://…, got {base_url!r}")
        budget = self.default_retry_budget if retry_budget is None else retry_budget
        if not (math.isfinite(budget) and budget >= 0):
            raise ValueError(f"retry_budget must be a number of seconds >= 0, got {budget!r}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retry_budget = float(budget)
        #: The lease TTL the server announced (seconds), once a claim answered it.
        self.lease_ttl: float | None = None
        self._sleep = sleep
        self._clock = clock

    def effective_retry_budget(self) -> float:
        """``retry_budget``, at most half the lease TTL once one is known."""
        if self.lease_ttl is None:
            return self.retry_budget
        return min(self.retry_budget, self.lease_ttl * LEASE_SHARE)

    def _request(
        self, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None
    ) -> tuple[int, Any]:
        """:meth:`_send`, sent again while ``Unavailable`` within the retry budget."""
        deadline: float | None = None
        pause = RETRY_FIRST_PAUSE
        resent = False
        while True:
            try:
                return self._send(method, path, body, query)
            except Unavailable:
                now = self._clock()
                if deadline is None:
                    deadline = now + self.effective_retry_budget()
                # Jitter spreads the runtimes that all lost the database at once.
                wait = pause * (0.5 + random.random() / 2)  # nosec B311 # jitter, not a secret
                if now + wait > deadline:
                    raise
                log.warning(
                    "%s %s: the repository is unavailable; sending again in %.2f s "
                    "(%.1f s of the retry budget left)",
                    method,
                    path,
                    wait,
                    deadline - now,
                )
                self._sleep(wait)
                pause = min(pause * 2, RETRY_MAX_PAUSE)
                resent = True
            except StaleVersion as stale:
                # A write sent again may meet itself: let the caller reconcile.
                stale.resent = resent  # type: ignore[attr-defined]
                raise

    def _send(
        self, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None
    ) -> tuple[int, Any]:
        """One request: its status and decoded answer, or the error it stands for."""
        url = self.base_url + API_PREFIX + path
        if query:
            url += "?" + parse.urlencode(
                {key: value for key, value in query.items() if value is not None}, doseq=True
            )
        data = None if body is None else json.dumps(body, allow_nan=False).encode("utf-8")
        headers = {"Authorization": f"Token {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        call = request.Request(url, data=data, method=method, headers=headers)
        mutating = method != "GET"
        try:
            with request.urlopen(call, timeout=self.timeout) as response:  # nosec B310 # http(s) only, checked in __init__
                status = response.status
                payload = response.read()
        except urlerror.HTTPError as answer:
            status, payload = answer.code, answer.read()
            # The wait is a header, not a member of the problem document.
            retry_after = retry_after_seconds(answer.headers.get("Retry-After"))
            self._raise_problem(status, payload, mutating, retry_after=retry_after)
        except urlerror.URLError as failure:
            # Nothing was answered: connect or send failed.
            raise Unavailable() from failure
        except (http.client.HTTPException, OSError) as failure:
            # Sent, but the answer was lost: a mutation may have committed.
            if mutating:
                raise CommitOutcomeUnknown() from failure
            raise Unavailable() from failure
        return status, json.loads(payload) if payload else None

    @staticmethod
    def _raise_problem(
        status: int, payload: bytes, mutating: bool, *, retry_after: float | None = None
    ) -> None:
        """Raise the error an error answer stands for (``retry_after``: its
        ``Retry-After`` in seconds, for :class:`Throttled`)."""
        try:
            document = json.loads(payload)
        except ValueError:
            document = None
        if isinstance(document, Mapping) and "code" in document:
            raise error_from_problem(status, document, retry_after=retry_after)
        if status == THROTTLED_STATUS:
            # Not the API's own answer (a proxy's rate limit): throttled all the same.
            raise Throttled("throttled", f"HTTP {status}", {}, retry_after)
        if status >= 500:
            # Not the API's own answer (a proxy, a crash): outcome unknown for a mutation.
            raise CommitOutcomeUnknown() if mutating else Unavailable()
        raise ApiError(status, "http_error", f"HTTP {status}", {})

    @staticmethod
    def _present(body: Mapping[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in body.items() if value is not None}

    def _get(self, path: str, **query: Any) -> Any:
        return self._request("GET", path, query=query)[1]

    def _post(self, path: str, body: Mapping[str, Any]) -> tuple[int, Any]:
        return self._request("POST", path, self._present(body))

    def _put(self, path: str, body: Mapping[str, Any]) -> tuple[int, Any]:
        return self._request("PUT", path, self._present(body))

    def _delete(self, path: str, body: Mapping[str, Any]) -> tuple[int, Any]:
        return self._request("DELETE", path, self._present(body))
