"""What wakes an idle notifier loop (issue 41): a committed outbox event at
once (PostgreSQL: a thread LISTENing, ``repository/outbox_listen.py``), a
stop signal at once, and — the safety net, and all there is on SQLite — the
end of the loop's ``--interval``.

The thread keeps one LISTEN session; when it fails (the server restarted,
the network dropped) it opens another after ``retry`` seconds and wakes the
loop once, so an event committed while nobody listened is read by the next
pass instead of waiting for the interval. Nothing is lost while it cannot
listen: the loop still passes every interval.
"""

from __future__ import annotations

import threading

from oxide_batch.domain.errors import Unavailable
from oxide_batch.repository import outbox_listen

#: The longest the thread waits for a notification before it looks at ``stop``.
LISTEN_SLICE = 0.5


class Wakeups:
    def __init__(self, *, using: str = "default", retry: float = 2.0) -> None:
        self.using = using
        self.retry = retry
        self.listening = threading.Event()
        self._woken = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Listen in a thread when the database can tell; ``False`` on SQLite."""
        if not outbox_listen.available(self.using):
            return False
        self._thread = threading.Thread(
            target=self._listen, name="oxide-batch-outbox-listener", daemon=True
        )
        self._thread.start()
        return True

    def wait(self, seconds: float) -> bool:
        """Until woken or ``seconds`` have passed; ``True`` when woken. The
        wake-up is consumed: one that comes during the pass that follows wakes
        the next wait at once (none is lost)."""
        woken = self._woken.wait(seconds)
        self._woken.clear()
        return woken

    def wake(self) -> None:
        self._woken.set()

    def stop(self) -> None:
        self._stopping.set()
        self._woken.set()
        if self._thread is not None:
            self._thread.join(timeout=LISTEN_SLICE + 1)

    def _listen(self) -> None:
        while not self._stopping.is_set():
            listener = outbox_listen.OutboxListener(self.using)
            try:
                listener.connect()
                self.listening.set()
                self._woken.set()  # what committed while nobody listened
                while not self._stopping.is_set():
                    if listener.wait(LISTEN_SLICE):
                        self._woken.set()
            except Unavailable:
                self.listening.clear()
                self._stopping.wait(self.retry)
            finally:
                listener.close()
