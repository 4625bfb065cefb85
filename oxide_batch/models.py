"""Django models of the batch metadata.

Only the repository adapter writes these rows, and only read-only selectors
and the admin read them. Every child row carries ``job_instance_id`` so the
tables can be distributed (and purged) by instance. Rules the domain enforces
are backed by database constraints where a constraint can say them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Length
from django.db.models.lookups import Exact, GreaterThanOrEqual, LessThanOrEqual

from oxide_batch.domain.flow import STEP_SOURCED, FlowTransitionKind, TerminalKind
from oxide_batch.domain.status import UNRESOLVED_STATUSES, BatchStatus, FailureCategory
from oxide_batch.domain.tokens import DIGEST_LENGTH, PREFIX_LENGTH

FLOW_KINDS = [kind.value for kind in FlowTransitionKind]
TERMINALS = [terminal.value for terminal in TerminalKind]
STEP_SOURCED_KINDS = sorted(kind.value for kind in STEP_SOURCED)
STATUS_CHOICES = [(status.value, status.value) for status in BatchStatus]
CATEGORY_CHOICES = [(category.value, category.value) for category in FailureCategory]
FINISHED = [status.value for status in BatchStatus if status.is_finished]
UNRESOLVED = sorted(status.value for status in UNRESOLVED_STATUSES)
# An execution whose lost-write marker no operator resolved yet (contract §2.5.14).
UNRESOLVED_LOST_WRITE = Q(lost_write__isnull=False, lost_write_resolution__isnull=True)
COUNT_COLUMNS = (
    "read_count",
    "processed_count",
    "written_count",
    "filtered_count",
    "committed_count",
    "rolled_back_count",
)


def _length_between(column: str, maximum: int, name: str) -> models.CheckConstraint:
    """``column`` holds 1..``maximum`` characters."""
    return models.CheckConstraint(
        condition=Q(
            GreaterThanOrEqual(Length(column), 1), LessThanOrEqual(Length(column), maximum)
        ),
        name=name,
    )


def _execution_constraints(prefix: str) -> list[models.BaseConstraint]:
    """Constraints shared by job and step executions (the metadata invariants)."""
    return [
        models.CheckConstraint(
            condition=Q(status__in=[s.value for s in BatchStatus]), name=f"{prefix}_status_valid"
        ),
        models.CheckConstraint(condition=Q(version__gte=0), name=f"{prefix}_version_nonneg"),
        *(
            models.CheckConstraint(condition=Q(**{f"{column}__gte": 0}), name=f"{prefix}_{column}")
            for column in COUNT_COLUMNS
        ),
        models.CheckConstraint(
            condition=Q(status__in=FINISHED, ended_at__isnull=False)
            | (~Q(status__in=FINISHED) & Q(ended_at__isnull=True)),
            name=f"{prefix}_end_time_matches_status",
        ),
        models.CheckConstraint(
            condition=Q(failure_category__isnull=True, failure_id__isnull=True)
            | Q(failure_category__isnull=False, failure_id__isnull=False, failure_id__gt=0),
            name=f"{prefix}_failure_pair",
        ),
        models.CheckConstraint(
            condition=~Q(status=BatchStatus.FAILED.value) | Q(failure_category__isnull=False),
            name=f"{prefix}_failed_has_failure",
        ),
        models.CheckConstraint(
            condition=Q(started_at__isnull=True) | Q(started_at__gte=F("created_at")),
            name=f"{prefix}_started_after_created",
        ),
        models.CheckConstraint(
            condition=Q(ended_at__isnull=True)
            | Q(started_at__isnull=True, ended_at__gte=F("created_at"))
            | Q(started_at__isnull=False, ended_at__gte=F("started_at")),
            name=f"{prefix}_ended_after_started",
        ),
        models.CheckConstraint(
            condition=Q(
                GreaterThanOrEqual(Length("exit_code"), 1),
                LessThanOrEqual(Length("exit_code"), 64),
            ),
            name=f"{prefix}_exit_code_length",
        ),
    ]


class CountFields(models.Model):
    """The six durable counters (executions and partitions)."""

    read_count = models.BigIntegerField(default=0)
    processed_count = models.BigIntegerField(default=0)
    written_count = models.BigIntegerField(default=0)
    filtered_count = models.BigIntegerField(default=0)
    committed_count = models.BigIntegerField(default=0)
    rolled_back_count = models.BigIntegerField(default=0)

    class Meta:
        abstract = True


class ExecutionFields(CountFields):
    """Columns job and step executions share."""

    status = models.CharField(max_length=9, choices=STATUS_CHOICES)
    exit_code = models.CharField(max_length=64)
    # NULL, not "", for "no failure": the pair (category, id) is NULL together.
    failure_category = models.CharField(  # noqa: DJ001
        max_length=32, choices=CATEGORY_CHOICES, null=True, blank=True
    )
    failure_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()
    version = models.BigIntegerField(default=0)

    class Meta:
        abstract = True


class JobDefinition(models.Model):
    """An immutable definition: a canonical manifest identified by its digest.

    ``job_name`` is NULL only for the built-in legacy definition (one row,
    created by a migration) that attempts launched without a definition use.
    """

    id = models.BigAutoField(primary_key=True)
    job_name = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    revision = models.CharField(max_length=128)
    manifest_format = models.PositiveSmallIntegerField()
    manifest_digest = models.CharField(max_length=64)
    manifest = models.TextField(help_text="canonical JSON (the digest is over these bytes)")
    registered_at = models.DateTimeField()

    class Meta:
        db_table = "ob_job_definition"
        constraints = [
            models.UniqueConstraint(fields=["job_name", "revision"], name="ob_definition_revision"),
            models.UniqueConstraint(
                fields=["job_name", "manifest_digest"], name="ob_definition_digest"
            ),
            # NULLs are distinct in the constraints above: one legacy row at most.
            models.UniqueConstraint(
                fields=["manifest_digest"],
                condition=Q(job_name__isnull=True),
                name="ob_definition_legacy_once",
            ),
            models.CheckConstraint(
                condition=Q(manifest_format__gte=1, manifest_format__lte=3),
                name="ob_definition_format",
            ),
            models.CheckConstraint(
                condition=Exact(Length("manifest_digest"), 64), name="ob_definition_digest_length"
            ),
        ]
        indexes = [models.Index(fields=["manifest_digest"], name="ob_definition_by_digest")]

    def __str__(self) -> str:
        return f"{self.job_name or '(legacy)'} {self.revision}"


class DefinitionUpgrade(models.Model):
    """A directed edge between two definitions of one job, with a step mapping."""

    id = models.BigAutoField(primary_key=True)
    job_name = models.CharField(max_length=128)
    upgrade_key = models.CharField(max_length=128)
    from_definition = models.ForeignKey(
        JobDefinition, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    to_definition = models.ForeignKey(JobDefinition, on_delete=models.PROTECT, related_name="+")
    step_mapping = models.TextField(help_text="canonical JSON object: source step → target step")
    registered_at = models.DateTimeField()

    class Meta:
        db_table = "ob_definition_upgrade"
        constraints = [
            models.UniqueConstraint(
                fields=["from_definition", "to_definition"], name="ob_upgrade_edge"
            ),
            models.CheckConstraint(
                condition=~Q(from_definition=F("to_definition")), name="ob_upgrade_not_self"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_name} upgrade {self.upgrade_key}"


class JobInstance(models.Model):
    """One logical job occurrence: job name + identifying parameters."""

    id = models.BigAutoField(primary_key=True)
    job_name = models.CharField(max_length=128)
    key_digest = models.CharField(max_length=64, help_text="SHA-256 of the version-1 key")
    # [{"name", "type", "value"}] in name byte order; integers as decimal strings
    # so u64 values survive every JSON implementation.
    identifying_parameters = models.JSONField(default=list)
    created_at = models.DateTimeField()
    # The retention hold (at most one): all three set, or none.
    hold_actor = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    hold_user_id = models.BigIntegerField(null=True, blank=True)
    hold_reason_code = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    hold_placed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "ob_job_instance"
        constraints = [
            models.UniqueConstraint(fields=["job_name", "key_digest"], name="ob_instance_key"),
            models.CheckConstraint(
                condition=Exact(Length("key_digest"), 64), name="ob_instance_digest_length"
            ),
            models.CheckConstraint(
                condition=Q(
                    hold_actor__isnull=True,
                    hold_reason_code__isnull=True,
                    hold_placed_at__isnull=True,
                )
                | Q(
                    hold_actor__isnull=False,
                    hold_reason_code__isnull=False,
                    hold_placed_at__isnull=False,
                ),
                name="ob_instance_hold_complete",
            ),
        ]
        indexes = [
            models.Index(fields=["job_name", "-id"], name="ob_instance_job_name"),
            models.Index(fields=["-created_at"], name="ob_instance_created"),
        ]

    def __str__(self) -> str:
        return f"{self.job_name} #{self.pk}"


class JobExecution(ExecutionFields):
    """One launch or restart attempt of an instance."""

    id = models.BigAutoField(primary_key=True)
    job_instance = models.ForeignKey(
        JobInstance, on_delete=models.PROTECT, related_name="executions", db_index=False
    )
    job_name = models.CharField(max_length=128, help_text="copied from the instance")
    attempt = models.PositiveIntegerField()
    restart_of = models.ForeignKey(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    definition = models.ForeignKey(JobDefinition, on_delete=models.PROTECT, related_name="+")
    upgrade = models.ForeignKey(
        DefinitionUpgrade,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="the upgrade edge this attempt was launched through",
    )
    # Operator stop request (who/when) and the owner's evidence; neither changes
    # the version. The owner token is never shown, only whether one is recorded.
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    stop_requested_by = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    owner_token = models.BinaryField(max_length=16, null=True, blank=True)
    # The user whose token claimed the execution: once set, only that user's
    # runtime writes are accepted on it and everything under it (contract §2.5.2).
    # An id, not a foreign key: the row outlives the user's account.
    owner_user_id = models.BigIntegerField(null=True, blank=True)
    last_observed_at = models.DateTimeField(null=True, blank=True)
    # The latest runtime write or owner observation (contract §2.5.3 activity), for the
    # indexed "unresolved" query; step writes are added when a proposal is made.
    last_activity_at = models.DateTimeField(null=True, blank=True)
    # The recovery decision that resolved this execution (contract §2.5.6): the runtime
    # is fenced from it (no audit row is referenced by a foreign key).
    recovery_decision_id = models.BigIntegerField(null=True, blank=True)
    # When it became FAILED (a runtime's transition or a recovery), kept when an
    # abandon follows: a failure that happened stays a fact of the history.
    failed_at = models.DateTimeField(null=True, blank=True)
    # When it moved to STOPPING (the runtime acknowledged a stop), kept after it
    # stopped: the case file's timeline shows STARTED → STOPPING → STOPPED.
    stopping_at = models.DateTimeField(null=True, blank=True)
    # A write refused because its expected version was ahead of this row's (a
    # lost acknowledged write, e.g. after a failover): when, and the versions.
    # It counts as the unknown-commit marker until an operator decides.
    lost_write = models.JSONField(null=True, blank=True)
    # The operator's decision on that marker (contract §2.5.14): when, who, why,
    # the note and the operation id; null while the marker is unresolved.
    lost_write_resolution = models.JSONField(null=True, blank=True)
    # The lease TTL the owner's claim was granted (contract §2.5.3): every process
    # computes the lease from it, whatever its own OXIDE_BATCH_LEASE_TTL says.
    lease_ttl = models.DurationField(null=True, blank=True)
    # Who runs it (decision 310): what the runtime said of itself, written with
    # the claim in the same statement; no runtime write moves them after it.
    worker_host = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    worker_pid = models.IntegerField(null=True, blank=True)
    worker_name = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    worker_client = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001

    class Meta:
        db_table = "ob_job_execution"
        constraints = [
            *_execution_constraints("ob_execution"),
            models.UniqueConstraint(
                fields=["job_instance", "attempt"], name="ob_execution_attempt"
            ),
            models.CheckConstraint(condition=Q(attempt__gte=1), name="ob_execution_attempt_pos"),
            models.CheckConstraint(
                condition=Q(stop_requested_at__isnull=True, stop_requested_by__isnull=True)
                | Q(stop_requested_at__isnull=False, stop_requested_by__isnull=False),
                name="ob_execution_stop_pair",
            ),
            # Backs up the instance lock: one unresolved attempt per instance.
            models.UniqueConstraint(
                fields=["job_instance"],
                condition=Q(status__in=UNRESOLVED),
                name="ob_execution_one_unresolved",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "-created_at"], name="ob_execution_status"),
            models.Index(fields=["job_name", "-created_at"], name="ob_execution_job_name"),
            models.Index(fields=["-created_at"], name="ob_execution_created"),
            models.Index(fields=["ended_at"], name="ob_execution_ended"),
            # The unresolved rows, keyed by id: an index on a column every
            # runtime write moves (last_activity_at) would make each of those
            # writes a non-HOT update (decision 170).
            models.Index(
                fields=["id"],
                condition=Q(status__in=UNRESOLVED),
                name="ob_execution_unresolved",
            ),
            models.Index(
                fields=["failed_at"],
                condition=Q(failed_at__isnull=False),
                name="ob_execution_failed",
            ),
            # The few executions with an unresolved lost write, by instance: a
            # launch's gate and the gauge (no runtime write moves these columns).
            models.Index(
                fields=["job_instance"],
                condition=UNRESOLVED_LOST_WRITE,
                name="ob_execution_lost_write",
            ),
            # The console's search by host and by worker name, newest first
            # (decision 311): partial, on columns only a claim writes, so the
            # runtime's writes stay HOT (decision 170).
            models.Index(
                fields=["worker_host", "-created_at"],
                condition=Q(worker_host__isnull=False),
                name="ob_execution_worker_host",
            ),
            models.Index(
                fields=["worker_name", "-created_at"],
                condition=Q(worker_name__isnull=False),
                name="ob_execution_worker_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_name} attempt {self.attempt} (#{self.pk})"


# What a timeline of an execution's steps draws of each (the case file's, the
# dashboard's): the step, its status and its times.
STEP_TIMELINE = ("id", "step_name", "status", "created_at", "started_at", "ended_at")


class StepExecution(ExecutionFields):
    """One attempt of a named step within a job execution."""

    id = models.BigAutoField(primary_key=True)
    job_instance = models.ForeignKey(
        JobInstance, on_delete=models.PROTECT, related_name="step_executions"
    )
    job_execution = models.ForeignKey(
        JobExecution, on_delete=models.PROTECT, related_name="steps", db_index=False
    )
    step_name = models.CharField(max_length=128)
    node_id = models.CharField(max_length=128)
    # The recovery decision that resolved this step to FAILED (contract §2.5.6): every
    # later runtime write to it is refused.
    recovery_decision_id = models.BigIntegerField(null=True, blank=True)
    # The runtime's latest write to the step (contract §2.5.3's step activity): a
    # recovery, which moves ``updated_at`` with the version, never moves it.
    last_activity_at = models.DateTimeField(null=True, blank=True)
    # Envelopes as canonical JSON text with a SHA-256 checksum, verified on read.
    checkpoint = models.TextField(null=True, blank=True)  # noqa: DJ001
    checkpoint_checksum = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    context = models.TextField(null=True, blank=True)  # noqa: DJ001
    context_checksum = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    # The worker that created it (a partition worker's step runs elsewhere than
    # its execution's owner, decision 310); written by the step's insert only.
    worker_host = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    worker_pid = models.IntegerField(null=True, blank=True)
    worker_name = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    worker_client = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    # A claimed partition worker's own ownership (issue 43, decision 461): the
    # claimant's owner token (never shown), the lease TTL its claim was granted
    # (the lease expires that long after ``last_activity_at``) and the partition
    # it was claimed for (an id, not a foreign key: the purge order). NULL on
    # every other step.
    owner_token = models.BinaryField(max_length=16, null=True, blank=True)
    lease_ttl = models.DurationField(null=True, blank=True)
    claimed_partition_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "ob_step_execution"
        constraints = [
            *_execution_constraints("ob_step"),
            models.UniqueConstraint(fields=["job_execution", "step_name"], name="ob_step_name"),
            models.UniqueConstraint(fields=["job_execution", "node_id"], name="ob_step_node_once"),
            models.CheckConstraint(
                condition=Q(checkpoint__isnull=True, checkpoint_checksum__isnull=True)
                | Q(checkpoint__isnull=False, checkpoint_checksum__isnull=False),
                name="ob_step_checkpoint_pair",
            ),
            models.CheckConstraint(
                condition=Q(context__isnull=True, context_checksum__isnull=True)
                | Q(context__isnull=False, context_checksum__isnull=False),
                name="ob_step_context_pair",
            ),
        ]
        indexes = [
            models.Index(fields=["job_instance", "node_id", "-id"], name="ob_step_node"),
            models.Index(fields=["job_instance", "step_name", "-id"], name="ob_step_by_name"),
            models.Index(fields=["status", "-created_at"], name="ob_step_status"),
            # The watchdog's live claimed workers (decision 463): partial, on
            # columns no chunk commit moves, so chunk commits stay HOT (decision 170).
            models.Index(
                fields=["id"],
                condition=Q(owner_token__isnull=False, status__in=["STARTING", "STARTED"]),
                name="ob_step_worker_live",
            ),
            # A partition's workers, current and earlier (the console's step page).
            models.Index(
                fields=["claimed_partition_id", "id"],
                condition=Q(claimed_partition_id__isnull=False),
                name="ob_step_claimed_partition",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.step_name} (#{self.pk})"


class FailureDetail(models.Model):
    """What a runtime said about a failure (the exception's type, message and
    traceback), scrubbed and bounded (contract §2, "Failure detail"): apart
    from the execution and step rows, so the hot path never reads it. Written
    by the transition that records the failure; deleted with its instance by
    the purge; kept whatever happens to the execution after."""

    id = models.BigAutoField(primary_key=True)
    job_instance_id = models.BigIntegerField()
    job_execution = models.ForeignKey(
        JobExecution, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    # Null: the job execution's own failure; set: one of its steps'.
    step_execution = models.ForeignKey(
        "StepExecution",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    failure_id = models.BigIntegerField()
    type = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    message = models.TextField(null=True, blank=True)  # noqa: DJ001
    traceback = models.TextField(null=True, blank=True)  # noqa: DJ001
    type_truncated = models.BooleanField(default=False)
    message_truncated = models.BooleanField(default=False)
    traceback_truncated = models.BooleanField(default=False)
    recorded_at = models.DateTimeField()

    class Meta:
        db_table = "ob_failure_detail"
        indexes = [
            models.Index(fields=["job_execution", "-id"], name="ob_detail_execution"),
            models.Index(
                fields=["step_execution", "-id"],
                condition=Q(step_execution__isnull=False),
                name="ob_detail_step",
            ),
            models.Index(fields=["job_instance_id"], name="ob_detail_instance"),
            # The failure views' search by exception type (decision 307).
            models.Index(fields=["type", "job_execution"], name="ob_detail_type"),
        ]

    def __str__(self) -> str:
        return f"failure {self.failure_id} detail ({self.type})"


class StepPartition(CountFields):
    """One partition of a partitioned step's plan."""

    id = models.BigAutoField(primary_key=True)
    job_instance = models.ForeignKey(JobInstance, on_delete=models.PROTECT, related_name="+")
    step_execution = models.ForeignKey(
        StepExecution, on_delete=models.PROTECT, related_name="partitions", db_index=False
    )
    worker_step_execution = models.ForeignKey(
        StepExecution, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    partition_key = models.CharField(max_length=128)
    ordinal = models.PositiveIntegerField()
    status = models.CharField(max_length=9, choices=STATUS_CHOICES)
    exit_code = models.CharField(max_length=64)
    version = models.BigIntegerField(default=0)
    context = models.TextField(null=True, blank=True)  # noqa: DJ001
    context_checksum = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    # How many times a claim gave it to a new worker after a failed one, in
    # this attempt (issue 43, decision 464).
    retries = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "ob_step_partition"
        constraints = [
            models.UniqueConstraint(
                fields=["step_execution", "partition_key"], name="ob_partition_key"
            ),
            models.UniqueConstraint(
                fields=["step_execution", "ordinal"], name="ob_partition_ordinal"
            ),
            models.CheckConstraint(
                condition=Q(ordinal__gte=1, ordinal__lte=1024), name="ob_partition_ordinal_range"
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in BatchStatus]),
                name="ob_partition_status_valid",
            ),
            models.CheckConstraint(condition=Q(version__gte=0), name="ob_partition_version"),
            *(
                models.CheckConstraint(
                    condition=Q(**{f"{column}__gte": 0}), name=f"ob_partition_{column}"
                )
                for column in COUNT_COLUMNS
            ),
            # STARTING exactly when unassigned.
            models.CheckConstraint(
                condition=Q(status="STARTING", worker_step_execution__isnull=True)
                | (~Q(status="STARTING") & Q(worker_step_execution__isnull=False)),
                name="ob_partition_assignment",
            ),
            models.CheckConstraint(
                condition=Q(context__isnull=True, context_checksum__isnull=True)
                | Q(context__isnull=False, context_checksum__isnull=False),
                name="ob_partition_context_pair",
            ),
        ]

    def __str__(self) -> str:
        return f"partition {self.ordinal} of step {self.step_execution_id}"


# A flow decision's transition, as the console lists it: its place in the
# execution's sequence, the node it left, the kind, the outcome it saw, and
# where it went (a node, or a terminal).
FLOW_TRANSITION = (
    "sequence",
    "source_node_id",
    "kind",
    "observed_outcome",
    "target_node_id",
    "terminal",
)


class FlowDecision(models.Model):
    """Append-only record of one flow transition taken by an execution."""

    id = models.BigAutoField(primary_key=True)
    job_instance = models.ForeignKey(JobInstance, on_delete=models.PROTECT, related_name="+")
    job_execution = models.ForeignKey(
        JobExecution, on_delete=models.PROTECT, related_name="flow_decisions", db_index=False
    )
    sequence = models.PositiveIntegerField()
    source_node_id = models.CharField(max_length=128)
    source_step_execution = models.ForeignKey(
        StepExecution, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    kind = models.CharField(max_length=24, choices=[(k, k) for k in FLOW_KINDS])
    observed_outcome = models.CharField(max_length=64)
    target_node_id = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    terminal = models.CharField(  # noqa: DJ001
        max_length=8, null=True, blank=True, choices=[(t, t) for t in TERMINALS]
    )
    plan_fingerprint = models.CharField(max_length=64)
    input_digest = models.CharField(max_length=64)
    reused_decision = models.ForeignKey(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField()

    class Meta:
        db_table = "ob_flow_decision"
        constraints = [
            models.UniqueConstraint(
                fields=["job_execution", "sequence"], name="ob_flow_decision_sequence"
            ),
            models.UniqueConstraint(
                fields=["job_execution", "source_node_id"], name="ob_flow_decision_source_once"
            ),
            models.CheckConstraint(condition=Q(sequence__gte=1), name="ob_flow_sequence_pos"),
            models.CheckConstraint(
                condition=Q(target_node_id__isnull=False, terminal__isnull=True)
                | Q(target_node_id__isnull=True, terminal__isnull=False),
                name="ob_flow_one_target",
            ),
            models.CheckConstraint(condition=Q(kind__in=FLOW_KINDS), name="ob_flow_kind_valid"),
            models.CheckConstraint(
                condition=Q(terminal__isnull=True) | Q(terminal__in=TERMINALS),
                name="ob_flow_terminal_valid",
            ),
            # The plan check refuses a step-sourced decision without its step.
            models.CheckConstraint(
                condition=~Q(kind__in=STEP_SOURCED_KINDS) | Q(source_step_execution__isnull=False),
                name="ob_flow_step_sourced_has_step",
            ),
            # Character bounds: validated names are 1..N bytes, so 1..N characters
            # (SQLite does not enforce max_length itself).
            _length_between("source_node_id", 128, "ob_flow_source_node_length"),
            _length_between("observed_outcome", 64, "ob_flow_outcome_length"),
            models.CheckConstraint(
                condition=Q(target_node_id__isnull=True)
                | Q(
                    GreaterThanOrEqual(Length("target_node_id"), 1),
                    LessThanOrEqual(Length("target_node_id"), 128),
                ),
                name="ob_flow_target_node_length",
            ),
            models.CheckConstraint(
                condition=Exact(Length("plan_fingerprint"), 64),
                name="ob_flow_fingerprint_length",
            ),
            models.CheckConstraint(
                condition=Exact(Length("input_digest"), 64), name="ob_flow_input_digest_length"
            ),
        ]
        indexes = [
            models.Index(
                fields=["job_instance", "source_node_id", "plan_fingerprint", "input_digest"],
                name="ob_flow_reusable",
            )
        ]

    def __str__(self) -> str:
        return f"decision {self.sequence} of execution {self.job_execution_id}"


class AppendOnlyError(Exception):
    """An audit row was about to be changed or deleted outside audit pruning."""


class AuditQuerySet(models.QuerySet[Any]):
    """Refuses bulk updates and deletes; only :meth:`prune_before` deletes."""

    def update(self, **kwargs: Any) -> int:
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only")

    def prune(self) -> int:
        """The explicit audit-pruning path: a set-based DELETE (PostgreSQL's
        trigger lets it through only with ``oxide_batch.audit_prune`` on)."""
        return int(self._raw_delete(self.db))


class AuditModel(models.Model):
    """Append-only audit rows: the model refuses updates and deletes (SQLite's
    guard); on PostgreSQL a trigger refuses them below the ORM as well."""

    objects = AuditQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnlyError(f"{type(self).__name__} rows are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError(f"{type(self).__name__} rows are append-only")


class RecoveryDecision(AuditModel):
    """Append-only audit of one recovery. References ids, not cascading foreign
    keys, so it outlives a purge of what it describes."""

    id = models.BigAutoField(primary_key=True)
    job_instance_id = models.BigIntegerField()
    job_execution_id = models.BigIntegerField()
    execution_version = models.BigIntegerField()
    prior_status = models.CharField(max_length=9, choices=STATUS_CHOICES)
    resulting_status = models.CharField(max_length=9, choices=STATUS_CHOICES)
    reason_code = models.CharField(max_length=64)
    operator_reference = models.CharField(max_length=128)
    operator_user_id = models.BigIntegerField(null=True, blank=True)
    evidence_digest = models.CharField(max_length=64)
    decided_at = models.DateTimeField()
    # The unfinished steps this decision resolved to FAILED (ids, ascending).
    resolved_step_ids = models.JSONField(default=list, blank=True)
    # Why it was allowed (unknown_status, inactive, lease_expired,
    # operator_override; NULL before schema 5) and the override's note.
    eligibility = models.CharField(max_length=24, null=True, blank=True)  # noqa: DJ001
    override_note = models.TextField(null=True, blank=True)  # noqa: DJ001
    # The evidence it was taken on, with its times (NULL before schema 6).
    evidence = models.JSONField(null=True, blank=True)

    class Meta:
        db_table = "ob_recovery_decision"
        constraints = [
            models.UniqueConstraint(
                fields=["job_execution_id", "execution_version"], name="ob_recovery_once"
            ),
            models.CheckConstraint(
                condition=Q(prior_status__in=UNRESOLVED), name="ob_recovery_prior_status"
            ),
            models.CheckConstraint(
                condition=Q(resulting_status__in=["FAILED", "ABANDONED"]),
                name="ob_recovery_resulting_status",
            ),
            models.CheckConstraint(
                condition=Exact(Length("evidence_digest"), 64), name="ob_recovery_digest_length"
            ),
        ]
        indexes = [models.Index(fields=["-decided_at"], name="ob_recovery_decided")]

    def __str__(self) -> str:
        return f"recovery of execution {self.job_execution_id} at version {self.execution_version}"


class WorkerRecovery(AuditModel):
    """Append-only audit of one claimed partition worker's recovery (issue 43,
    decision 465): its lease expired, the watchdog failed the worker step and
    fenced its token; the partition became claimable again (or, over the retry
    limit, the parent step failed). One per worker step. Ids, not foreign keys."""

    id = models.BigAutoField(primary_key=True)
    job_instance_id = models.BigIntegerField()
    job_execution_id = models.BigIntegerField()
    step_execution_id = models.BigIntegerField(help_text="the partitioned parent step")
    worker_step_execution_id = models.BigIntegerField()
    worker_step_version = models.BigIntegerField()
    partition_id = models.BigIntegerField()
    partition_key = models.CharField(max_length=128)
    retries = models.PositiveIntegerField()
    prior_status = models.CharField(max_length=9, choices=STATUS_CHOICES)
    reason_code = models.CharField(max_length=64)
    actor = models.CharField(max_length=128)
    # The evidence it was taken on: the worker's last activity, TTL, lease end, who it was.
    evidence = models.JSONField()
    # The parent step failed with it: the partition was over the retry limit.
    parent_failed = models.BooleanField(default=False)
    decided_at = models.DateTimeField()

    class Meta:
        db_table = "ob_worker_recovery"
        constraints = [
            models.UniqueConstraint(
                fields=["worker_step_execution_id"], name="ob_worker_recovery_once"
            ),
        ]
        indexes = [
            models.Index(fields=["job_execution_id", "-id"], name="ob_worker_recovery_exec"),
            models.Index(fields=["partition_id", "-id"], name="ob_worker_recovery_part"),
        ]

    def __str__(self) -> str:
        return f"recovery of worker step {self.worker_step_execution_id}"


OPERATOR_ACTIONS = ["LAUNCH", "RESTART", "STOP", "ABANDON", "RECOVER", "RESOLVE_LOST_WRITE"]
RETENTION_ACTIONS = ["HOLD", "RELEASE_HOLD", "APPLY_PURGE"]
# The columns an audited request's row (an operator request, a retention record)
# begins with: which request it was (``action``, ``operation_id``), who asked and why.
REQUEST_COLUMNS = ("id", "action", "operation_id", "actor", "actor_user_id", "reason_code")
PURGE_KINDS = (
    "flow_decisions",
    "step_partitions",
    "step_executions",
    "job_executions",
    "job_instances",
)


class OperatorRequest(AuditModel):
    """Append-only audit of one operator action (applied or rejected).

    ``(action, operation_id)`` is unique: a repeated request with the same
    request digest replays this row; another digest is ``operation_id_conflict``.
    """

    id = models.BigAutoField(primary_key=True)
    action = models.CharField(max_length=32, choices=[(a, a) for a in OPERATOR_ACTIONS])
    operation_id = models.CharField(max_length=64)
    actor = models.CharField(max_length=128)
    actor_user_id = models.BigIntegerField(null=True, blank=True)
    reason_code = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    request_digest = models.CharField(max_length=64)
    job_instance_id = models.BigIntegerField(null=True, blank=True)
    job_execution_id = models.BigIntegerField(null=True, blank=True)
    observed_version = models.BigIntegerField(null=True, blank=True)
    prior_status = models.CharField(  # noqa: DJ001
        max_length=9, choices=STATUS_CHOICES, null=True, blank=True
    )
    result_status = models.CharField(  # noqa: DJ001
        max_length=9, choices=STATUS_CHOICES, null=True, blank=True
    )
    outcome = models.CharField(
        max_length=8, choices=[("APPLIED", "APPLIED"), ("REJECTED", "REJECTED")]
    )
    changed = models.BooleanField(default=False)
    rejection_code = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    # The refusal's structured fields, so a replay answers the same problem.
    rejection_details = models.JSONField(null=True, blank=True)
    requested_at = models.DateTimeField()

    class Meta:
        db_table = "ob_operator_request"
        constraints = [
            models.UniqueConstraint(fields=["action", "operation_id"], name="ob_operator_once"),
            models.CheckConstraint(
                condition=Q(outcome="APPLIED", rejection_code__isnull=True)
                | Q(outcome="REJECTED", rejection_code__isnull=False),
                name="ob_operator_rejection_code",
            ),
            models.CheckConstraint(
                condition=Exact(Length("request_digest"), 64), name="ob_operator_digest_length"
            ),
        ]
        indexes = [
            models.Index(fields=["job_execution_id", "-id"], name="ob_operator_execution"),
            models.Index(fields=["-requested_at"], name="ob_operator_requested"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.operation_id} ({self.outcome})"


class RetentionRecord(AuditModel):
    """Append-only audit of a hold, a release or one applied purge batch."""

    id = models.BigAutoField(primary_key=True)
    action = models.CharField(max_length=16, choices=[(a, a) for a in RETENTION_ACTIONS])
    operation_id = models.CharField(max_length=64)
    actor = models.CharField(max_length=128)
    actor_user_id = models.BigIntegerField(null=True, blank=True)
    reason_code = models.CharField(max_length=64)
    request_digest = models.CharField(max_length=64)
    job_instance_id = models.BigIntegerField(null=True, blank=True)
    plan_digest = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    batch_bound = models.PositiveIntegerField(null=True, blank=True)
    deleted_flow_decisions = models.BigIntegerField(default=0)
    deleted_step_partitions = models.BigIntegerField(default=0)
    deleted_step_executions = models.BigIntegerField(default=0)
    deleted_job_executions = models.BigIntegerField(default=0)
    deleted_job_instances = models.BigIntegerField(default=0)
    changed = models.BooleanField(default=False)
    # A refusal by a rule is recorded too (REJECTED, with the problem's code and
    # fields, so a replay answers the same problem); ``applied_at`` is then the
    # time of the refusal.
    outcome = models.CharField(
        max_length=8,
        choices=[("APPLIED", "APPLIED"), ("REJECTED", "REJECTED")],
        default="APPLIED",
    )
    rejection_code = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    rejection_details = models.JSONField(null=True, blank=True)
    applied_at = models.DateTimeField()

    class Meta:
        db_table = "ob_retention_record"
        constraints = [
            models.UniqueConstraint(fields=["action", "operation_id"], name="ob_retention_once"),
            models.CheckConstraint(
                condition=Q(outcome="APPLIED", rejection_code__isnull=True)
                | Q(outcome="REJECTED", rejection_code__isnull=False),
                name="ob_retention_rejection_code",
            ),
            models.CheckConstraint(
                condition=Q(
                    action="APPLY_PURGE",
                    plan_digest__isnull=False,
                    batch_bound__gte=1,
                    batch_bound__lte=1000,
                )
                | (
                    ~Q(action="APPLY_PURGE") & Q(plan_digest__isnull=True, batch_bound__isnull=True)
                ),
                name="ob_retention_purge_fields",
            ),
        ]
        indexes = [
            models.Index(fields=["job_instance_id", "-id"], name="ob_retention_instance"),
            models.Index(fields=["-applied_at"], name="ob_retention_applied"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.operation_id}"


class SchemaVersion(models.Model):
    """One row: the schema level the migrations applied (compared with the code's)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    version = models.PositiveIntegerField()
    installed_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "ob_schema_version"
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="ob_schema_version_singleton")
        ]

    def __str__(self) -> str:
        return f"schema version {self.version}"


class ApiToken(models.Model):
    """An API token of a user, kept as its lookup prefix and its SHA-256 digest
    (``oxide_batch.domain.tokens``): a dump of this table authenticates no one.

    Made by ``manage.py batch_token create`` (the only time the token is
    shown); revoked, never deleted, so the list keeps what existed. Its use is
    not recorded: a write on every request is what the hot path cannot afford.
    """

    id = models.BigAutoField(primary_key=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=64)
    key_prefix = models.CharField(max_length=PREFIX_LENGTH, unique=True)
    digest = models.CharField(max_length=DIGEST_LENGTH)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Shell-style globs on job names the token is limited to (contract §4.1); NULL:
    # every job.
    job_patterns = models.JSONField(null=True, blank=True)

    class Meta:
        db_table = "ob_api_token"
        verbose_name = "API token"
        constraints = [
            models.CheckConstraint(
                condition=Exact(Length("key_prefix"), PREFIX_LENGTH), name="ob_api_token_prefix"
            ),
            models.CheckConstraint(
                condition=Exact(Length("digest"), DIGEST_LENGTH), name="ob_api_token_digest"
            ),
            _length_between("name", 64, "ob_api_token_name_length"),
            models.CheckConstraint(
                condition=Q(expires_at__isnull=True) | Q(expires_at__gt=F("created_at")),
                name="ob_api_token_expires_after_created",
            ),
            models.CheckConstraint(
                condition=Q(revoked_at__isnull=True) | Q(revoked_at__gte=F("created_at")),
                name="ob_api_token_revoked_after_created",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key_prefix}… ({self.name})"


# -- notifications (issue 41; docs/notifications.md) ----------------------------------------

NOTIFICATION_DESTINATIONS = ["webhook", "slack", "email"]
DELIVERY_STATES = ["pending", "delivered", "dead"]


class NotificationEvent(models.Model):
    """The outbox: one row per event, inserted in the transaction of the change
    it tells of (``repository/outbox.py``). Ids, not foreign keys: an event
    outlives nothing it names but is never blocked by a purge either.
    ``dispatched_at``: when its deliveries were made (one per matching rule;
    none when no rule wants it — settled at once)."""

    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=40)
    job_name = models.CharField(max_length=128)
    job_instance_id = models.BigIntegerField(null=True, blank=True)
    job_execution_id = models.BigIntegerField(null=True, blank=True)
    status = models.CharField(max_length=9, blank=True)
    occurred_at = models.DateTimeField()
    data = models.JSONField(default=dict)
    dispatched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "ob_notification_event"
        indexes = [
            models.Index(
                fields=["id"],
                condition=Q(dispatched_at__isnull=True),
                name="ob_notif_event_undispatched",
            ),
            models.Index(fields=["job_execution_id"], name="ob_notif_event_execution"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} of execution {self.job_execution_id}"


class NotificationRule(models.Model):
    """Who hears what: job-name globs × event kinds × one destination, whose
    URL, secret or addresses are stored encrypted (``destination_sealed``,
    Fernet) and never shown again; ``destination_hint`` is what may be shown."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=64, unique=True)
    job_patterns = models.JSONField()
    kinds = models.JSONField()
    destination = models.CharField(
        max_length=8, choices=[(d, d) for d in NOTIFICATION_DESTINATIONS]
    )
    destination_sealed = models.TextField()
    destination_hint = models.CharField(max_length=200)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "ob_notification_rule"
        constraints = [
            models.CheckConstraint(
                condition=Q(destination__in=NOTIFICATION_DESTINATIONS),
                name="ob_notif_rule_destination",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class NotificationDelivery(models.Model):
    """One (event, rule) delivery: ``webhook_id`` is its stable id, repeated by
    every attempt; a claim is a lease (``claimed_until``) with its token."""

    id = models.BigAutoField(primary_key=True)
    event = models.ForeignKey(
        NotificationEvent, on_delete=models.CASCADE, related_name="deliveries"
    )
    rule = models.ForeignKey(NotificationRule, on_delete=models.CASCADE, related_name="deliveries")
    webhook_id = models.CharField(max_length=40, unique=True)
    state = models.CharField(max_length=9, choices=[(s, s) for s in DELIVERY_STATES])
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    claim = models.CharField(max_length=32, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField()
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "ob_notification_delivery"
        verbose_name_plural = "notification deliveries"
        constraints = [
            models.UniqueConstraint(fields=["event", "rule"], name="ob_notif_delivery_once"),
            models.CheckConstraint(
                condition=Q(state__in=DELIVERY_STATES), name="ob_notif_delivery_state"
            ),
            models.CheckConstraint(condition=Q(attempts__gte=0), name="ob_notif_attempts"),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(state="pending"),
                name="ob_notif_delivery_due",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.webhook_id} ({self.state})"


class NotificationRuleChange(AuditModel):
    """Append-only audit of every change to a rule (never its secret or URL)."""

    id = models.BigAutoField(primary_key=True)
    rule_id = models.BigIntegerField(null=True, blank=True)
    rule_name = models.CharField(max_length=64)
    action = models.CharField(max_length=16)
    actor = models.CharField(max_length=128)
    actor_user_id = models.BigIntegerField(null=True, blank=True)
    details = models.JSONField(default=dict)
    changed_at = models.DateTimeField()

    class Meta:
        db_table = "ob_notification_rule_change"
        indexes = [models.Index(fields=["-changed_at"], name="ob_notif_rule_changed")]

    def __str__(self) -> str:
        return f"{self.action} {self.rule_name}"


DEADLINE_ALARMS = ["execution.overdue", "job.missing"]


class JobDeadline(models.Model):
    """A job's run deadlines (issue 41 points 4-5, ``domain/deadlines.py``): a
    maximum duration of a run, and/or a completion expected every period (by a
    local time of day in a zone). ``set_at`` anchors the periods."""

    id = models.BigAutoField(primary_key=True)
    job_name = models.CharField(max_length=128, unique=True)
    max_duration_ms = models.BigIntegerField(null=True, blank=True)
    expect_every_ms = models.BigIntegerField(null=True, blank=True)
    by_time = models.TimeField(null=True, blank=True)
    zone = models.CharField(max_length=64, blank=True)
    set_at = models.DateTimeField()

    class Meta:
        db_table = "ob_job_deadline"
        constraints = [
            models.CheckConstraint(
                condition=Q(max_duration_ms__isnull=False) | Q(expect_every_ms__isnull=False),
                name="ob_deadline_something",
            ),
            models.CheckConstraint(
                condition=Q(by_time__isnull=True) | Q(expect_every_ms__isnull=False),
                name="ob_deadline_by_needs_every",
            ),
        ]

    def __str__(self) -> str:
        return self.job_name


class JobDeadlineChange(AuditModel):
    """Append-only audit of every change to a job's deadlines."""

    id = models.BigAutoField(primary_key=True)
    job_name = models.CharField(max_length=128)
    action = models.CharField(max_length=16)
    actor = models.CharField(max_length=128)
    actor_user_id = models.BigIntegerField(null=True, blank=True)
    details = models.JSONField(default=dict)
    changed_at = models.DateTimeField()

    class Meta:
        db_table = "ob_job_deadline_change"
        indexes = [models.Index(fields=["-changed_at"], name="ob_deadline_changed")]

    def __str__(self) -> str:
        return f"{self.action} {self.job_name}"


class DeadlineAlarm(models.Model):
    """That a deadline event was raised, inserted with its outbox event in one
    transaction: at most one ``execution.overdue`` per execution and one
    ``job.missing`` per (job, period start) — the unique constraints make a
    second watchdog's insert fail instead of raising it twice."""

    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=40, choices=[(k, k) for k in DEADLINE_ALARMS])
    job_name = models.CharField(max_length=128)
    job_execution_id = models.BigIntegerField(null=True, blank=True)
    period_start = models.DateTimeField(null=True, blank=True)
    raised_at = models.DateTimeField()
    event_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "ob_deadline_alarm"
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=DEADLINE_ALARMS), name="ob_alarm_kind"),
            models.CheckConstraint(
                condition=Q(kind="execution.overdue", job_execution_id__isnull=False)
                | Q(kind="job.missing", period_start__isnull=False),
                name="ob_alarm_subject",
            ),
            models.UniqueConstraint(
                fields=["job_execution_id"],
                condition=Q(kind="execution.overdue"),
                name="ob_alarm_overdue_once",
            ),
            models.UniqueConstraint(
                fields=["job_name", "period_start"],
                condition=Q(kind="job.missing"),
                name="ob_alarm_missing_once",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.job_name}"
