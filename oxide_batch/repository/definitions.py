"""Definitions and upgrade edges in the Django adapter."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain import events
from oxide_batch.domain.definitions import (
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
)
from oxide_batch.domain.names import NameKind, validate_new_name
from oxide_batch.repository.unit_of_work import UnitOfWorkBase, operation

DEFINITION_COLUMNS = (
    "id",
    "job_name",
    "revision",
    "manifest_format",
    "manifest_digest",
    "registered_at",
)


def definition_from_row(row: dict[str, Any]) -> JobDefinition:
    return JobDefinition(
        id=row["id"],
        job_name=row["job_name"],
        revision=row["revision"],
        format=row["manifest_format"],
        digest=row["manifest_digest"],
        registered_at=row["registered_at"],
    )


class DefinitionOperations(UnitOfWorkBase):
    """Registering definitions and edges, and resolving them for a launch."""

    @operation
    def register_definition(
        self, job_name: str, revision: str, manifest: Any
    ) -> DefinitionRegistration:
        """Register a manifest for ``job_name`` under a revision label.

        The same digest under a new label reuses the existing definition (which
        keeps its first label); a (job, revision) already bound to another
        digest → ``DefinitionDrift``, whatever other revision shares the digest.
        One insert (``ON CONFLICT DO NOTHING``) and one read of the rows either
        unique key (revision, digest) of the job matches.
        """
        validate_new_name(job_name, NameKind.JOB)
        validate_new_name(revision, NameKind.REVISION)
        canonical = Manifest.canonicalise(manifest, job_name=job_name)
        new_id = self._insert_unless_conflict(
            models.JobDefinition,
            {
                "job_name": job_name,
                "revision": revision,
                "manifest_format": canonical.format,
                "manifest_digest": canonical.digest,
                "manifest": canonical.text,
                "registered_at": self.now(),
            },
        )
        # The insert conflicts on (job, revision) or on (job, digest): read both,
        # so a revision bound elsewhere is seen even when the digest exists too.
        rows = list(
            models.JobDefinition.objects.using(self._using)
            .filter(Q(revision=revision) | Q(manifest_digest=canonical.digest), job_name=job_name)
            .values(*DEFINITION_COLUMNS)
        )
        if any(
            row["revision"] == revision and row["manifest_digest"] != canonical.digest
            for row in rows
        ):
            raise DefinitionDrift(job_name=job_name, revision=revision)
        row = next((row for row in rows if row["manifest_digest"] == canonical.digest), None)
        if row is None:
            raise DefinitionDrift(job_name=job_name, revision=revision)
        created = new_id is not None
        self._record(
            events.DefinitionRegistered(
                digest=canonical.digest, job_name=job_name, created=created, actor=self._actor
            )
        )
        return DefinitionRegistration(definition_from_row(row), created=created)

    @operation
    def get_definition(self, digest: str, *, job_name: str | None = None) -> JobDefinition:
        """The definition with ``digest`` (of ``job_name``, when given).

        ``DefinitionNotFound`` when no definition has the digest;
        ``DefinitionJobMismatch`` when it belongs to another job.
        """
        rows = list(
            models.JobDefinition.objects.using(self._using)
            .filter(manifest_digest=digest)
            .values(*DEFINITION_COLUMNS)[:2]
        )
        if not rows:
            raise DefinitionNotFound(digest=digest)
        if job_name is None:
            return definition_from_row(rows[0])
        for row in rows:
            if row["job_name"] in (job_name, None):
                return definition_from_row(row)
        raise DefinitionJobMismatch(expected=job_name, actual=rows[0]["job_name"])

    @operation
    def register_definition_upgrade(self, edge: UpgradeEdge) -> bool:
        """Register a directed edge; ``True`` when new, ``False`` when the same edge
        exists. Other content for an existing (from, to) → ``DefinitionUpgradeConflict``.
        """
        source = self.get_definition(edge.from_digest, job_name=edge.job_name)
        target = self.get_definition(edge.to_digest, job_name=edge.job_name)
        if target.job_name is None:
            raise DefinitionJobMismatch(expected=edge.job_name, actual="(legacy)")
        new_id = self._insert_unless_conflict(
            models.DefinitionUpgrade,
            {
                "job_name": edge.job_name,
                "upgrade_key": edge.key,
                "from_definition": source.id,
                "to_definition": target.id,
                "step_mapping": edge.mapping_json(),
                "registered_at": self.now(),
            },
            # Only the (from, to) key may make this a re-registration: the read
            # below compares the row of exactly that key.
            conflict_fields=("from_definition", "to_definition"),
        )
        self._record(
            events.DefinitionUpgradeRegistered(
                edge=edge, created=new_id is not None, actor=self._actor
            )
        )
        if new_id is not None:
            return True
        stored = (
            models.DefinitionUpgrade.objects.using(self._using)
            .filter(from_definition=source.id, to_definition=target.id)
            .values("upgrade_key", "step_mapping")
            .get()
        )
        if (stored["upgrade_key"], stored["step_mapping"]) != (edge.key, edge.mapping_json()):
            raise DefinitionUpgradeConflict(job_name=edge.job_name)
        return False

    def _legacy_definition_id(self) -> int:
        """The built-in legacy definition (created on first use if missing)."""
        legacy = legacy_manifest()
        rows = models.JobDefinition.objects.using(self._using).filter(
            job_name__isnull=True, manifest_digest=legacy.digest
        )
        found = rows.values_list("id", flat=True).first()
        if found is not None:
            return found
        self._insert_unless_conflict(
            models.JobDefinition,
            {
                "job_name": None,
                "revision": "__m1_repository_port_v1",
                "manifest_format": 1,
                "manifest_digest": legacy.digest,
                "manifest": legacy.text,
                "registered_at": self.now(),
            },
        )
        return rows.values_list("id", flat=True).get()
