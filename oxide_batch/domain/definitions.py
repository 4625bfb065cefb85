"""Job definitions: canonical manifests identified by their digest, and
directed upgrade edges between them (contract §2.2.3, §2.2.4)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from oxide_batch.domain.canonical import (
    CanonicalJsonError,
    canonical_bytes,
    contains_float,
    depth,
    sha256_hex,
)
from oxide_batch.domain.errors import (
    DefinitionJobMismatch,
    DomainError,
    InvalidManifest,
    InvalidUpgradeEdge,
    UnsupportedManifestVersion,
)
from oxide_batch.domain.flow import FlowPlan
from oxide_batch.domain.names import NameKind, validate_new_name

SUPPORTED_FORMATS = frozenset({1, 2, 3})
FLOW_FORMATS = frozenset({2, 3})
MAX_MANIFEST_BYTES = 64 * 1024
MAX_MANIFEST_DEPTH = 64
LEGACY_REVISION = "__m1_repository_port_v1"
LEGACY_MANIFEST: Mapping[str, Any] = {
    "format": 1,
    "repository_port": "m1",
    "revision": LEGACY_REVISION,
}


@dataclass(frozen=True, repr=False)
class Manifest:
    """A canonical manifest: its bytes (as text), format, bound job and digest."""

    text: str
    format: int
    job_name: str | None

    def __repr__(self) -> str:
        return f"Manifest(format={self.format}, job={self.job_name!r}, digest={self.digest[:12]}…)"

    @property
    def digest(self) -> str:
        """SHA-256 of the canonical bytes — what machines compare, not the label."""
        return sha256_hex(self.text.encode("utf-8"))

    @classmethod
    def canonicalise(cls, raw: Any, *, job_name: str) -> Manifest:
        """Canonicalise a manifest registered for ``job_name``.

        ``InvalidManifest`` for a non-object, floats, > 64 KiB or a malformed
        flow graph; ``UnsupportedManifestVersion`` unless ``format`` is 1–3;
        ``DefinitionJobMismatch`` when its ``job`` is another job.
        """
        if not isinstance(raw, Mapping):
            raise InvalidManifest(reason="a manifest is a JSON object")
        if depth(raw) > MAX_MANIFEST_DEPTH:
            raise InvalidManifest(reason=f"nested deeper than {MAX_MANIFEST_DEPTH} levels")
        if contains_float(raw):
            raise InvalidManifest(reason="floats are not allowed in a manifest")
        try:
            data = canonical_bytes(raw)
        except CanonicalJsonError as error:
            raise InvalidManifest(reason=str(error)) from None
        if len(data) > MAX_MANIFEST_BYTES:
            raise InvalidManifest(reason=f"larger than {MAX_MANIFEST_BYTES} bytes")
        format_ = raw.get("format")
        if isinstance(format_, bool) or not isinstance(format_, int):
            raise UnsupportedManifestVersion(format=0)
        if format_ not in SUPPORTED_FORMATS:
            raise UnsupportedManifestVersion(format=format_)
        manifest_job = raw.get("job")
        if not isinstance(manifest_job, str):
            raise InvalidManifest(reason="a manifest names its job in `job`")
        if manifest_job != job_name:
            raise DefinitionJobMismatch(expected=job_name, actual=manifest_job)
        manifest = cls(data.decode("utf-8"), format_, manifest_job)
        if format_ in FLOW_FORMATS:
            FlowPlan.from_manifest(raw)
        return manifest


def legacy_manifest() -> Manifest:
    """The built-in definition of attempts launched without one."""
    return Manifest(canonical_bytes(LEGACY_MANIFEST).decode("utf-8"), 1, None)


@dataclass(frozen=True)
class JobDefinition:
    id: int
    job_name: str | None
    revision: str
    format: int
    digest: str
    registered_at: datetime


@dataclass(frozen=True)
class DefinitionRegistration:
    definition: JobDefinition
    created: bool


@dataclass(frozen=True)
class UpgradeEdge:
    """A directed, non-transitive edge ``from_digest → to_digest`` with a step mapping.

    ``step_mapping`` maps source step names to target step names, sorted.
    """

    job_name: str
    key: str
    from_digest: str
    to_digest: str
    step_mapping: tuple[tuple[str, str], ...]

    @classmethod
    def of(
        cls,
        *,
        job_name: str,
        key: str,
        from_digest: str,
        to_digest: str,
        step_mapping: Mapping[str, str],
    ) -> UpgradeEdge:
        try:
            validate_new_name(job_name, NameKind.JOB)
            validate_new_name(key, NameKind.UPGRADE_KEY)
            for source, target in step_mapping.items():
                validate_new_name(source, NameKind.STEP)
                validate_new_name(target, NameKind.STEP)
        except DomainError as error:
            raise InvalidUpgradeEdge(reason=str(error)) from None
        if not step_mapping:
            raise InvalidUpgradeEdge(reason="the step mapping is empty")
        if len(set(step_mapping.values())) != len(step_mapping):
            raise InvalidUpgradeEdge(reason="two source steps map onto one target step")
        if from_digest == to_digest:
            raise InvalidUpgradeEdge(reason="an edge cannot lead from a definition to itself")
        return cls(job_name, key, from_digest, to_digest, tuple(sorted(step_mapping.items())))

    def mapping_json(self) -> str:
        return canonical_bytes(dict(self.step_mapping)).decode("utf-8")

    def source_for(self, target_step: str) -> str | None:
        """The source step mapped onto ``target_step``, if any."""
        return next((s for s, t in self.step_mapping if t == target_step), None)
