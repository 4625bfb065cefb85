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
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Mapping
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
from oxide_batch.domain.errors import CommitOutcomeUnknown, Unavailable

API_PREFIX = "/api/v1/"


class ApiTransport:
    """One server's API, authenticated with a token."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 30.0) -> None:
        # urllib would also open file: and other schemes; the API is HTTP only.
        if parse.urlsplit(base_url).scheme.lower() not in {"http", "https"}:
            raise ValueError(f"the API's base URL must be http(s)://…, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _request(
        self, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None
    ) -> tuple[int, Any]:
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
