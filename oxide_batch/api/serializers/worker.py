"""The worker's identity on the wire (decision 310): ``worker: {host, pid,
name, client}`` in a launch, a claim and a step's creation; ``worker: {host,
pid, name, client, user}`` in the execution and step answers."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from oxide_batch.api.fields import NameField, StrictIntegerField
from oxide_batch.api.serializers.base import Input, Output, name
from oxide_batch.domain.names import NameKind
from oxide_batch.domain.worker import MAX_PID, WorkerIdentity

WORKER_HELP = (
    "Who runs it (all members optional): the host (default in the Python client: "
    "`socket.gethostname()`), the process id, a worker name the runtime sets, the "
    "client's name and version. Stored with the claim; shown in the answers, the "
    "console's case file and `batch_show`."
)


class WorkerInput(Input):
    host = NameField(NameKind.WORKER_HOST, required=False, allow_null=True)
    pid = StrictIntegerField(required=False, allow_null=True, min_value=1, max_value=MAX_PID)
    name = NameField(NameKind.WORKER_NAME, required=False, allow_null=True)
    client = NameField(
        NameKind.WORKER_CLIENT,
        required=False,
        allow_null=True,
        help_text='The client\'s name and version, e.g. "oxide-batch 0.6.0".',
    )


def worker_field() -> WorkerInput:
    return WorkerInput(required=False, allow_null=True, help_text=WORKER_HELP)


def worker_value(data: dict[str, Any]) -> WorkerIdentity | None:
    """The identity a request carried (``None``: none), each text member
    validated as a visible name under its own path (``worker.host`` …)."""
    raw = data.get("worker")
    if raw is None:
        return None
    texts = {
        member: name(f"worker.{member}", kind, raw[member])
        for member, kind in (
            ("host", NameKind.WORKER_HOST),
            ("name", NameKind.WORKER_NAME),
            ("client", NameKind.WORKER_CLIENT),
        )
        if raw.get(member) is not None
    }
    return WorkerIdentity(pid=raw.get("pid"), **texts)


class StepWorkerOutput(Output):
    host = serializers.CharField(allow_null=True)
    pid = serializers.IntegerField(allow_null=True)
    name = serializers.CharField(allow_null=True)
    client = serializers.CharField(allow_null=True)


class WorkerOutput(StepWorkerOutput):
    user = serializers.CharField(
        allow_null=True,
        help_text=(
            "The runtime user that claimed the execution (its username; null when "
            "none is recorded or the account is gone)."
        ),
    )
