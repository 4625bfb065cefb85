"""Fixtures of the runtime helper's tests: a live server whose clock the test
moves, a runtime client that records what it sends and can lose answers, and an
operator client."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from oxide_batch.api import deps
from oxide_batch.client import OperatorClient, RuntimeClient
from oxide_batch.repository import FixedClock
from oxide_batch.roles import OPERATOR, RUNTIME
from tests.live import token_for


class ScriptedClient(RuntimeClient):
    """A runtime client that records every request and can fail chosen ones:
    ``lose_answer(path)`` sends the next request to ``path`` and raises ``error``
    instead of its answer; ``refuse(path)`` raises ``error`` without sending."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[tuple[str, str, Any]] = []
        self._faults: list[tuple[str, str, bool, Exception]] = []

    def lose_answer(self, method: str, suffix: str, error: Exception) -> None:
        self._faults.append((method, suffix, True, error))

    def refuse(self, method: str, suffix: str, error: Exception) -> None:
        self._faults.append((method, suffix, False, error))

    def _take(self, method: str, path: str, sent: bool) -> Exception | None:
        for fault in self._faults:
            if fault[0] == method and path.endswith(fault[1]) and fault[2] is sent:
                self._faults.remove(fault)
                return fault[3]
        return None

    def _send(self, method: str, path: str, body: Any = None, query: Any = None) -> tuple[int, Any]:
        refused = self._take(method, path, sent=False)
        if refused is not None:
            raise refused
        self.sent.append((method, path, body))
        answer = super()._send(method, path, body, query)
        lost = self._take(method, path, sent=True)
        if lost is not None:
            raise lost
        return answer

    def posts(self, suffix: str) -> int:
        return sum(1 for method, path, _ in self.sent if method == "POST" and path.endswith(suffix))


@pytest.fixture
def server_clock(monkeypatch: pytest.MonkeyPatch) -> FixedClock:
    """The live server's clock: now, moved only by the test."""
    clock = FixedClock(datetime.now(UTC) - timedelta(hours=1))
    monkeypatch.setattr(deps, "clock", clock)
    return clock


@pytest.fixture
def runtime(live_server: Any, server_clock: FixedClock) -> ScriptedClient:
    client = ScriptedClient(
        live_server.url, token_for("worker-1", RUNTIME), timeout=10, retry_budget=0
    )
    client.reread_attempts = 2
    return client


@pytest.fixture
def operator(live_server: Any, runtime: ScriptedClient) -> OperatorClient:
    return OperatorClient(live_server.url, token_for("olga.ops", OPERATOR), timeout=10)
