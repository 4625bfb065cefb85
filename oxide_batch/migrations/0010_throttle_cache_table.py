"""The shared cache table of the operator throttle (settings.CACHES["throttle"]),
so a fresh install needs no separate ``createcachetable`` step.

Created with ``createcachetable``'s own table definition; the name is written
here, not read from settings (a migration must not change when settings do),
and a test keeps the two equal. An existing table is left alone.
"""

from django.core.management.commands.createcachetable import Command as CreateCacheTable
from django.db import migrations

TABLE = "ob_throttle_cache"


def forward(apps, schema_editor):
    command = CreateCacheTable()
    command.verbosity = 0
    command.create_table(schema_editor.connection.alias, TABLE, dry_run=False)


def backward(apps, schema_editor):
    schema_editor.execute(f"DROP TABLE IF EXISTS {schema_editor.quote_name(TABLE)}")


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0009_api_groups")]
    operations = [migrations.RunPython(forward, backward)]
