"""What became of each partition when a process pool broke (stdlib only).

When one worker process of a ``ProcessPoolExecutor`` dies (SIGKILL, the OOM
killer, a segfault), the pool breaks: every future not yet answered fails with
``BrokenProcessPool`` and the pool terminates its other workers (SIGTERM).
From the futures alone every unfinished partition looks the same. So each
worker process writes a beacon — one small file per partition in a directory
the parent made — when it starts a partition (``running <pid>``), when it is
done with it (``finished <pid>``), and when the pool's SIGTERM reaches it
mid-partition (``terminated <pid>``). After the pool has shut down, a
partition whose beacon still says ``running`` is the one whose worker died;
the others were stopped with the pool or never started, and are not blamed.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

RUNNING = "running"
FINISHED = "finished"
TERMINATED = "terminated"
# What a process ended by SIGTERM exits with (128 + 15), as if it had not caught it.
TERMINATED_EXIT = 128 + signal.SIGTERM


@dataclass(frozen=True)
class WorkerBeacons:
    """The directory the worker processes of one partitioned step write to."""

    directory: str

    def _path(self, ordinal: int) -> Path:
        return Path(self.directory) / f"partition-{ordinal}"

    def write(self, ordinal: int, state: str) -> None:
        self._path(ordinal).write_text(f"{state} {os.getpid()}", encoding="ascii")

    def read(self, ordinal: int) -> tuple[str, int] | None:
        """``(state, pid)`` of the partition's worker, ``None`` if it never started."""
        try:
            state, pid = self._path(ordinal).read_text(encoding="ascii").split()
        except (OSError, ValueError):
            return None
        return state, int(pid)


@contextmanager
def beacon(beacons: WorkerBeacons | None, ordinal: int) -> Iterator[None]:
    """Run a partition under its beacon (nothing without ``beacons``). In a pool's
    worker process (its main thread) the pool's SIGTERM is caught only to write
    ``terminated`` first; the process then exits as SIGTERM would have ended it."""
    if beacons is None:
        yield
        return
    beacons.write(ordinal, RUNNING)
    previous = None
    if threading.current_thread() is threading.main_thread():

        def terminated(signum: int, frame: FrameType | None) -> None:
            beacons.write(ordinal, TERMINATED)
            os._exit(TERMINATED_EXIT)

        previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        beacons.write(ordinal, FINISHED)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


@dataclass(frozen=True)
class PoolBreak:
    """What the beacons say after the pool broke: the partitions whose worker
    process died, each with its pid (empty when no beacon says so)."""

    beacons: WorkerBeacons | None
    dead: tuple[tuple[int, int], ...]

    @classmethod
    def read(cls, beacons: WorkerBeacons | None, ordinals: Sequence[int]) -> PoolBreak:
        dead: list[tuple[int, int]] = []
        for ordinal in ordinals:
            found = beacons.read(ordinal) if beacons is not None else None
            if found is not None and found[0] == RUNNING:
                dead.append((ordinal, found[1]))
        return cls(beacons, tuple(dead))

    def died(self, ordinal: int) -> int | None:
        """The pid of partition ``ordinal``'s worker if it is one that died."""
        return next((pid for dead, pid in self.dead if dead == ordinal), None)

    def cause(self) -> str:
        if not self.dead:
            return "a worker process of the pool died; which one is not known"
        named = ", ".join(f"partition {ordinal} (pid {pid})" for ordinal, pid in self.dead)
        return f"the worker process of {named} died"

    def what_became_of(self, ordinal: int) -> str:
        """Why partition ``ordinal`` did not finish, for the runtime's log."""
        pid = self.died(ordinal)
        if pid is not None:
            return (
                f"the process pool broke (BrokenProcessPool): the worker process of "
                f"partition {ordinal} (pid {pid}) died while running it"
            )
        found = self.beacons.read(ordinal) if self.beacons is not None else None
        if self.beacons is None or not self.dead:
            fate = "it was running or waiting"
        elif found is None:
            fate = "it had not started; its worker did not fail"
        elif found[0] == FINISHED:
            fate = "its worker had finished it; the pool broke before it answered"
        else:
            fate = "its healthy worker was stopped with the pool"
        return f"the process pool broke (BrokenProcessPool) because {self.cause()}: {fate}"
