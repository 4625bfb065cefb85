"""``api/v1/`` routes (contract §4.2; namespace ``oxide_batch:api``): runtimes and
readers, then the operator's (recovery, stop, abandon, holds, purge) and the
append-only audit lists."""

from __future__ import annotations

from django.urls import path, register_converter

from oxide_batch.api import views
from oxide_batch.api.converters import IdentifierConverter, NodeIdConverter, RuleNameConverter
from oxide_batch.api.docs import RedocDocsView, SchemaView, SwaggerDocsView

register_converter(IdentifierConverter, "batch_id")
register_converter(NodeIdConverter, "node_id")
register_converter(RuleNameConverter, "rule_name")

app_name = "api"

urlpatterns = [
    path("descriptor", views.DescriptorView.as_view(), name="descriptor"),
    path("definitions", views.DefinitionsView.as_view(), name="definitions"),
    path("definitions/upgrades", views.UpgradesView.as_view(), name="definition-upgrades"),
    path("instances", views.InstancesView.as_view(), name="instances"),
    path("instances/<batch_id:instance_id>", views.InstanceView.as_view(), name="instance"),
    path(
        "instances/<batch_id:instance_id>/executions",
        views.InstanceExecutionsView.as_view(),
        name="instance-executions",
    ),
    path(
        "instances/<batch_id:instance_id>/flow-steps/<node_id:node_id>",
        views.FlowStepView.as_view(),
        name="flow-step",
    ),
    path(
        "instances/<batch_id:instance_id>/flow-decisions/reusable",
        views.ReusableFlowDecisionView.as_view(),
        name="reusable-flow-decision",
    ),
    path("launches", views.LaunchesView.as_view(), name="launches"),
    path("executions", views.ExecutionsView.as_view(), name="executions"),
    path("executions/<batch_id:execution_id>", views.ExecutionView.as_view(), name="execution"),
    path(
        "executions/<batch_id:execution_id>/restart-plan",
        views.ExecutionRestartPlanView.as_view(),
        name="execution-restart-plan",
    ),
    path(
        "executions/<batch_id:execution_id>/transition",
        views.ExecutionTransitionView.as_view(),
        name="execution-transition",
    ),
    path(
        "executions/<batch_id:execution_id>/exit-status",
        views.ExecutionExitStatusView.as_view(),
        name="execution-exit-status",
    ),
    path(
        "executions/<batch_id:execution_id>/claim",
        views.ExecutionClaimView.as_view(),
        name="execution-claim",
    ),
    path(
        "executions/<batch_id:execution_id>/control",
        views.ExecutionControlView.as_view(),
        name="execution-control",
    ),
    path(
        "executions/<batch_id:execution_id>/steps",
        views.ExecutionStepsView.as_view(),
        name="execution-steps",
    ),
    path(
        "executions/<batch_id:execution_id>/flow-decisions",
        views.FlowDecisionsView.as_view(),
        name="flow-decisions",
    ),
    path("steps/<batch_id:step_id>", views.StepView.as_view(), name="step"),
    path(
        "steps/<batch_id:step_id>/transition",
        views.StepTransitionView.as_view(),
        name="step-transition",
    ),
    path(
        "steps/<batch_id:step_id>/exit-status",
        views.StepExitStatusView.as_view(),
        name="step-exit-status",
    ),
    path("steps/<batch_id:step_id>/checkpoint", views.CheckpointView.as_view(), name="checkpoint"),
    path(
        "steps/<batch_id:step_id>/partitions",
        views.PartitionPlanView.as_view(),
        name="partitions",
    ),
    path(
        "steps/<batch_id:step_id>/partitions/claim",
        views.PartitionClaimView.as_view(),
        name="partitions-claim",
    ),
    path(
        "steps/<batch_id:step_id>/partitions/restart",
        views.PartitionRestartView.as_view(),
        name="partitions-restart",
    ),
    path("steps/<batch_id:step_id>/aggregate", views.AggregateView.as_view(), name="aggregate"),
    path(
        "partitions/<batch_id:partition_id>/assign",
        views.PartitionAssignView.as_view(),
        name="partition-assign",
    ),
    path(
        "partitions/<batch_id:partition_id>/complete",
        views.PartitionCompleteView.as_view(),
        name="partition-complete",
    ),
    path(
        "executions/<batch_id:execution_id>/recovery-proposal",
        views.RecoveryProposalView.as_view(),
        name="recovery-proposal",
    ),
    path(
        "executions/<batch_id:execution_id>/recover",
        views.RecoverView.as_view(),
        name="execution-recover",
    ),
    path(
        "executions/<batch_id:execution_id>/stop",
        views.StopView.as_view(),
        name="execution-stop",
    ),
    path(
        "executions/<batch_id:execution_id>/abandon",
        views.AbandonView.as_view(),
        name="execution-abandon",
    ),
    path(
        "executions/<batch_id:execution_id>/lost-write/resolve",
        views.ResolveLostWriteView.as_view(),
        name="execution-lost-write-resolve",
    ),
    path("instances/<batch_id:instance_id>/hold", views.HoldView.as_view(), name="instance-hold"),
    path("purge/survey", views.PurgeSurveyView.as_view(), name="purge-survey"),
    path("purge/apply", views.PurgeApplyView.as_view(), name="purge-apply"),
    path(
        "audit/recovery-decisions",
        views.RecoveryDecisionsView.as_view(),
        name="audit-recovery-decisions",
    ),
    path(
        "audit/operator-requests",
        views.OperatorRequestsView.as_view(),
        name="audit-operator-requests",
    ),
    path(
        "audit/retention-records",
        views.RetentionRecordsView.as_view(),
        name="audit-retention-records",
    ),
    # Notifications (issue 41): rules, deliveries, deadlines.
    path("notifications/rules", views.RulesView.as_view(), name="notification-rules"),
    path(
        "notifications/rules/<rule_name:name>",
        views.NotificationRuleView.as_view(),
        name="notification-rule",
    ),
    path(
        "notifications/rules/<rule_name:name>/enable",
        views.RuleEnableView.as_view(),
        name="notification-rule-enable",
    ),
    path(
        "notifications/rules/<rule_name:name>/disable",
        views.RuleDisableView.as_view(),
        name="notification-rule-disable",
    ),
    path(
        "notifications/rules/<rule_name:name>/test",
        views.RuleTestView.as_view(),
        name="notification-rule-test",
    ),
    path(
        "notifications/deliveries",
        views.DeliveriesView.as_view(),
        name="notification-deliveries",
    ),
    path(
        "notifications/deliveries/<batch_id:delivery_id>/redeliver",
        views.RedeliverView.as_view(),
        name="notification-redeliver",
    ),
    path("notifications/deadlines", views.DeadlinesView.as_view(), name="deadlines"),
    path("schema/", SchemaView.as_view(), name="schema"),
    path("docs/", SwaggerDocsView.as_view(), name="docs"),
    path("redoc/", RedocDocsView.as_view(), name="redoc"),
]
