"""A throttled operator request reaches the client as ``Throttled`` with the
server's ``Retry-After`` in seconds (a live server, the operator throttle read
per request), and nothing was done; a 429 from something in front of the API
(no problem document, an HTTP-date) is ``Throttled`` too."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from oxide_batch.api import throttling
from oxide_batch.client import ApiError, OperatorClient, RuntimeClient, Throttled
from oxide_batch.client.errors import error_from_problem, retry_after_seconds
from oxide_batch.roles import OPERATOR, RUNTIME
from tests.live import api_base_url, token_for

RATE, LIMIT = "2/min", 2
NOW = datetime(2026, 7, 29, 12, 0, tzinfo=UTC)


@pytest.fixture
def throttle_cache() -> Iterator[None]:
    throttling.throttle_cache().clear()  # a transactional test's flush leaves this table alone
    yield
    throttling.throttle_cache().clear()


@pytest.fixture
def limited(settings: Any, throttle_cache: None) -> None:
    settings.OXIDE_BATCH_OPERATOR_THROTTLE_RATE = RATE


@pytest.mark.usefixtures("limited")
def test_an_operator_past_the_rate_gets_throttled_with_the_retry_after(
    transactional_db: None, live_server: Any
) -> None:
    runtime = RuntimeClient(api_base_url(live_server), token_for("runner", RUNTIME), timeout=10)
    operator = OperatorClient(api_base_url(live_server), token_for("olga", OPERATOR), timeout=10)
    instance, _ = runtime.launch("throttled_job")
    hold = {"reason_code": "LEGAL", "operation_id": "hold-1"}
    assert operator.hold(instance.id, **hold).changed
    assert operator.release(instance.id, reason_code="LEGAL", operation_id="release-1").changed

    with pytest.raises(Throttled) as throttled:
        operator.hold(instance.id, reason_code="LEGAL", operation_id="hold-2")

    error = throttled.value
    assert isinstance(error, ApiError)
    assert (error.status, error.code) == (429, "throttled")
    assert error.retry_after is not None
    assert 1 <= error.retry_after <= 60  # within the minute's window
    # The header's value, which the problem's detail repeats.
    assert f"{int(error.retry_after)} second" in error.detail, error.detail
    assert runtime.instance(instance.id).hold is None  # nothing was done
    assert runtime.instance(instance.id).id == instance.id  # runtimes are never throttled


class _RateLimiter(BaseHTTPRequestHandler):
    """What a proxy's rate limit may answer: 429, plain text, an HTTP-date."""

    retry_after = ""

    def do_GET(self) -> None:
        self.send_response(429)
        self.send_header("Content-Type", "text/plain")
        if self.retry_after:
            self.send_header("Retry-After", self.retry_after)
        self.end_headers()
        self.wfile.write(b"slow down")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("header", "low", "high"),
    [("", None, 0.0), ("120", 120.0, 120.0), ("date+30", 25.0, 31.0)],
)
def test_a_429_that_is_not_a_problem_is_throttled_too(
    header: str, low: float | None, high: float
) -> None:
    if header == "date+30":
        header = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    handler = type("Limiter", (_RateLimiter,), {"retry_after": header})
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with pytest.raises(Throttled) as throttled:
                RuntimeClient(f"http://127.0.0.1:{server.server_port}", "t", timeout=5).descriptor()
        finally:
            server.shutdown()
    wait = throttled.value.retry_after
    assert (throttled.value.status, throttled.value.code) == (429, "throttled")
    if low is None:
        assert wait is None
    else:
        assert wait is not None
        assert low <= wait <= high, wait


def test_a_throttled_problem_carries_the_retry_after_it_is_given() -> None:
    problem = {"type": "about:blank", "status": 429, "code": "throttled", "detail": "wait"}
    error = error_from_problem(429, problem, retry_after=7.0)
    assert isinstance(error, Throttled)
    assert (error.code, error.retry_after) == ("throttled", 7.0)
    unset = error_from_problem(429, problem)
    assert isinstance(unset, Throttled)
    assert unset.retry_after is None


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("0", 0.0),
        (" 7 ", 7.0),
        ("Wed, 29 Jul 2026 12:00:42 GMT", 42.0),
        ("Wed, 29 Jul 2026 11:00:00 GMT", 0.0),  # in the past: now
        (None, None),
        ("", None),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("٣", None),  # an Arabic-Indic digit is no delta-seconds
        ("9" * 400, None),  # not a finite number of seconds
    ],
)
def test_retry_after_is_delta_seconds_or_an_http_date(
    header: str | None, seconds: float | None
) -> None:
    assert retry_after_seconds(header, now=NOW) == seconds
