"""Per-action operator permissions (contract §4.1): recover, abandon, stop, hold
(place and release) and purge (survey and apply), on the job execution content
type, granted together to ``batch-operator``. ``operate_batch`` (0009) stays
but the code no longer checks it. Data only: the schema version stays 4.

Self-contained on purpose (a migration must not change when app code does);
``oxide_batch.roles`` holds the same table and a test keeps them equal.
"""

from django.db import migrations

APP_LABEL = "oxide_batch"
GROUP = "batch-operator"
PERMISSIONS = {
    "recover_execution": "Can recover an execution (mark it failed or abandon it, audited)",
    "abandon_execution": "Can abandon a stopped or failed execution",
    "stop_execution": "Can request the stop of an execution",
    "hold_instance": "Can place and release retention holds",
    "purge_metadata": "Can survey and apply retention purges",
}


def forward(apps, schema_editor):
    alias = schema_editor.connection.alias
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    content_type, _ = ContentType.objects.using(alias).get_or_create(
        app_label=APP_LABEL, model="jobexecution"
    )
    granted = [
        Permission.objects.using(alias).get_or_create(
            content_type=content_type, codename=codename, defaults={"name": name}
        )[0]
        for codename, name in PERMISSIONS.items()
    ]
    group, _ = Group.objects.using(alias).get_or_create(name=GROUP)
    group.permissions.add(*granted)


def backward(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    Permission.objects.using(schema_editor.connection.alias).filter(
        content_type__app_label=APP_LABEL, codename__in=PERMISSIONS
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("oxide_batch", "0012_audit_refusals_resolved_steps"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(forward, backward)]
