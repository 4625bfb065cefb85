"""Fill last_activity_at, make the audit tables append-only below the ORM on
PostgreSQL, and record schema version 3."""

from django.db import migrations
from django.db.models import F

VERSION = 3
AUDIT_TABLES = ("ob_recovery_decision", "ob_operator_request", "ob_retention_record")

FUNCTION = """
CREATE OR REPLACE FUNCTION ob_audit_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Only the explicit audit-pruning operation may delete, and it says so.
    IF TG_OP = 'DELETE' AND current_setting('oxide_batch.audit_prune', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'oxide_batch: % rows are append-only (%)', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END
$$;
"""


def forward(apps, schema_editor):
    alias = schema_editor.connection.alias
    JobExecution = apps.get_model("oxide_batch", "JobExecution")
    JobExecution.objects.using(alias).filter(last_activity_at__isnull=True).update(
        last_activity_at=F("updated_at")
    )
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FUNCTION, params=None)
        for table in AUDIT_TABLES:
            schema_editor.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION ob_audit_append_only()"
            )
    SchemaVersion = apps.get_model("oxide_batch", "SchemaVersion")
    SchemaVersion.objects.using(alias).update_or_create(id=1, defaults={"version": VERSION})


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table in AUDIT_TABLES:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
        schema_editor.execute("DROP FUNCTION IF EXISTS ob_audit_append_only()")
    SchemaVersion = apps.get_model("oxide_batch", "SchemaVersion")
    SchemaVersion.objects.using(schema_editor.connection.alias).filter(id=1).update(
        version=VERSION - 1
    )


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0007_operator_audit_holds")]
    operations = [migrations.RunPython(forward, backward)]
