"""What a flow plan stored with an execution's definition says about a node.

contract §2.3.2, §2.3.4: for a flow step the manifest node's own attributes
hold; a request may only narrow them. The manifest is read with the
locked parent execution, and a declared limit is counted with one read.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain.canonical import CanonicalJsonError, parse_strict
from oxide_batch.domain.definitions import FLOW_FORMATS
from oxide_batch.domain.errors import DomainError, FlowStateCorrupt
from oxide_batch.domain.flow import (
    FlowNode,
    FlowPlan,
    allows_start_if_complete,
    effective_start_limit,
    hold_to_start_limit,
)


@functools.lru_cache(maxsize=64)
def stored_plan(manifest_text: str) -> FlowPlan:
    """The plan of a stored canonical manifest (immutable, so cached by its text).

    A stored manifest that no longer reads as a plan → ``FlowStateCorrupt``.
    """
    try:
        return FlowPlan.from_manifest(parse_strict(manifest_text))
    except (CanonicalJsonError, DomainError, AttributeError, TypeError):
        raise FlowStateCorrupt() from None


def plan_node(parent: Mapping[str, Any], node: str) -> FlowNode | None:
    """The node ``node`` of the parent execution's flow plan; ``None`` when its
    definition is no flow plan or the plan does not name the node. ``parent``
    carries ``definition__manifest_format`` and ``definition__manifest``."""
    if parent["definition__manifest_format"] not in FLOW_FORMATS:
        return None
    return stored_plan(parent["definition__manifest"]).nodes.get(node)


def node_allows_start_if_complete(parent: Mapping[str, Any], node: str, requested: bool) -> bool:
    """contract §2.3.2: for a flow step the manifest node's ``allow_start_if_complete``
    decides; a step of an execution without a flow plan (or of a node the plan
    does not name) takes the request's."""
    return allows_start_if_complete(plan_node(parent, node), requested)


def node_start_limit(parent: Mapping[str, Any], node: str, requested: int | None) -> int | None:
    """contract §2.3.4: the limit a start of ``node`` is held to — the manifest
    node's ``start_limit`` when the execution's definition is a flow plan naming
    the node, lowered (never raised) by the request's."""
    found = plan_node(parent, node)
    return effective_start_limit(None if found is None else found.start_limit, requested)


def hold_to_declared_start_limit(using: str, parent: Mapping[str, Any], node: str) -> None:
    """contract §2.3.4: a step whose node the execution's flow plan declares a
    ``start_limit`` for is held to it even when the request names no limit (one
    count, only then); at the limit → ``StartLimitExceeded``. The caller holds
    the parent execution's lock, which serialises the count: only a
    STARTING/STARTED execution creates steps, and an instance has at most one."""
    limit = node_start_limit(parent, node, None)
    if limit is None:
        return
    instance_id = parent["job_instance_id"]
    starts = (
        models.StepExecution.objects.using(using)
        .filter(job_instance_id=instance_id, node_id=node)
        .count()
    )
    hold_to_start_limit(instance_id=instance_id, node_id=node, limit=limit, starts=starts)
