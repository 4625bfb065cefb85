"""Job definitions and their upgrade edges in the fake (the port's ``Definitions``)."""

from __future__ import annotations

from typing import Any

from oxide_batch.domain.canonical import CanonicalJsonError, parse_strict
from oxide_batch.domain.definitions import (
    FLOW_FORMATS,
    LEGACY_REVISION,
    DefinitionRegistration,
    JobDefinition,
    Manifest,
    UpgradeEdge,
    legacy_manifest,
)
from oxide_batch.domain.errors import (
    DefinitionDrift,
    DefinitionJobMismatch,
    DefinitionNotFound,
    DefinitionUpgradeConflict,
    DomainError,
    FlowStateCorrupt,
    IncompatibleDefinition,
)
from oxide_batch.domain.execution import JobExecution
from oxide_batch.domain.flow import FlowPlan
from oxide_batch.domain.names import NameKind, validate_name
from tests.fakes.base import UnitOfWorkBase
from tests.fakes.tables import DefinitionRow, Tables, UpgradeRow, by_id


def legacy_row(definition_id: int, registered_at: Any) -> DefinitionRow:
    """The built-in definition of attempts launched without one (the migration's row)."""
    legacy = legacy_manifest()
    definition = JobDefinition(
        id=definition_id,
        job_name=None,
        revision=LEGACY_REVISION,
        format=legacy.format,
        digest=legacy.digest,
        registered_at=registered_at,
    )
    return DefinitionRow(definition, legacy.text)


def flow_plan(tables: Tables, execution: JobExecution) -> FlowPlan | None:
    """The flow plan of the execution's definition (``None`` unless format 2/3); a
    stored manifest that no longer reads as a plan → ``FlowStateCorrupt``."""
    row = tables.definitions[execution.definition_id]
    if row.definition.format not in FLOW_FORMATS:
        return None
    try:
        return FlowPlan.from_manifest(parse_strict(row.manifest))
    except (CanonicalJsonError, DomainError, AttributeError, TypeError):
        raise FlowStateCorrupt() from None


class DefinitionOperations(UnitOfWorkBase):
    """Job definitions and their upgrade edges in the fake (the port's ``Definitions``)."""

    # -- Definitions ----------------------------------------------------------------

    def register_definition(
        self, job_name: str, revision: str, manifest: Any
    ) -> DefinitionRegistration:
        validate_name(job_name, NameKind.JOB)
        validate_name(revision, NameKind.REVISION)
        canonical = Manifest.canonicalise(manifest, job_name=job_name)
        rows = [r.definition for r in self._open().definitions.values()]
        mine = [d for d in rows if d.job_name == job_name]
        if any(d.revision == revision and d.digest != canonical.digest for d in mine):
            raise DefinitionDrift(job_name=job_name, revision=revision)
        existing = next((d for d in mine if d.digest == canonical.digest), None)
        if existing is not None:
            return DefinitionRegistration(existing, created=False)
        definition = JobDefinition(
            id=self._repository.next_id("definitions"),
            job_name=job_name,
            revision=revision,
            format=canonical.format,
            digest=canonical.digest,
            registered_at=self.now(),
        )
        self._open().definitions[definition.id] = DefinitionRow(definition, canonical.text)
        return DefinitionRegistration(definition, created=True)

    def get_definition(self, digest: str, *, job_name: str | None = None) -> JobDefinition:
        found = sorted(
            (
                r.definition
                for r in self._open().definitions.values()
                if r.definition.digest == digest
            ),
            key=by_id,
        )
        if not found:
            raise DefinitionNotFound(digest=digest)
        if job_name is None:
            return found[0]
        for definition in found:
            if definition.job_name in (job_name, None):
                return definition
        raise DefinitionJobMismatch(expected=job_name, actual=str(found[0].job_name))

    def register_definition_upgrade(self, edge: UpgradeEdge) -> bool:
        source = self.get_definition(edge.from_digest, job_name=edge.job_name)
        target = self.get_definition(edge.to_digest, job_name=edge.job_name)
        if target.job_name is None:
            raise DefinitionJobMismatch(expected=edge.job_name, actual="(legacy)")
        upgrades = self._open().upgrades
        stored = next(
            (u for u in upgrades.values() if (u.from_id, u.to_id) == (source.id, target.id)),
            None,
        )
        if stored is None:
            row = UpgradeRow(edge.job_name, edge.key, source.id, target.id, edge.mapping_json())
            upgrades[self._repository.next_id("upgrades")] = row
            return True
        if (stored.key, stored.step_mapping) != (edge.key, edge.mapping_json()):
            raise DefinitionUpgradeConflict(job_name=edge.job_name)
        return False

    def _bind_definition(
        self, instance_id: int, job_name: str, latest: JobExecution | None, digest: str | None
    ) -> tuple[int, int | None]:
        """(definition id, upgrade edge id) of a new attempt, as the adapter's."""
        if digest is None:
            if latest is None:
                return self._repository.legacy_definition_id, None
            return latest.definition_id, None
        proposed = self.get_definition(digest, job_name=job_name).id
        if latest is None or latest.definition_id == proposed:
            return proposed, None
        for pk, upgrade in self._open().upgrades.items():
            if (upgrade.from_id, upgrade.to_id) == (latest.definition_id, proposed):
                return proposed, pk
        raise IncompatibleDefinition(instance_id=instance_id)
