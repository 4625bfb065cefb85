"""Registration identity rules that a shared digest or key must not bypass (contract §2.2.3):
a (job, revision) bound to one digest drifts whatever else shares the new digest, and
an upgrade edge is re-registered only with the content of its own (from, to)."""

from __future__ import annotations

import pytest

from oxide_batch import models
from oxide_batch.domain.definitions import UpgradeEdge
from oxide_batch.domain.errors import DefinitionDrift, DefinitionUpgradeConflict
from tests.fakes import FakeJobRepository

pytestmark = pytest.mark.contract
JOB = "import_job"


def manifest(step: str) -> dict[str, object]:
    return {"format": 1, "job": JOB, "kind": "tasklet", "step": step}


def register(repo, revision: str, body: dict[str, object]):
    with repo.begin() as uow:
        registration = uow.register_definition(JOB, revision, body)
        uow.commit()
    return registration


def stored_bindings(repo) -> dict[str, str]:
    """Each stored revision of the job and its digest (the fake's rows or the model's)."""
    if isinstance(repo, FakeJobRepository):
        rows = [row.definition for row in repo.tables.definitions.values()]
        return {d.revision: d.digest for d in rows if d.job_name == JOB}
    return dict(
        models.JobDefinition.objects.filter(job_name=JOB).values_list("revision", "manifest_digest")
    )


def stored_edge_keys(repo) -> list[str]:
    """The stored upgrade edges' keys, oldest first."""
    if isinstance(repo, FakeJobRepository):
        return [edge.key for _, edge in sorted(repo.tables.upgrades.items())]
    return list(
        models.DefinitionUpgrade.objects.order_by("id").values_list("upgrade_key", flat=True)
    )


def test_a_bound_revision_drifts_even_when_the_new_digest_is_registered_under_another(repo):
    """(job, v1) → M1, (job, v3) → M2, then (job, v1) → M2: drift, not v3's row."""
    m1 = register(repo, "v1", manifest("import")).definition
    m2 = register(repo, "v3", manifest("import-v3")).definition
    before = stored_bindings(repo)
    with pytest.raises(DefinitionDrift) as error:
        register(repo, "v1", manifest("import-v3"))
    assert (error.value.job_name, error.value.revision) == (JOB, "v1")
    assert stored_bindings(repo) == before == {"v1": m1.digest, "v3": m2.digest}


def test_a_shared_digest_under_a_new_label_still_reuses_its_definition(repo):
    register(repo, "v1", manifest("import"))
    m2 = register(repo, "v3", manifest("import-v3")).definition
    for label in ("v4", "v3"):
        again = register(repo, label, manifest("import-v3"))
        assert (again.created, again.definition) == (False, m2)
    assert set(stored_bindings(repo)) == {"v1", "v3"}


def edge(from_digest: str, to_digest: str, key: str, mapping: dict[str, str]) -> UpgradeEdge:
    return UpgradeEdge.of(
        job_name=JOB, key=key, from_digest=from_digest, to_digest=to_digest, step_mapping=mapping
    )


def test_an_edge_re_registered_with_another_edges_key_or_mapping_conflicts(repo):
    """The content compared is the stored edge of this (from, to) only: a key or a
    mapping that another edge of the job holds does not make a changed edge pass."""
    v1 = register(repo, "v1", manifest("a")).definition
    v2 = register(repo, "v2", manifest("b")).definition
    v3 = register(repo, "v3", manifest("c")).definition
    with repo.begin() as uow:
        assert uow.register_definition_upgrade(edge(v1.digest, v2.digest, "k12", {"a": "b"}))
        assert uow.register_definition_upgrade(edge(v1.digest, v3.digest, "k13", {"a": "c"}))
        uow.commit()
    for key, mapping in (("k13", {"a": "c"}), ("k13", {"a": "b"}), ("k12", {"a": "c"})):
        with repo.begin() as uow, pytest.raises(DefinitionUpgradeConflict):
            uow.register_definition_upgrade(edge(v1.digest, v2.digest, key, mapping))
    with repo.begin() as uow:
        assert not uow.register_definition_upgrade(edge(v1.digest, v2.digest, "k12", {"a": "b"}))
    assert stored_edge_keys(repo) == ["k12", "k13"]
