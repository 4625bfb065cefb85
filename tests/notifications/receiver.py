"""A webhook receiver for the notification tests: an HTTP server on 127.0.0.1
only, in a thread, that verifies each request's signature with the
``standardwebhooks`` package's own verifier, answers as its ``behaviour``
says, and records every request — and whether two requests with one
``webhook-id`` were ever in flight at once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    verified: bool
    status: int
    #: The body ended before its Content-Length (the sender died mid-request).
    truncated: bool = False

    @property
    def webhook_id(self) -> str:
        return self.headers.get("webhook-id", "")

    def json(self) -> Any:
        return json.loads(self.body)


#: ``(request number for its webhook-id, the request) → (status, headers, seconds to wait)``.
Behaviour = Callable[[int, Received], tuple[int, dict[str, str], float]]


def always_ok(number: int, request: Received) -> tuple[int, dict[str, str], float]:
    return 200, {}, 0.0


@dataclass
class Receiver:
    url: str
    secret: str | None
    behaviour: Behaviour
    received: list[Received] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)
    in_flight: dict[str, int] = field(default_factory=dict)
    #: Requests per webhook-id so far (the behaviour's request number).
    counts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered(self) -> dict[str, Received]:
        """The first 2xx answer per webhook-id."""
        found: dict[str, Received] = {}
        for request in self.received:
            if 200 <= request.status < 300:
                found.setdefault(request.webhook_id, request)
        return found


@contextmanager
def receiving(secret: str | None = None, behaviour: Behaviour = always_ok) -> Iterator[Receiver]:
    state: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            receiver = state["r"]
            declared = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(declared)
            headers = {key.lower(): value for key, value in self.headers.items()}
            verified = False
            if receiver.secret is not None:
                try:
                    Webhook(receiver.secret).verify(body, headers)
                    verified = True
                except WebhookVerificationError:
                    verified = False
            request = Received(self.path, headers, body, verified, 0, len(body) < declared)
            with receiver.lock:
                key = request.webhook_id
                number = receiver.counts[key] = receiver.counts.get(key, 0) + 1
                if receiver.in_flight.get(key):
                    receiver.overlaps.append(key)
                receiver.in_flight[key] = receiver.in_flight.get(key, 0) + 1
                receiver.received.append(request)
            try:
                status, extra, wait = (
                    (400, {}, 0.0) if request.truncated else receiver.behaviour(number, request)
                )
                request.status = status
                if wait:
                    time.sleep(wait)
                try:
                    self.send_response(status)
                    for name, value in extra.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the notifier gave up waiting (a timeout)
            finally:
                with receiver.lock:
                    receiver.in_flight[key] -= 1

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port = server.server_address[1]
    state["r"] = Receiver(f"http://127.0.0.1:{port}/hook", secret, behaviour)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["r"]
    finally:
        server.shutdown()
        server.server_close()
