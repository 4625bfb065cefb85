"""What each soak actor did and what the server answered.

Every actor (runtime thread, operator thread, purge loop) owns one ``Ledger``
and is its only writer; the ledgers are merged after the threads joined. The
invariants compare the merged ledger with the database: each successful
mutation names the version it produced, so "every success reflected exactly
once" is "the versions a row's successes produced are exactly 1..version".
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

EXECUTION = "execution"
# Where in its lifecycle a runtime was refused (see ``Ledger.losses``).
LAUNCH_OWN_KEY, LAUNCH_SHARED_KEY, RESTART, RUNNING = "launch", "shared launch", "restart", "run"
STEP = "step"
COUNT_NAMES = ("read", "processed", "written", "filtered", "committed", "rolled_back")
# Operator audit outcomes as the ledger sees them; NOT_AUDITED = the server
# must not have written an audit row for that answer (404, id conflicts, …).
APPLIED, REPLAYED, REJECTED, NOT_AUDITED = "APPLIED", "REPLAYED", "REJECTED", "NOT_AUDITED"


@dataclass(frozen=True)
class Call:
    """One HTTP request: ``status`` is None when nothing was answered."""

    operation: str
    status: int | None
    code: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.code is None

    @property
    def server_error(self) -> bool:
        return self.status is not None and self.status >= 500

    @property
    def transport_error(self) -> bool:
        return self.status is None and self.code is not None


@dataclass(frozen=True)
class StepBirth:
    """A step row as created: where it lives and the counts it took over."""

    instance_id: int
    execution_id: int
    name: str
    counts: Mapping[str, int]


@dataclass(frozen=True)
class OperatorEntry:
    """One operator (or retention) request and how the server answered it.

    ``audit`` is the audit table that must hold its row (``operator`` or
    ``retention``); ``kind`` is the audited action (STOP, HOLD, …); ``replay_of``
    marks a deliberate repeat of an earlier request (same operation id)."""

    audit: str
    kind: str
    operation_id: str
    target: int
    outcome: str
    code: str | None = None
    replay_of: str | None = None


@dataclass
class Ledger:
    name: str
    calls: list[Call] = field(default_factory=list)
    # (kind, id) → the versions its successful mutations produced, in order.
    versions: defaultdict[tuple[str, int], list[int]] = field(
        default_factory=lambda: defaultdict(list)
    )
    chunk_deltas: defaultdict[int, Counter[str]] = field(
        default_factory=lambda: defaultdict(Counter)
    )
    terminal_rollbacks: Counter[tuple[str, int]] = field(default_factory=Counter)
    executions: dict[int, int] = field(default_factory=dict)  # id → instance id
    steps: dict[int, StepBirth] = field(default_factory=dict)
    # Executions whose runtime learned of a stop (or saw them STOPPING).
    stop_seen: set[int] = field(default_factory=set)
    operator: list[OperatorEntry] = field(default_factory=list)
    lifecycles: Counter[str] = field(default_factory=Counter)  # by how each ended
    notes: Counter[str] = field(default_factory=Counter)  # anything else worth a figure
    # Lifecycles a refusal ended: (phase, execution id once created, code).
    losses: list[tuple[str, int | None, str]] = field(default_factory=list)
    purges: list[dict[str, Any]] = field(default_factory=list)
    anomalies: list[str] = field(default_factory=list)

    def call(self, call: Call) -> None:
        self.calls.append(call)

    def mutated(self, kind: str, row_id: int, version: int) -> None:
        self.versions[(kind, row_id)].append(version)

    def chunk(self, step_id: int, deltas: Mapping[str, int]) -> None:
        self.chunk_deltas[step_id].update(deltas)

    def anomaly(self, text: str) -> None:
        self.anomalies.append(f"{self.name}: {text}")


def merge(ledgers: Iterable[Ledger]) -> Ledger:
    merged = Ledger("all")
    for ledger in ledgers:
        merged.calls.extend(ledger.calls)
        for key, versions in ledger.versions.items():
            merged.versions[key].extend(versions)
        for step_id, deltas in ledger.chunk_deltas.items():
            merged.chunk_deltas[step_id].update(deltas)
        merged.terminal_rollbacks.update(ledger.terminal_rollbacks)
        merged.executions.update(ledger.executions)
        merged.steps.update(ledger.steps)
        merged.stop_seen |= ledger.stop_seen
        merged.operator.extend(ledger.operator)
        merged.lifecycles.update(ledger.lifecycles)
        merged.notes.update(ledger.notes)
        merged.losses.extend(ledger.losses)
        merged.purges.extend(ledger.purges)
        merged.anomalies.extend(ledger.anomalies)
    return merged
