"""Flow plans (format-2/3 manifests) and flow decisions (contract §2.3.4, §2.3.5).

A plan is a graph of nodes and transitions; a transition's pattern is an exit
code or a glob with ``*`` and ``?``, and the most specific matching pattern
wins (exact before wildcards, then fewer wildcards; ties as in Spring Batch).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from oxide_batch.domain.errors import (
    DomainError,
    FlowStateCorrupt,
    InvalidCharacters,
    InvalidManifest,
    StartLimitExceeded,
)
from oxide_batch.domain.names import NameKind, validate_name

MAX_NODES = 1024
MAX_TRANSITIONS = 4096
MAX_START_LIMIT = 2**31 - 1
DIGEST_HEX = re.compile(r"[0-9a-f]{64}")


class NodeKind(enum.StrEnum):
    STEP = "step"
    PARTITIONED_STEP = "partitioned_step"
    DECISION = "decision"
    JOIN = "join"
    SPLIT = "split"


class FlowTransitionKind(enum.StrEnum):
    STEP_EXIT = "STEP_EXIT"
    DECIDER = "DECIDER"
    COMPLETED_STEP_REUSE = "COMPLETED_STEP_REUSE"
    SPLIT_AGGREGATE = "SPLIT_AGGREGATE"


# Which node kinds may be the source of a decision of each kind.
SOURCE_KINDS: Mapping[FlowTransitionKind, frozenset[NodeKind]] = {
    FlowTransitionKind.STEP_EXIT: frozenset({NodeKind.STEP, NodeKind.PARTITIONED_STEP}),
    FlowTransitionKind.COMPLETED_STEP_REUSE: frozenset({NodeKind.STEP, NodeKind.PARTITIONED_STEP}),
    FlowTransitionKind.DECIDER: frozenset({NodeKind.DECISION}),
    FlowTransitionKind.SPLIT_AGGREGATE: frozenset({NodeKind.JOIN}),
}
# Decisions whose source is a step must name the step execution.
STEP_SOURCED = frozenset({FlowTransitionKind.STEP_EXIT, FlowTransitionKind.COMPLETED_STEP_REUSE})


class TerminalKind(enum.StrEnum):
    COMPLETE = "COMPLETE"
    FAIL = "FAIL"
    STOP = "STOP"


@dataclass(frozen=True)
class FlowTarget:
    """Exactly one of a node or a terminal."""

    node: str | None = None
    terminal: TerminalKind | None = None

    def __post_init__(self) -> None:
        if (self.node is None) == (self.terminal is None):
            raise ValueError("a flow target is a node or a terminal, exactly one")

    @classmethod
    def from_json(cls, raw: Any) -> FlowTarget:
        """``{"node": id}`` or ``{"terminal": "COMPLETE"|"FAIL"|"STOP"}``."""
        if isinstance(raw, Mapping) and set(raw) == {"node"} and isinstance(raw["node"], str):
            return cls(node=validate_name(raw["node"], NameKind.NODE))
        if isinstance(raw, Mapping) and set(raw) == {"terminal"}:
            try:
                return cls(terminal=TerminalKind(raw["terminal"]))
            except ValueError:
                pass
        raise InvalidManifest(reason='a target is {"node": id} or {"terminal": COMPLETE|FAIL|STOP}')

    def as_json(self) -> dict[str, str]:
        return {"node": self.node} if self.node is not None else {"terminal": str(self.terminal)}


@dataclass(frozen=True)
class FlowNode:
    id: str
    kind: NodeKind
    step: str
    start_limit: int | None = None
    allow_start_if_complete: bool = False


def effective_start_limit(declared: int | None, requested: int | None) -> int | None:
    """contract §2.3.4: the manifest node's ``start_limit`` holds whatever the
    request says; a request may only lower it (``None`` = unlimited on either side)."""
    limits = [limit for limit in (declared, requested) if limit is not None]
    return min(limits) if limits else None


def hold_to_start_limit(*, instance_id: int, node_id: str, limit: int | None, starts: int) -> None:
    """contract §2.3.4: ``starts`` rows of the node across the instance's
    executions; at or above ``limit`` → ``StartLimitExceeded`` (creating a
    STARTING row consumes one start; ``None`` = unlimited). Step creation and
    the restart plan both hold a start to it here."""
    if limit is not None and starts >= limit:
        raise StartLimitExceeded(instance_id=instance_id, node_id=node_id, limit=limit)


def allows_start_if_complete(node: FlowNode | None, requested: bool) -> bool:
    """contract §2.3.2: for a flow step the manifest node's ``allow_start_if_complete``
    decides; without a node (no flow plan, or a node it does not name) the
    request's flag."""
    return requested if node is None else node.allow_start_if_complete


@dataclass(frozen=True)
class PlanTransition:
    source: str
    pattern: str
    target: FlowTarget
    index: int

    @property
    def wildcards(self) -> int:
        return self.pattern.count("*") + self.pattern.count("?")

    @property
    def specificity(self) -> tuple[int, int, int, int]:
        """Smaller is more specific: fewer wildcards (contract §2.3.5), then — as Spring
        Batch's comparator — fewer ``*`` than ``?``, more literal characters, and
        finally manifest order."""
        literals = len(self.pattern) - self.wildcards
        return (self.wildcards, self.pattern.count("*"), -literals, self.index)

    def matches(self, outcome: str) -> bool:
        return pattern_regex(self.pattern).fullmatch(outcome) is not None


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """``*`` matches any run, ``?`` one character; everything else is literal."""
    parts = [".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern]
    return re.compile("".join(parts), re.DOTALL)


def _require(condition: bool, reason: str) -> None:
    if not condition:
        raise InvalidManifest(reason=reason)


def _name(raw: Any, kind: NameKind, what: str) -> str:
    _require(isinstance(raw, str), f"{what} must be a string")
    try:
        return validate_name(raw, kind)
    except DomainError as error:
        raise InvalidManifest(reason=f"{what}: {error}") from None


def _node(raw: Any) -> FlowNode:
    _require(isinstance(raw, Mapping), "a node is an object")
    allowed = {"id", "kind", "step", "start_limit", "allow_start_if_complete"}
    _require(set(raw) <= allowed and {"id", "kind"} <= set(raw), "a node is {id, kind, …}")
    node_id = _name(raw["id"], NameKind.NODE, "node id")
    try:
        kind = NodeKind(raw["kind"])
    except ValueError:
        raise InvalidManifest(reason=f"node {node_id}: unknown kind") from None
    step = _name(raw.get("step", node_id), NameKind.STEP, "node step")
    limit = raw.get("start_limit")
    _require(
        limit is None
        or (
            isinstance(limit, int) and not isinstance(limit, bool) and 1 <= limit <= MAX_START_LIMIT
        ),
        f"node {node_id}: start_limit must be a positive integer",
    )
    allow = raw.get("allow_start_if_complete", False)
    _require(isinstance(allow, bool), f"node {node_id}: allow_start_if_complete is a boolean")
    return FlowNode(node_id, kind, step, limit, allow)


@dataclass(frozen=True)
class FlowPlan:
    entry: str
    nodes: Mapping[str, FlowNode]
    transitions: tuple[PlanTransition, ...]

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> FlowPlan:
        """Read and check the graph of a format-2/3 manifest (``InvalidManifest``)."""
        nodes_raw, transitions_raw = manifest.get("nodes"), manifest.get("transitions")
        _require(
            isinstance(nodes_raw, list) and 1 <= len(nodes_raw) <= MAX_NODES,
            f"nodes must be a list of 1..{MAX_NODES}",
        )
        _require(
            isinstance(transitions_raw, list) and len(transitions_raw) <= MAX_TRANSITIONS,
            f"transitions must be a list of at most {MAX_TRANSITIONS}",
        )
        assert isinstance(nodes_raw, list)
        assert isinstance(transitions_raw, list)
        nodes: dict[str, FlowNode] = {}
        for raw in nodes_raw:
            node = _node(raw)
            _require(node.id not in nodes, f"node {node.id} is declared twice")
            nodes[node.id] = node
        entry = _name(manifest.get("entry"), NameKind.NODE, "entry")
        _require(entry in nodes, "entry names no node")
        transitions = []
        for index, raw in enumerate(transitions_raw):
            _require(
                isinstance(raw, Mapping) and set(raw) == {"source", "pattern", "target"},
                "a transition is {source, pattern, target}",
            )
            source = _name(raw["source"], NameKind.NODE, "transition source")
            _require(source in nodes, f"transition source {source} names no node")
            pattern = _name(raw["pattern"], NameKind.EXIT_CODE, "transition pattern")
            try:
                target = FlowTarget.from_json(raw["target"])
            except DomainError as error:
                if isinstance(error, InvalidManifest):
                    raise
                raise InvalidManifest(reason=f"transition target: {error}") from None
            _require(
                target.node is None or target.node in nodes,
                f"transition target {target.node} names no node",
            )
            transitions.append(PlanTransition(source, pattern, target, index))
        return cls(entry, nodes, tuple(transitions))

    def target_for(self, source: str, outcome: str) -> FlowTarget | None:
        """The target of the most specific transition from ``source`` matching ``outcome``."""
        matching = [t for t in self.transitions if t.source == source and t.matches(outcome)]
        if not matching:
            return None
        return min(matching, key=lambda t: t.specificity).target


@dataclass(frozen=True)
class FlowDecisionRequest:
    """What a runtime asks to append; the repository assigns the sequence."""

    job_execution_id: int
    source_node_id: str
    kind: FlowTransitionKind
    observed_outcome: str
    target: FlowTarget
    plan_fingerprint: str
    input_digest: str
    source_step_execution_id: int | None = None
    reused_decision_id: int | None = None

    def __post_init__(self) -> None:
        validate_name(self.source_node_id, NameKind.NODE)
        validate_name(self.observed_outcome, NameKind.EXIT_CODE)
        for name in ("plan_fingerprint", "input_digest"):
            if DIGEST_HEX.fullmatch(getattr(self, name)) is None:
                raise InvalidCharacters(kind=name, allowed="64 lowercase hex characters")


@dataclass(frozen=True)
class FlowDecision:
    id: int
    job_execution_id: int
    sequence: int
    source_node_id: str
    source_step_execution_id: int | None
    kind: FlowTransitionKind
    observed_outcome: str
    target: FlowTarget
    plan_fingerprint: str
    input_digest: str
    reused_decision_id: int | None
    decided_at: datetime


def check_decision_against_plan(
    plan: FlowPlan, definition_digest: str, request: FlowDecisionRequest
) -> None:
    """A decision must agree with the execution's definition, else ``FlowStateCorrupt``:
    the fingerprint is its manifest digest, the source node exists with a kind that
    fits, and the manifest's transition for the outcome leads to the target."""
    if request.plan_fingerprint != definition_digest:
        raise FlowStateCorrupt()
    node = plan.nodes.get(request.source_node_id)
    if node is None or node.kind not in SOURCE_KINDS[request.kind]:
        raise FlowStateCorrupt()
    if request.source_step_execution_id is None and request.kind in STEP_SOURCED:
        raise FlowStateCorrupt()
    if plan.target_for(request.source_node_id, request.observed_outcome) != request.target:
        raise FlowStateCorrupt()
