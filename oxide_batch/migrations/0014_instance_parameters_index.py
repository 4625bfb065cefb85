"""A GIN index on the instances' identifying parameters (PostgreSQL only), for
the console's search by a visible parameter's exact value
(``oxide_batch/parameter_search.py``: ``identifying_parameters @> …``).

``jsonb_path_ops`` answers containment only, which is all the search asks, and
is smaller than the default operator class. Built ``CONCURRENTLY`` (outside a
transaction) so a large table is not locked against launches while it builds.
SQLite has no such index; its search walks the rows. An index only: the schema
version stays 4.
"""

from django.db import migrations

CREATE = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS ob_instance_parameters "
    "ON ob_job_instance USING gin (identifying_parameters jsonb_path_ops)"
)
DROP = "DROP INDEX CONCURRENTLY IF EXISTS ob_instance_parameters"


def _on_postgresql(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("oxide_batch", "0013_operator_action_permissions")]

    operations = [migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP))]
