"""A small typed Python client of the runtime API (stdlib only, no Django).

>>> def load(step):
...     step.commit(read=100, written=100, checkpoint={"offset": 100})
>>> with client.job_run("nightly_import", {"business_date": "2026-07-29"}) as run:
...     run.run_step("load", load)    # skipped on a restart once it COMPLETED

is the high-level API (:mod:`oxide_batch.client.jobs`); underneath, one call
per request:

>>> client = RuntimeClient("http://127.0.0.1:8000", token="…")
>>> instance, execution = client.launch("nightly_import", {"business_date": "2026-07-29"})
>>> execution = client.start(execution)

``OperatorClient`` (a token of an operator) reads recovery proposals, recovers,
stops and abandons executions, places and releases holds, and reads the audit.

It raises the repository's own typed errors (``StaleVersion``,
``ExecutionAlreadyActive``, …), rebuilt from the problem's ``code`` and fields,
so a runtime can ``except StaleVersion`` whether it talks to the repository
in process or over HTTP. An operator past the throttle gets ``Throttled``
(``retry_after``: the seconds to wait). After ``CommitOutcomeUnknown`` it
re-reads before retrying: ``RuntimeClient.reconcile_*`` (or ``reconcile=True``)
apply the rule of :mod:`oxide_batch.client.reconcile`.
"""

from oxide_batch.client.chunks import (
    COMPLETED_WITH_SKIPS,
    ChunkStep,
    ReadFailure,
    RetryPolicy,
    SkipPolicy,
)
from oxide_batch.client.errors import (
    ApiError,
    ExecutionFenced,
    InvalidRequest,
    LostWrite,
    SkipLimitExceeded,
    StepFailed,
    StepSkipped,
    StopRequested,
    Throttled,
    error_from_problem,
)
from oxide_batch.client.jobs import JobRun
from oxide_batch.client.models import (
    Control,
    Definition,
    Execution,
    FlowDecision,
    HoldOutcome,
    Instance,
    Lease,
    OperatorOutcome,
    Partition,
    RecoveryProposal,
    Skip,
    SkipCounts,
    SkippedItem,
    Step,
    StepState,
)
from oxide_batch.client.operator import OperatorClient
from oxide_batch.client.reconcile import Outcome, Reconciliation, Superseded
from oxide_batch.client.runtime import RuntimeClient
from oxide_batch.client.steps import StepRun

__all__ = [
    "COMPLETED_WITH_SKIPS",
    "ApiError",
    "ChunkStep",
    "Control",
    "Definition",
    "Execution",
    "ExecutionFenced",
    "FlowDecision",
    "HoldOutcome",
    "Instance",
    "InvalidRequest",
    "JobRun",
    "Lease",
    "LostWrite",
    "OperatorClient",
    "OperatorOutcome",
    "Outcome",
    "Partition",
    "ReadFailure",
    "Reconciliation",
    "RecoveryProposal",
    "RetryPolicy",
    "RuntimeClient",
    "Skip",
    "SkipCounts",
    "SkipLimitExceeded",
    "SkipPolicy",
    "SkippedItem",
    "Step",
    "StepFailed",
    "StepRun",
    "StepSkipped",
    "StepState",
    "StopRequested",
    "Superseded",
    "Throttled",
    "error_from_problem",
]
