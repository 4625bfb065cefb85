"""``POST definitions``: a (job, revision) bound to one digest is ``definition_drift``
whatever other revision shares the new digest (contract §2.2.3)."""

from __future__ import annotations

from typing import Any

from oxide_batch import models
from tests.api.support import Runtime, problem

JOB = "import_job"


def manifest(step: str) -> dict[str, object]:
    return {"format": 1, "job": JOB, "step": step}


def register(rt: Runtime, revision: str, step: str, status: int | None = None) -> Any:
    body = {"job_name": JOB, "revision": revision, "manifest": manifest(step)}
    return rt.post("definitions", body, status)


def test_a_bound_revision_with_the_digest_of_another_revision_is_409_definition_drift(
    rt: Runtime,
) -> None:
    first = register(rt, "v1", "import", 201)
    third = register(rt, "v3", "import-v3", 201)
    body = problem(register(rt, "v1", "import-v3"), 409, "definition_drift")
    assert (body["job_name"], body["revision"]) == (JOB, "v1")
    bindings = dict(
        models.JobDefinition.objects.filter(job_name=JOB).values_list("revision", "manifest_digest")
    )
    assert bindings == {"v1": first["digest"], "v3": third["digest"]}
    # The same digest under a new label still reuses the definition.
    assert register(rt, "v4", "import-v3", 200) == third
