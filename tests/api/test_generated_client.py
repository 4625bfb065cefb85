"""A client generated from the served OpenAPI document by a third-party
generator (``openapi-python-client``) drives a whole runtime lifecycle against a
live server — the way runtimes in other languages generate theirs (issue 15).

Slow but required (a few seconds: one generator run, one live server): it is
the proof that the document is enough to build a working client. Generation
warnings are compared with ``ALLOWED_WARNINGS``; a new one (a part of the
schema the generator skips) fails the test. The generated code lives in a
temporary directory outside the tree (neither ruff nor mypy sees it) and is
never patched: an operation it cannot drive is a defect of the schema."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from oxide_batch.roles import RUNTIME
from tests.helpers import api_token
from tests.live import api_base_url

pytestmark = pytest.mark.standalone

User = get_user_model()

GENERATOR = Path(sys.executable).with_name("openapi-python-client")
# With ``--meta none`` the output directory is the package; this is the name the
# generator derives from the document's title ("oxide_batch API") by default.
PACKAGE = "oxide_batch_api_client"
# The generator's own lines around its warnings (not warnings themselves).
BANNERS = (
    "Warning(s) encountered while generating.",
    "If you believe this was a mistake",
)
# Warnings the generator emits for this schema, one line each (header or
# detail). None today: every operation and model is generated. A schema change
# that makes the generator skip an endpoint or a model adds lines here — and
# fails this test until the schema is fixed (or the line is allowed here, with
# a comment on why it cannot be).
ALLOWED_WARNINGS: frozenset[str] = frozenset()
OWNER_TOKEN = bytes(range(16)).hex()
OFFSET_SCHEMA = "reader.offset"


def generation_warnings(stderr: str) -> list[str]:
    """The generator's warning lines (``handle_errors`` prints them to stderr)."""
    return [
        line.strip()
        for line in stderr.splitlines()
        if line.strip() and not line.strip().startswith(BANNERS)
    ]


@pytest.fixture(scope="module")
def generated(
    tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[ModuleType]:
    """The package ``openapi-python-client`` generates from ``GET schema/``."""
    work = tmp_path_factory.mktemp("generated-client")
    with django_db_blocker.unblock():
        response = Client().get(reverse("oxide_batch:api:schema"), {"format": "json"})
    assert response.status_code == 200
    document = work / "openapi.json"
    document.write_bytes(response.content)
    assert json.loads(document.read_text())["info"]["title"] == "oxide_batch API"
    # No post hooks: the default ones run ruff on the output, which says nothing
    # about the schema (and warns when ruff is not on PATH).
    config = work / "generator.yaml"
    config.write_text("post_hooks: []\n")
    run = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(document),
            "--output-path",
            str(work / PACKAGE),
            "--meta",
            "none",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=work,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    new = [line for line in generation_warnings(run.stderr) if line not in ALLOWED_WARNINGS]
    assert not new, "new generator warnings:\n" + "\n".join(new)
    assert (work / PACKAGE / "client.py").is_file()

    sys.path.insert(0, str(work))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(work))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def api(package: ModuleType, name: str) -> Any:
    """A generated module of ``package`` (``api.steps.commit_chunk``, ``models``…)."""
    return importlib.import_module(f"{package.__name__}.{name}")


def runtime_token() -> str:
    user = User.objects.create_user("polyglot-runtime")
    user.groups.add(Group.objects.get(name=RUNTIME))
    return api_token(user)


def call(operation: Any, *args: Any, status: int = 200, **kwargs: Any) -> Any:
    """One operation by the generated ``sync_detailed``; its parsed model."""
    response = operation.sync_detailed(*args, **kwargs)
    assert response.status_code == status, response.content
    return response.parsed


def test_the_generated_client_drives_a_lifecycle(
    generated: ModuleType, transactional_db: None, live_server: Any
) -> None:
    m = api(generated, "models")
    op = {
        name: api(generated, f"api.{group}.{name}")
        for group, names in {
            "instances": ("select_or_create_instance", "get_instance"),
            "executions": (
                "create_execution",
                "claim_execution",
                "transition_execution",
                "observe_execution_control",
                "enrich_execution_exit_status",
                "get_execution",
            ),
            "steps": (
                "create_step",
                "transition_step",
                "commit_chunk",
                "get_checkpoint",
                "enrich_step_exit_status",
                "get_step",
            ),
        }.items()
        for name in names
    }
    S = m.BatchStatusEnum
    client = generated.AuthenticatedClient(
        base_url=api_base_url(live_server), token=runtime_token(), prefix="Token", timeout=10.0
    )

    with client as c:
        # -- the instance of a key: created, then selected.
        body = m.InstanceRequest(
            job_name="polyglot_import",
            # A typed object in the schema: the generator makes it a model.
            identifying_parameters=m.InstanceRequestIdentifyingParameters.from_dict(
                {"business_date": "2026-07-29", "shard": 3}
            ),
        )
        instance = call(op["select_or_create_instance"], client=c, body=body, status=201)
        assert isinstance(instance, m.Instance)
        again = call(op["select_or_create_instance"], client=c, body=body, status=200)
        assert (again.id, again.key_digest) == (instance.id, instance.key_digest)

        # -- the execution: created STARTING, claimed, started, control observed.
        execution = call(
            op["create_execution"], instance.id, client=c, body=m.LaunchRequest(), status=201
        )
        assert isinstance(execution, m.Execution)
        assert (execution.status, execution.attempt) == (S.STARTING, 1)
        execution = call(
            op["claim_execution"],
            execution.id,
            client=c,
            body=m.ClaimRequest(expected_version=execution.version, owner_token=OWNER_TOKEN),
        )
        assert execution.owner_recorded is True
        execution = call(
            op["transition_execution"],
            execution.id,
            client=c,
            body=m.TransitionRequest(expected_version=execution.version, status=S.STARTED),
        )
        assert execution.status == S.STARTED
        control = call(
            op["observe_execution_control"],
            execution.id,
            client=c,
            body=m.ControlRequest(owner_token=OWNER_TOKEN),
        )
        assert isinstance(control, m.Control)
        assert (control.owner_matches, control.stop_requested) == (True, False)
        assert control.execution.id == execution.id
        execution = control.execution  # observing refreshes the liveness (a new version)

        # -- a step: created, started, one chunk with a checkpoint, completed.
        step = call(
            op["create_step"],
            execution.id,
            client=c,
            body=m.StepRequest(step_name="load"),
            status=201,
        )
        # The create answer's own type: a step created STARTED would carry the
        # checkpoint and context it took over (decision 223).
        assert isinstance(step, m.StepCreated)
        assert (step.status, step.node_id) == (S.STARTING, "load")
        step = call(
            op["transition_step"],
            step.id,
            client=c,
            body=m.TransitionRequest(expected_version=step.version, status=S.STARTED),
        )
        assert step.status == S.STARTED
        envelope = {"schema": OFFSET_SCHEMA, "schema_version": 1, "payload": {"offset": 100}}
        step = call(
            op["commit_chunk"],
            step.id,
            client=c,
            body=m.ChunkRequest(
                expected_version=step.version,
                counts=m.CountsRequest(read=100, written=98, filtered=2, committed=1),
                checkpoint=m.ChunkRequestCheckpointType0.from_dict(envelope),
            ),
        )
        assert (step.counts.read, step.counts.written, step.counts.filtered) == (100, 98, 2)
        state = call(op["get_checkpoint"], step.id, client=c)
        assert isinstance(state, m.Checkpoint)
        assert state.step.version == step.version
        assert isinstance(state.checkpoint, m.Envelope)
        assert state.checkpoint.to_dict() == envelope
        assert state.context is None
        step = call(
            op["enrich_step_exit_status"],
            step.id,
            client=c,
            body=m.ExitStatusRequest(expected_version=step.version, exit_code="LOADED"),
        )
        step = call(
            op["transition_step"],
            step.id,
            client=c,
            body=m.TransitionRequest(expected_version=step.version, status=S.COMPLETED),
        )
        assert step.status == S.COMPLETED

        # -- the execution: exit status, then COMPLETED.
        execution = call(
            op["enrich_execution_exit_status"],
            execution.id,
            client=c,
            body=m.ExitStatusRequest(expected_version=execution.version, exit_code="DONE"),
        )
        execution = call(
            op["transition_execution"],
            execution.id,
            client=c,
            body=m.TransitionRequest(expected_version=execution.version, status=S.COMPLETED),
        )
        assert execution.status == S.COMPLETED

        # -- the final states, read back with the generated GET operations.
        final = call(op["get_execution"], execution.id, client=c)
        # GET executions/{id} and steps/{id} answer with the failure's detail (issue 40).
        assert isinstance(final, m.ExecutionDetail)
        assert (final.status, final.exit_code, final.version) == (
            S.COMPLETED,
            "DONE",
            execution.version,
        )
        assert final.ended_at is not None
        final_step = call(op["get_step"], step.id, client=c)
        assert isinstance(final_step, m.StepDetail)
        assert (final_step.status, final_step.exit_code, final_step.counts.committed) == (
            S.COMPLETED,
            "LOADED",
            1,
        )
        assert final_step.ended_at is not None
        assert call(op["get_instance"], instance.id, client=c).id == instance.id

        # -- a refusal parses into the generated problem model (a stale CAS: 409).
        stale = op["transition_execution"].sync_detailed(
            execution.id,
            client=c,
            body=m.TransitionRequest(expected_version=1, status=S.FAILED),
        )
        assert stale.status_code == 409
        assert isinstance(stale.parsed, m.Problem)


def test_generation_warnings_are_the_lines_between_the_banners() -> None:
    # What openapi-python-client 0.29 prints to stderr for a $ref it cannot resolve.
    stderr = (
        "Warning(s) encountered while generating. Client was generated, but some pieces"
        " may be missing\n"
        "WARNING parsing POST /api/v1/steps/{step_id}/checkpoint within steps."
        " Endpoint will not be generated.\n\n"
        "Could not find reference in parsed models or enums\n\n\n"
        "If you believe this was a mistake or this tool is missing a feature you need,"
        " please open an issue at https://github.com/openapi-generators/\n"
    )
    assert generation_warnings(stderr) == [
        "WARNING parsing POST /api/v1/steps/{step_id}/checkpoint within steps."
        " Endpoint will not be generated.",
        "Could not find reference in parsed models or enums",
    ]
    assert generation_warnings("") == []
