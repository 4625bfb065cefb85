"""A stop's acknowledgement is dated (issue 39, decision 197).

``stopping_at`` records once when a job execution moved to STOPPING, so a
STOPPED execution's timeline still shows STARTED → STOPPING. Nullable column:
no table rebuild, nothing to backfill. Part of schema version 8, which 0024
records.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0022_notifications")]

    operations = [
        migrations.AddField(
            model_name="jobexecution",
            name="stopping_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
