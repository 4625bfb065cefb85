"""A fault-injection TCP proxy between the app and the PostgreSQL test server.

It runs its own asyncio loop in a background thread and forwards bytes both
ways untouched, until a test arms a one-shot rule (thread-safe) that fires on
the first client chunk containing a byte pattern, on any proxied connection:

* ``cut_reply_after(pattern)``: forward the chunk, drop the server's answer,
  then close both sides — the server acted, the client never hears of it;
* ``cut_before(pattern)``: drop the chunk and close both sides — the server
  never sees it (an open transaction is rolled back when the server notices);
* ``hold(pattern)``: freeze the connection (both directions) before the chunk
  until ``release()``.

Wire facts (psycopg 3.3, Django 5.2, ``server_side_binding``): BEGIN, COMMIT
and ROLLBACK are simple-protocol Query messages of their own (``Q``, length,
text, NUL) — :data:`COMMIT` below, byte for byte. Other statements go as one
Parse/Bind/Describe/Execute/Sync chunk; the Parse carries the SQL text only
while the statement is unprepared, so proxied connections must not prepare
(``prepare_threshold=None``, or ``OXIDE_BATCH_PG_PREPARE=false`` for a server).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, Self, TypeVar

T = TypeVar("T")


def simple_query(text: str) -> bytes:
    """The frontend Query message psycopg sends for ``text`` (simple protocol)."""
    body = text.encode() + b"\0"
    return b"Q" + struct.pack("!I", len(body) + 4) + body


COMMIT = simple_query("COMMIT")
CHUNK = 65536


class Hold:
    """A frozen connection: ``reached`` is set once frozen; ``release()`` thaws it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.reached = threading.Event()
        self._loop = loop
        self._released = asyncio.Event()

    def release(self) -> None:
        self._loop.call_soon_threadsafe(self._released.set)

    async def released(self) -> None:
        await self._released.wait()


@dataclass
class _Rule:
    pattern: bytes
    action: Literal["cut_reply", "cut_before", "hold"]
    fired: threading.Event = field(default_factory=threading.Event)
    hold: Hold | None = None


@dataclass
class _Link:
    """One proxied connection's shared state."""

    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    swallowing: _Rule | None = None  # a cut whose answer is still to be dropped

    def __post_init__(self) -> None:
        self.flowing.set()


class FaultProxy:
    """``with FaultProxy(host, port) as proxy:`` listens on 127.0.0.1:``proxy.port``."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.trace: list[bytes] | None = None  # a list here records client chunks
        self._rules: list[_Rule] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self._pumps: set[asyncio.Task[None]] = set()

    # -- controls (any thread) -----------------------------------------------------

    def cut_reply_after(self, pattern: bytes) -> threading.Event:
        """Arm a cut of the answer to the next chunk holding ``pattern``; the
        event is set once the answer was dropped."""
        return self._arm(_Rule(pattern, "cut_reply")).fired

    def cut_before(self, pattern: bytes) -> threading.Event:
        """Arm a cut before the next chunk holding ``pattern`` reaches the server."""
        return self._arm(_Rule(pattern, "cut_before")).fired

    def hold(self, pattern: bytes) -> Hold:
        """Arm a freeze before the next chunk holding ``pattern``."""
        hold = Hold(self._loop)
        self._arm(_Rule(pattern, "hold", hold=hold))
        return hold

    def _arm(self, rule: _Rule) -> _Rule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def _take(self, data: bytes) -> _Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.pattern in data:
                    self._rules.remove(rule)
                    return rule
        return None

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> Self:
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        for pump in self._pumps:
            pump.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    # -- forwarding (the loop's thread) --------------------------------------------

    async def _serve(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            server_in, server_out = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_out.close()
            self._handlers.discard(handler)
            return
        link = _Link()
        pumps = {
            asyncio.create_task(self._upstream(link, client_in, server_out)),
            asyncio.create_task(self._downstream(link, server_in, client_out)),
        }
        self._pumps |= pumps
        # Either direction ending (EOF, a cut, shutdown) ends the connection.
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for pump in pumps:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        self._pumps -= pumps
        client_out.close()
        server_out.close()
        self._handlers.discard(handler)

    async def _upstream(
        self, link: _Link, client_in: asyncio.StreamReader, server_out: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await client_in.read(CHUNK):
                if self.trace is not None:
                    self.trace.append(data)
                rule = self._take(data)
                if rule is not None and not await self._fire(rule, link):
                    return
                server_out.write(data)
                await server_out.drain()

    @staticmethod
    async def _fire(rule: _Rule, link: _Link) -> bool:
        """Apply ``rule`` to the chunk about to go upstream; ``False``: drop it
        and end the connection."""
        if rule.action == "cut_before":
            rule.fired.set()
            return False
        if rule.action == "cut_reply":
            link.swallowing = rule  # fired once the answer is dropped
            return True
        assert rule.hold is not None
        link.flowing.clear()
        rule.fired.set()
        rule.hold.reached.set()
        await rule.hold.released()
        link.flowing.set()
        return True

    async def _downstream(
        self, link: _Link, server_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await server_in.read(CHUNK):
                await link.flowing.wait()
                if link.swallowing is not None:
                    link.swallowing.fired.set()
                    return
                client_out.write(data)
                await client_out.drain()
