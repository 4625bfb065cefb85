"""The versioned capability descriptor a repository publishes."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

DESCRIPTOR_VERSION = 1


class RepositoryCapability(enum.StrEnum):
    OPERATOR_REQUESTS = "operator_requests"
    STOP_REQUESTS = "stop_requests"
    EXECUTION_OWNERSHIP = "execution_ownership"
    INSTANCE_HOLDS = "instance_holds"
    RETENTION_PURGE = "retention_purge"
    STEP_PARTITIONS = "step_partitions"


@dataclass(frozen=True)
class RepositoryDescriptor:
    """What the connected deployment provides. Declaring nothing is the safe claim."""

    schema_version: int
    capabilities: frozenset[RepositoryCapability] = field(default_factory=frozenset)
    descriptor_version: int = DESCRIPTOR_VERSION

    @classmethod
    def of(
        cls, schema_version: int, capabilities: Iterable[RepositoryCapability]
    ) -> RepositoryDescriptor:
        return cls(schema_version, frozenset(capabilities))

    def declares(self, capability: RepositoryCapability) -> bool:
        return capability in self.capabilities
