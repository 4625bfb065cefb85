"""Who is running an execution or a step: the worker's identity (decision 310).

A runtime sends it with a launch, a claim or a step's creation: its host, its
process id, a worker name it may set, the client's name and version. The
server adds the runtime user (the claimant, contract §2.5.2). Every member is
optional and bounded; the text members are names (visible, no control or
format character: :func:`~oxide_batch.domain.names.validate_new_name`), so
the console can show them as they are. Nothing here is secret: it is what the
operator needs to find the process ("which machine, which pid").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oxide_batch.domain.names import NameKind, validate_new_name

MEMBERS = ("host", "pid", "name", "client")
#: A process id fits PostgreSQL's integer (Linux's pid_max is at most 2^22).
MAX_PID = 2**31 - 1


def validate_pid(value: int) -> int:
    """A positive process id (1..2^31−1); ``ValueError`` otherwise (the API's
    input field refuses the same range with a 400 first)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PID:
        raise ValueError(f"a process id is an integer in 1..{MAX_PID}")
    return value


@dataclass(frozen=True)
class WorkerIdentity:
    """What a runtime says of itself; ``None`` members are unknown."""

    host: str | None = None
    pid: int | None = None
    name: str | None = None
    client: str | None = None

    def __post_init__(self) -> None:
        for value, kind in (
            (self.host, NameKind.WORKER_HOST),
            (self.name, NameKind.WORKER_NAME),
            (self.client, NameKind.WORKER_CLIENT),
        ):
            if value is not None:
                validate_new_name(value, kind)
        if self.pid is not None:
            validate_pid(self.pid)

    @property
    def known(self) -> bool:
        """Whether anything at all is known."""
        return any(value is not None for value in self.columns().values())

    def columns(self) -> dict[str, Any]:
        """The row's columns (``worker_host`` …), written with the claim."""
        return {
            "worker_host": self.host,
            "worker_pid": self.pid,
            "worker_name": self.name,
            "worker_client": self.client,
        }

    @classmethod
    def from_row(cls, row: Any, prefix: str = "") -> WorkerIdentity | None:
        """The identity of a row holding the columns (read back as stored:
        no validation, a row is what it is); ``None`` when none is recorded."""
        return cls._stored({member: row.get(f"{prefix}worker_{member}") for member in MEMBERS})

    @classmethod
    def from_data(cls, data: Any) -> WorkerIdentity | None:
        """The identity of an answer's ``worker`` member (``{host, pid, …}``)."""
        return None if data is None else cls._stored({m: data.get(m) for m in MEMBERS})

    @classmethod
    def _stored(cls, values: dict[str, Any]) -> WorkerIdentity | None:
        if all(value is None for value in values.values()):
            return None
        identity = object.__new__(cls)
        for member, value in values.items():
            object.__setattr__(identity, member, value)
        return identity


#: No identity sent: the columns a claim without one writes (all NULL).
UNKNOWN_WORKER_COLUMNS = WorkerIdentity().columns()


def worker_data(identity: WorkerIdentity | None, user: str | None) -> dict[str, Any] | None:
    """The answers' ``worker`` member: ``{host, pid, name, client, user}``, or
    ``None`` when neither an identity nor a runtime user is recorded."""
    if identity is None and user is None:
        return None
    identity = identity or WorkerIdentity()
    return {
        "host": identity.host,
        "pid": identity.pid,
        "name": identity.name,
        "client": identity.client,
        "user": user,
    }


def describe_worker(identity: WorkerIdentity | None, user: str | None) -> str | None:
    """One line an operator reads: "nightly-runtime on worker-3, pid 4122,
    oxide-batch 0.6.0 (worker loader-2)"; ``None`` when nothing is known."""
    if identity is None and user is None:
        return None
    identity = identity or WorkerIdentity()
    text = user or "an unknown user"
    text += f" on {identity.host}" if identity.host else " on an unknown host"
    if identity.pid is not None:
        text += f", pid {identity.pid}"
    if identity.client:
        text += f", {identity.client}"
    if identity.name:
        text += f" (worker {identity.name})"
    return text
