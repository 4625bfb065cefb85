"""A lost write waits for a person (issue 38 point 5, contract §2.5.14).

``lost_write_resolution`` records the operator's decision on an execution's
lost-write marker (when, who, why, the note, the operation id); until it is set
a launch or restart of the instance is refused (``lost_write_unresolved``). The
partial index holds the few marked, unresolved executions by instance: the
launch's gate and the gauge read it; no runtime write moves its columns, so the
hot updates stay HOT. The audit's ``action`` gains ``RESOLVE_LOST_WRITE`` (and
room for it). Nullable column, nothing to backfill: the schema version stays 7.

``lease_ttl`` (issue 38 point 6) records the lease TTL an owner's claim was
granted, written by the claim's own write: every process computes the lease
from it, whatever its own ``OXIDE_BATCH_LEASE_TTL`` says (null for claims made
before: the reader's setting applies to them).
"""

from django.db import migrations, models

ACTIONS = ["LAUNCH", "RESTART", "STOP", "ABANDON", "RECOVER", "RESOLVE_LOST_WRITE"]


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0021_hot_updates")]

    operations = [
        migrations.AddField(
            model_name="jobexecution",
            name="lost_write_resolution",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="jobexecution",
            name="lease_ttl",
            field=models.DurationField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="operatorrequest",
            name="action",
            field=models.CharField(choices=[(a, a) for a in ACTIONS], max_length=32),
        ),
        migrations.AddIndex(
            model_name="jobexecution",
            index=models.Index(
                condition=models.Q(
                    ("lost_write__isnull", False), ("lost_write_resolution__isnull", True)
                ),
                fields=["job_instance"],
                name="ob_execution_lost_write",
            ),
        ),
    ]
