"""Create the built-in legacy definition and bind every existing attempt to it."""

import hashlib
import json

from django.db import migrations
from django.utils import timezone

LEGACY_REVISION = "__m1_repository_port_v1"
LEGACY_MANIFEST = json.dumps(
    {"format": 1, "repository_port": "m1", "revision": LEGACY_REVISION},
    sort_keys=True,
    separators=(",", ":"),
)


def create_legacy(apps, schema_editor):
    alias = schema_editor.connection.alias
    JobDefinition = apps.get_model("oxide_batch", "JobDefinition")
    JobExecution = apps.get_model("oxide_batch", "JobExecution")
    legacy, _ = JobDefinition.objects.using(alias).get_or_create(
        job_name=None,
        manifest_digest=hashlib.sha256(LEGACY_MANIFEST.encode()).hexdigest(),
        defaults={
            "revision": LEGACY_REVISION,
            "manifest_format": 1,
            "manifest": LEGACY_MANIFEST,
            "registered_at": timezone.now(),
        },
    )
    JobExecution.objects.using(alias).filter(definition__isnull=True).update(definition=legacy)


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0003_definitions_state_flow_partitions")]
    operations = [migrations.RunPython(create_legacy, migrations.RunPython.noop)]
