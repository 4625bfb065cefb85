"""Record schema version 1. Each later migration that changes the schema
records its own number (hard-coded here, never imported from the code)."""

from django.db import migrations

VERSION = 1


def record(apps, schema_editor):
    SchemaVersion = apps.get_model("oxide_batch", "SchemaVersion")
    SchemaVersion.objects.using(schema_editor.connection.alias).update_or_create(
        id=1, defaults={"version": VERSION}
    )


def unrecord(apps, schema_editor):
    SchemaVersion = apps.get_model("oxide_batch", "SchemaVersion")
    SchemaVersion.objects.using(schema_editor.connection.alias).filter(id=1).delete()


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0001_initial")]
    operations = [migrations.RunPython(record, unrecord)]
