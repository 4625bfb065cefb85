"""Flow decisions: append one, list an execution's, find a reusable one."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from oxide_batch.api.fields import (
    DigestField,
    EnumField,
    IdField,
    InstantField,
    JSONObjectField,
    NameField,
)
from oxide_batch.api.serializers.base import Input, K, Output, at, identifier, name
from oxide_batch.api.serializers.executions import (
    CONTROL_HELP,
    CarriesOwnerToken,
    WriteControlOutput,
)
from oxide_batch.api.shapes import FLOW_TARGET
from oxide_batch.domain.flow import (
    FlowDecisionRequest,
    FlowTarget,
    FlowTransitionKind,
    TerminalKind,
)
from oxide_batch.domain.names import NameKind


@extend_schema_field(FLOW_TARGET)
class FlowTargetField(JSONObjectField):
    """A node or a terminal (``FlowTarget.from_json`` checks it)."""


class FlowDecisionInput(CarriesOwnerToken):
    source_node_id = NameField(NameKind.NODE)
    source_step_execution_id = IdField(required=False, allow_null=True)
    kind = EnumField(FlowTransitionKind)
    observed_outcome = NameField(
        NameKind.EXIT_CODE, help_text="The exit code the decision observed."
    )
    target = FlowTargetField(help_text='{"node": "<id>"} or {"terminal": "COMPLETE"|"FAIL"|"STOP"}')
    plan_fingerprint = DigestField(help_text="The definition's manifest digest.")
    input_digest = DigestField()
    reused_decision_id = IdField(required=False, allow_null=True)

    def request_for(self, job_execution_id: int) -> FlowDecisionRequest:
        data = self.validated_data
        name("source_node_id", NameKind.NODE, data["source_node_id"])
        name("observed_outcome", NameKind.EXIT_CODE, data["observed_outcome"])
        for field, kind in (
            ("source_step_execution_id", K.STEP_EXECUTION),
            ("reused_decision_id", K.FLOW_DECISION),
        ):
            if data.get(field) is not None:
                identifier(field, kind, data[field])
        with at("target"):
            target = FlowTarget.from_json(data["target"])
        return FlowDecisionRequest(
            job_execution_id=job_execution_id,
            source_node_id=data["source_node_id"],
            kind=data["kind"],
            observed_outcome=data["observed_outcome"],
            target=target,
            plan_fingerprint=data["plan_fingerprint"],
            input_digest=data["input_digest"],
            source_step_execution_id=data.get("source_step_execution_id"),
            reused_decision_id=data.get("reused_decision_id"),
        )


class ReusableQuery(Input):
    node_id = NameField(NameKind.NODE)
    plan_fingerprint = DigestField()
    input_digest = DigestField()
    kind = EnumField(FlowTransitionKind)

    def to_domain(self) -> tuple[str, str, str, FlowTransitionKind]:
        data = self.validated_data
        node = name("node_id", NameKind.NODE, data["node_id"])
        return node, data["plan_fingerprint"], data["input_digest"], data["kind"]


class FlowTargetOutput(Output):
    node = serializers.CharField(required=False)
    terminal = EnumField(TerminalKind, required=False)

    def to_representation(self, instance: FlowTarget) -> dict[str, Any]:
        return instance.as_json()


class FlowDecisionOutput(Output):
    id = serializers.IntegerField()
    job_execution_id = serializers.IntegerField()
    sequence = serializers.IntegerField()
    source_node_id = serializers.CharField()
    source_step_execution_id = serializers.IntegerField(allow_null=True)
    kind = EnumField(FlowTransitionKind)
    observed_outcome = serializers.CharField()
    target = FlowTargetOutput()
    plan_fingerprint = serializers.CharField()
    input_digest = serializers.CharField()
    reused_decision_id = serializers.IntegerField(allow_null=True)
    decided_at = InstantField()
    control = WriteControlOutput(required=False, help_text=CONTROL_HELP)


class FlowDecisionListOutput(Output):
    results = FlowDecisionOutput(many=True, help_text="In sequence order.")


class ReusableOutput(Output):
    decision = FlowDecisionOutput(allow_null=True)
