"""Django models of the batch metadata.

Only the repository adapter writes these rows, and only read-only selectors
and the admin read them. Every child row carries ``job_instance_id`` so the
tables can be distributed (and purged) by instance. Rules the domain enforces
are backed by database constraints where a constraint can say them.
"""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Length
from django.db.models.lookups import Exact, GreaterThanOrEqual, LessThanOrEqual

from oxide_batch.domain.status import UNRESOLVED_STATUSES, BatchStatus, FailureCategory

STATUS_CHOICES = [(status.value, status.value) for status in BatchStatus]
CATEGORY_CHOICES = [(category.value, category.value) for category in FailureCategory]
FINISHED = [status.value for status in BatchStatus if status.is_finished]
UNRESOLVED = sorted(status.value for status in UNRESOLVED_STATUSES)
COUNT_COLUMNS = (
    "read_count",
    "processed_count",
    "written_count",
    "filtered_count",
    "committed_count",
    "rolled_back_count",
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


class ExecutionFields(models.Model):
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
    read_count = models.BigIntegerField(default=0)
    processed_count = models.BigIntegerField(default=0)
    written_count = models.BigIntegerField(default=0)
    filtered_count = models.BigIntegerField(default=0)
    committed_count = models.BigIntegerField(default=0)
    rolled_back_count = models.BigIntegerField(default=0)

    class Meta:
        abstract = True


class JobInstance(models.Model):
    """One logical job occurrence: job name + identifying parameters."""

    id = models.BigAutoField(primary_key=True)
    job_name = models.CharField(max_length=128)
    key_digest = models.CharField(max_length=64, help_text="SHA-256 of the version-1 key")
    # [{"name", "type", "value"}] in name byte order; integers as decimal strings
    # so u64 values survive every JSON implementation.
    identifying_parameters = models.JSONField(default=list)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "ob_job_instance"
        constraints = [
            models.UniqueConstraint(fields=["job_name", "key_digest"], name="ob_instance_key"),
            models.CheckConstraint(
                condition=Exact(Length("key_digest"), 64), name="ob_instance_digest_length"
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

    class Meta:
        db_table = "ob_job_execution"
        constraints = [
            *_execution_constraints("ob_execution"),
            models.UniqueConstraint(
                fields=["job_instance", "attempt"], name="ob_execution_attempt"
            ),
            models.CheckConstraint(condition=Q(attempt__gte=1), name="ob_execution_attempt_pos"),
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
        ]

    def __str__(self) -> str:
        return f"{self.job_name} attempt {self.attempt} (#{self.pk})"


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

    class Meta:
        db_table = "ob_step_execution"
        constraints = [
            *_execution_constraints("ob_step"),
            models.UniqueConstraint(fields=["job_execution", "step_name"], name="ob_step_name"),
        ]
        indexes = [
            models.Index(fields=["job_instance", "node_id", "-id"], name="ob_step_node"),
            models.Index(fields=["status", "-created_at"], name="ob_step_status"),
        ]

    def __str__(self) -> str:
        return f"{self.step_name} (#{self.pk})"


class RecoveryDecision(models.Model):
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
    evidence_digest = models.CharField(max_length=64)
    decided_at = models.DateTimeField()

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
