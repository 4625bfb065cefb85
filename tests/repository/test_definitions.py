"""Definitions, upgrade edges and definition-bound launches (contract §2.2.3, §2.2.4, §2.2.5,
contract scenarios 12.x): on the Django adapter and the in-memory fake (``contract``)."""

from __future__ import annotations

import hashlib

import pytest

from oxide_batch.domain import BatchStatus
from oxide_batch.domain.definitions import UpgradeEdge, legacy_manifest
from oxide_batch.domain.errors import (
    DefinitionDrift,
    DefinitionJobMismatch,
    DefinitionNotFound,
    DefinitionUpgradeConflict,
    IncompatibleDefinition,
    InvalidManifest,
    UnsupportedManifestVersion,
)
from tests.helpers import key, launch, move

pytestmark = pytest.mark.contract
S = BatchStatus
JOB = "import_job"


def manifest(step: str = "import", **extra):
    return {"format": 1, "job": JOB, "kind": "tasklet", "step": step, **extra}


def register(repo, revision="v1", body=None, job=JOB):
    with repo.begin() as uow:
        registration = uow.register_definition(job, revision, body or manifest())
        uow.commit()
    return registration


def edge(from_digest, to_digest, mapping=None, upgrade_key="v1-to-v2"):
    return UpgradeEdge.of(
        job_name=JOB,
        key=upgrade_key,
        from_digest=from_digest,
        to_digest=to_digest,
        step_mapping=mapping or {"import": "import-v2"},
    )


def test_registration_stores_the_canonical_manifest_and_its_digest(repo):
    registration = register(repo, body={"step": "import", "job": JOB, "format": 1, "z": [1, {}]})
    definition = registration.definition
    assert registration.created
    assert (definition.job_name, definition.revision, definition.format) == (JOB, "v1", 1)
    canonical = b'{"format":1,"job":"import_job","step":"import","z":[1,{}]}'
    assert definition.digest == hashlib.sha256(canonical).hexdigest()
    with repo.begin() as uow:
        assert uow.get_definition(definition.digest) == definition


def test_key_order_does_not_change_the_digest(repo):
    first = register(repo, body={"format": 1, "job": JOB, "a": 1, "b": 2}).definition
    second = register(repo, body={"b": 2, "a": 1, "job": JOB, "format": 1}).definition
    assert first == second


def test_the_same_digest_under_a_new_label_reuses_the_definition(repo):
    first = register(repo, "v1").definition
    again = register(repo, "release-2026-11")
    assert again.created is False
    assert again.definition == first
    assert again.definition.revision == "v1"


def test_a_revision_bound_to_another_digest_has_drifted(repo):
    register(repo, "v1", manifest("import"))
    with pytest.raises(DefinitionDrift) as error:
        register(repo, "v1", manifest("import-renamed"))
    assert (error.value.job_name, error.value.revision) == (JOB, "v1")


def test_a_manifest_for_another_job_is_a_job_mismatch(repo):
    with pytest.raises(DefinitionJobMismatch) as error:
        register(repo, body={"format": 1, "job": "other_job"})
    assert (error.value.expected, error.value.actual) == (JOB, "other_job")


@pytest.mark.parametrize("format_", [0, 4, 99, -1])
def test_formats_other_than_1_to_3_are_unsupported(repo, format_):
    with pytest.raises(UnsupportedManifestVersion) as error:
        register(repo, body={"format": format_, "job": JOB})
    assert error.value.format == format_


@pytest.mark.parametrize(
    "body",
    [
        {"format": 1, "job": JOB, "ratio": 0.5},
        {"format": 1, "job": JOB, "blob": "x" * (64 * 1024)},
        {"format": 1},
        {"format": 2, "job": JOB, "entry": "a", "nodes": [], "transitions": []},
    ],
    ids=["float", "too-large", "no-job", "empty-graph"],
)
def test_unusable_manifests_are_invalid(repo, body):
    with pytest.raises(InvalidManifest):
        register(repo, body=body)
    # Nothing was bound to v1: a usable manifest registers under it afresh.
    assert register(repo, "v1").created


def test_an_unknown_digest_is_not_found(repo):
    with repo.begin() as uow, pytest.raises(DefinitionNotFound):
        uow.get_definition("0" * 64)


def test_a_launch_without_a_definition_is_bound_to_the_legacy_definition(repo):
    execution = launch(repo)
    with repo.begin() as uow:
        definition = uow.get_definition(legacy_manifest().digest)
    assert execution.definition_id == definition.id
    assert (definition.job_name, definition.format) == (None, 1)


def test_a_restart_without_a_digest_keeps_the_latest_definition(repo, clock):
    v1 = register(repo).definition
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key()).instance
        first = uow.create_job_execution(instance.id, definition_digest=v1.digest)
        uow.commit()
    move(repo, first, S.STARTED, S.FAILED, clock=clock)
    with repo.begin() as uow:
        second = uow.create_job_execution(instance.id)
        uow.commit()
    assert first.definition_id == second.definition_id == v1.id
    assert second.upgrade_id is None


def test_a_definition_change_needs_a_registered_edge(repo, clock):
    """Contract scenario 12.5: v1 → v2 without an edge is incompatible; with it, allowed."""
    v1 = register(repo, "v1", manifest("import")).definition
    v2 = register(repo, "v2", manifest("import-v2")).definition
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key()).instance
        first = uow.create_job_execution(instance.id, definition_digest=v1.digest)
        uow.commit()
    move(repo, first, S.STARTED, S.FAILED, clock=clock)
    with repo.begin() as uow, pytest.raises(IncompatibleDefinition) as error:
        uow.create_job_execution(instance.id, definition_digest=v2.digest)
    assert error.value.instance_id == instance.id
    with repo.begin() as uow:
        assert uow.register_definition_upgrade(edge(v1.digest, v2.digest)) is True
        uow.commit()
    with repo.begin() as uow:
        second = uow.create_job_execution(instance.id, definition_digest=v2.digest)
        uow.commit()
    assert second.definition_id == v2.id
    assert second.upgrade_id is not None


def test_edges_are_directed_and_not_transitive(repo, clock):
    v1 = register(repo, "v1", manifest("a")).definition
    v2 = register(repo, "v2", manifest("b")).definition
    v3 = register(repo, "v3", manifest("c")).definition
    with repo.begin() as uow:
        uow.register_definition_upgrade(edge(v1.digest, v2.digest, {"a": "b"}, "k12"))
        uow.register_definition_upgrade(edge(v2.digest, v3.digest, {"b": "c"}, "k23"))
        instance = uow.select_or_create_job_instance(key()).instance
        first = uow.create_job_execution(instance.id, definition_digest=v1.digest)
        uow.commit()
    move(repo, first, S.STARTED, S.FAILED, clock=clock)
    with repo.begin() as uow, pytest.raises(IncompatibleDefinition):
        uow.create_job_execution(instance.id, definition_digest=v3.digest)


def test_a_first_attempt_may_use_any_definition_of_its_job(repo):
    v2 = register(repo, "v2", manifest("x")).definition
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key()).instance
        execution = uow.create_job_execution(instance.id, definition_digest=v2.digest)
    assert execution.definition_id == v2.id


def test_a_definition_of_another_job_cannot_launch_this_instance(repo):
    other = register(repo, "v1", {"format": 1, "job": "other_job"}, job="other_job").definition
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key()).instance
        with pytest.raises(DefinitionJobMismatch):
            uow.create_job_execution(instance.id, definition_digest=other.digest)


def test_re_registering_an_edge_is_a_no_op_or_a_conflict(repo):
    v1 = register(repo, "v1", manifest("import")).definition
    v2 = register(repo, "v2", manifest("import-v2")).definition
    with repo.begin() as uow:
        assert uow.register_definition_upgrade(edge(v1.digest, v2.digest)) is True
        assert uow.register_definition_upgrade(edge(v1.digest, v2.digest)) is False
        with pytest.raises(DefinitionUpgradeConflict):
            uow.register_definition_upgrade(edge(v1.digest, v2.digest, upgrade_key="other"))
        with pytest.raises(DefinitionUpgradeConflict):
            uow.register_definition_upgrade(edge(v1.digest, v2.digest, {"import": "x"}))
        uow.commit()
    with repo.begin() as uow:
        assert uow.register_definition_upgrade(edge(v1.digest, v2.digest)) is False


def test_an_edge_between_unknown_definitions_is_not_found(repo):
    v1 = register(repo).definition
    with repo.begin() as uow, pytest.raises(DefinitionNotFound):
        uow.register_definition_upgrade(edge(v1.digest, "f" * 64))


def test_a_legacy_attempt_can_be_upgraded_to_a_registered_definition(repo, clock):
    first = move(repo, launch(repo), S.STARTED, S.FAILED, clock=clock)
    v1 = register(repo).definition
    with repo.begin() as uow:
        uow.register_definition_upgrade(
            edge(legacy_manifest().digest, v1.digest, {"import": "import"}, "adopt")
        )
        second = uow.create_job_execution(first.job_instance_id, definition_digest=v1.digest)
        uow.commit()
    assert second.definition_id == v1.id
