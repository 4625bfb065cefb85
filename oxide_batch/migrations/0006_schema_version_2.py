"""Record schema version 2: definitions, checkpoints, flow decisions, partitions."""

from django.db import migrations

VERSION = 2


def record(apps, schema_editor):
    SchemaVersion = apps.get_model("oxide_batch", "SchemaVersion")
    SchemaVersion.objects.using(schema_editor.connection.alias).update_or_create(
        id=1, defaults={"version": VERSION}
    )


def unrecord(apps, schema_editor):
    SchemaVersion = apps.get_model("oxide_batch", "SchemaVersion")
    SchemaVersion.objects.using(schema_editor.connection.alias).filter(id=1).update(
        version=VERSION - 1
    )


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0005_definition_required")]
    operations = [migrations.RunPython(record, unrecord)]
