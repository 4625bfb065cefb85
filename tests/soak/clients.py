"""The project's own HTTP clients, metered: every request lands in a ledger with
its operation, HTTP status, problem code and latency."""

from __future__ import annotations

import re
import time
from typing import Any

from oxide_batch.client import ApiError, Execution, Instance, OperatorClient, RuntimeClient
from oxide_batch.client.transport import ApiTransport
from oxide_batch.domain.errors import OxideBatchError
from tests.soak.ledger import Call, Ledger

_ID = re.compile(r"/\d+")


def operation_name(method: str, path: str) -> str:
    """``POST executions/{id}/transition`` for ``POST executions/17/transition``."""
    return f"{method} {_ID.sub('/{id}', '/' + path)[1:]}"


def error_code(error: BaseException) -> str:
    if isinstance(error, (OxideBatchError, ApiError)):
        return error.code
    return f"transport:{type(error).__name__}"


class _Metered(ApiTransport):
    """Records each request in ``ledger`` (one client per thread: not shared)."""

    ledger: Ledger
    _answered: int | None = None

    def _request(
        self, method: str, path: str, body: Any = None, query: Any = None
    ) -> tuple[int, Any]:
        self._answered = None
        operation = operation_name(method, path)
        started = time.perf_counter()
        try:
            status, document = super()._request(method, path, body, query)
        except Exception as error:
            elapsed = time.perf_counter() - started
            self.ledger.call(Call(operation, self._answered, error_code(error), elapsed))
            raise
        self.ledger.call(Call(operation, status, None, time.perf_counter() - started))
        return status, document

    def _raise_problem(  # type: ignore[override]
        self, status: int, payload: bytes, mutating: bool, *, retry_after: float | None = None
    ) -> None:
        # The base class forgets the HTTP status once it raised the typed error.
        self._answered = status
        ApiTransport._raise_problem(status, payload, mutating, retry_after=retry_after)


class MeteredRuntime(_Metered, RuntimeClient):
    def __init__(self, base_url: str, token: str, ledger: Ledger, *, timeout: float) -> None:
        super().__init__(base_url, token, timeout=timeout)
        self.ledger = ledger


class MeteredOperator(_Metered, OperatorClient):
    def __init__(self, base_url: str, token: str, ledger: Ledger, *, timeout: float) -> None:
        super().__init__(base_url, token, timeout=timeout)
        self.ledger = ledger

    def executions_page(self, **filters: Any) -> list[Execution]:
        """The first page (newest first) of executions matching ``filters``."""
        page = self._get("executions", **filters)
        return [Execution.from_json(item) for item in page["results"]]

    def instances_page(self, **filters: Any) -> list[Instance]:
        page = self._get("instances", **filters)
        return [Instance.from_json(item) for item in page["results"]]
