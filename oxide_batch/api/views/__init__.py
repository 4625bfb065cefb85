"""The API's views: validate with an input serializer, run ONE unit of work of
the repository (or ONE call of an operator or retention service), render with
an output serializer. No rule lives here.

Reads of single rows go through the repository (or a selector when the
domain value lacks columns the representation shows); lists go through the
read-only selectors with keyset pagination.

Every view is importable from here (:mod:`oxide_batch.api.urls` routes them);
the modules hold them by resource: :mod:`.base` (what they share),
:mod:`.definitions`, :mod:`.instances`, :mod:`.executions`, :mod:`.steps`,
:mod:`.partitions`, :mod:`.flow`, :mod:`.operator`, :mod:`.retention`,
:mod:`.audit` and :mod:`.notifications`.
"""

from __future__ import annotations

from oxide_batch.api.views.audit import (
    AUDIT_ID_PARAMETERS,
    OperatorRequestsView,
    RecoveryDecisionsView,
    RetentionRecordsView,
)
from oxide_batch.api.views.base import (
    PAGE_PARAMETERS,
    PATH_IDS,
    READ,
    READ_RUN,
    REPLAY_DOC,
    RUN,
    STATE_ERRORS,
    TRANSITION_ERRORS,
    BatchView,
    K,
    actor_of,
    paginate,
)
from oxide_batch.api.views.definitions import DefinitionsView, DescriptorView, UpgradesView
from oxide_batch.api.views.executions import (
    ExecutionClaimView,
    ExecutionControlView,
    ExecutionExitStatusView,
    ExecutionRestartPlanView,
    ExecutionsView,
    ExecutionTransitionView,
    ExecutionView,
    InstanceExecutionsView,
    LaunchesView,
)
from oxide_batch.api.views.flow import FlowDecisionsView, FlowStepView, ReusableFlowDecisionView
from oxide_batch.api.views.instances import InstancesView, InstanceView
from oxide_batch.api.views.lost_write import ResolveLostWriteView
from oxide_batch.api.views.notifications import (
    DeadlinesView,
    DeliveriesView,
    NotificationRuleView,
    RedeliverView,
    RuleDisableView,
    RuleEnableView,
    RulesView,
    RuleTestView,
)
from oxide_batch.api.views.operator import (
    AbandonView,
    RecoverView,
    RecoveryProposalView,
    StopView,
    operator_response,
)
from oxide_batch.api.views.partitions import (
    AggregateView,
    PartitionAssignView,
    PartitionClaimView,
    PartitionCompleteView,
    PartitionPlanView,
    PartitionRestartView,
    partition_data,
    partitions_data,
)
from oxide_batch.api.views.retention import HoldView, PurgeApplyView, PurgeSurveyView
from oxide_batch.api.views.steps import (
    CheckpointView,
    ExecutionStepsView,
    StepExitStatusView,
    StepTransitionView,
    StepView,
)

__all__ = [
    "AUDIT_ID_PARAMETERS",
    "PAGE_PARAMETERS",
    "PATH_IDS",
    "READ",
    "READ_RUN",
    "REPLAY_DOC",
    "RUN",
    "STATE_ERRORS",
    "TRANSITION_ERRORS",
    "AbandonView",
    "AggregateView",
    "BatchView",
    "CheckpointView",
    "DeadlinesView",
    "DefinitionsView",
    "DeliveriesView",
    "DescriptorView",
    "ExecutionClaimView",
    "ExecutionControlView",
    "ExecutionExitStatusView",
    "ExecutionRestartPlanView",
    "ExecutionStepsView",
    "ExecutionTransitionView",
    "ExecutionView",
    "ExecutionsView",
    "FlowDecisionsView",
    "FlowStepView",
    "HoldView",
    "InstanceExecutionsView",
    "InstanceView",
    "InstancesView",
    "K",
    "LaunchesView",
    "NotificationRuleView",
    "OperatorRequestsView",
    "PartitionAssignView",
    "PartitionClaimView",
    "PartitionCompleteView",
    "PartitionPlanView",
    "PartitionRestartView",
    "PurgeApplyView",
    "PurgeSurveyView",
    "RecoverView",
    "RecoveryDecisionsView",
    "RecoveryProposalView",
    "RedeliverView",
    "ResolveLostWriteView",
    "RetentionRecordsView",
    "ReusableFlowDecisionView",
    "RuleDisableView",
    "RuleEnableView",
    "RuleTestView",
    "RulesView",
    "StepExitStatusView",
    "StepTransitionView",
    "StepView",
    "StopView",
    "UpgradesView",
    "actor_of",
    "operator_response",
    "paginate",
    "partition_data",
    "partitions_data",
]
