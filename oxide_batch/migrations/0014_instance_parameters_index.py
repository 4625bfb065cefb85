"""A GIN index on the instances' identifying parameters (PostgreSQL only), for
the console's search by a visible parameter's exact value
(``oxide_batch/parameter_search.py``: ``identifying_parameters @> …``).

``jsonb_path_ops`` answers containment only, which is all the search asks, and
is smaller than the default operator class. Built ``CONCURRENTLY`` (outside a
transaction) so a large table is not locked against launches while it builds;
inside a transaction (a test that migrates back and forth in one) it cannot be,
and is built plainly.
SQLite has no such index; its search walks the rows. An index only: the schema
version stays 4.
"""

from django.db import migrations

CREATE = (
    "CREATE INDEX {concurrently} IF NOT EXISTS ob_instance_parameters "
    "ON ob_job_instance USING gin (identifying_parameters jsonb_path_ops)"
)
DROP = "DROP INDEX {concurrently} IF EXISTS ob_instance_parameters"


def _on_postgresql(sql):
    def run(apps, schema_editor):
        connection = schema_editor.connection
        if connection.vendor == "postgresql":
            concurrently = "" if connection.in_atomic_block else "CONCURRENTLY"
            schema_editor.execute(sql.format(concurrently=concurrently))

    return run


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("oxide_batch", "0013_operator_action_permissions")]

    operations = [migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP))]
