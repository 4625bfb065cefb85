"""``GET executions/{id}/restart-plan`` (issue 40): what a restart will do,
step by step — its shape for the OpenAPI document; the answer itself is
:func:`~oxide_batch.selectors.restart_plan.plan_document`'s."""

from __future__ import annotations

from rest_framework import serializers

from oxide_batch.api.fields import EnumField
from oxide_batch.api.serializers.base import Output
from oxide_batch.api.serializers.executions import StepCountsOutput
from oxide_batch.domain.restart_plan import PlanAction
from oxide_batch.domain.status import BatchStatus


class PlanRefusalOutput(Output):
    code = serializers.CharField(
        help_text=(
            "The 409 code the launch or the step would answer (`lost_write_unresolved`, "
            "`completed_instance`, `not_restartable`, `start_limit_exceeded`, …), or "
            "`superseded`: the execution is not its instance's latest attempt."
        )
    )
    detail = serializers.CharField(help_text="Why, in a sentence.")


class PlannedStepOutput(Output):
    step_name = serializers.CharField()
    node_id = serializers.CharField()
    action = EnumField(
        PlanAction,
        help_text=(
            "`skip` (COMPLETED or ABANDONED earlier), `rerun` (COMPLETED, but allowed to "
            "start if complete, or a partition's worker whose partition never completed: "
            "fresh, nothing taken over), `resume` (FAILED, STOPPED or left active: counts, "
            "checkpoint and context taken over), `refuse` (UNKNOWN until an operator "
            "decides, or the node's start limit reached), `run` (a flow node not reached)."
        ),
    )
    reason = serializers.CharField(help_text="Why, in a sentence.")
    refusal = PlanRefusalOutput(allow_null=True, help_text="The step's 409 when `refuse`.")
    from_step_execution_id = serializers.IntegerField(
        allow_null=True, help_text="The earlier row the rules decided from (null: not reached)."
    )
    from_execution_id = serializers.IntegerField(allow_null=True)
    from_attempt = serializers.IntegerField(allow_null=True)
    status = EnumField(BatchStatus, allow_null=True, help_text="The earlier row's status.")
    checkpoint = serializers.BooleanField(
        help_text="The step resumes from a checkpoint (never its payload)."
    )
    counts = StepCountsOutput(
        allow_null=True, help_text="The counts taken over (null unless `resume`)."
    )


class RestartPlanOutput(Output):
    """What the next attempt of the execution's instance would do with each
    step its attempts recorded (the newest row per step name), by the launch's
    own rules."""

    execution_id = serializers.IntegerField()
    restartable = serializers.BooleanField(
        help_text="A restart would be accepted now (`refusal` is null)."
    )
    refusal = PlanRefusalOutput(
        allow_null=True,
        help_text=(
            "Why the whole restart is refused. With `lost_write_unresolved` the steps are "
            "still listed: what the restart does once an operator resolved the marker."
        ),
    )
    assumes = serializers.CharField(
        help_text=(
            "`the same definition`: a launch naming another definition applies its "
            "upgrade edge's mapping, unknown before that launch."
        )
    )
    steps = PlannedStepOutput(many=True)
    steps_left_off = serializers.BooleanField(help_text="More steps than the plan lists (500).")
    unreached = PlannedStepOutput(
        many=True, help_text="Step nodes of the flow plan no attempt reached: action `run`."
    )
