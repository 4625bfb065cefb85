"""The API roles: permissions on the job execution content type and the groups
``batch-viewer``, ``batch-runtime`` and ``batch-operator`` (contract §4.1).

Self-contained on purpose (a migration must not change when app code does);
``oxide_batch.roles`` holds the same table and a test keeps them equal.
"""

from django.db import migrations

APP_LABEL = "oxide_batch"
PERMISSIONS = {
    "view_batch": "Can read batch metadata",
    "run_batch": "Can record runtime operations (launch, restart, steps, checkpoints)",
    "operate_batch": "Can act as operator (stop, abandon, recover, hold, purge)",
    "view_batch_payload": "Can read checkpoint, context and partition context payloads",
}
ROLES = {
    "batch-viewer": ("view_batch",),
    "batch-runtime": ("view_batch", "run_batch", "view_batch_payload"),
    "batch-operator": ("view_batch", "view_batch_payload", "operate_batch"),
}


def forward(apps, schema_editor):
    alias = schema_editor.connection.alias
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    content_type, _ = ContentType.objects.using(alias).get_or_create(
        app_label=APP_LABEL, model="jobexecution"
    )
    permissions = {}
    for codename, name in PERMISSIONS.items():
        permissions[codename], _ = Permission.objects.using(alias).get_or_create(
            content_type=content_type, codename=codename, defaults={"name": name}
        )
    for group_name, codenames in ROLES.items():
        group, _ = Group.objects.using(alias).get_or_create(name=group_name)
        group.permissions.add(*(permissions[codename] for codename in codenames))


def backward(apps, schema_editor):
    alias = schema_editor.connection.alias
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    Group.objects.using(alias).filter(name__in=ROLES).delete()
    Permission.objects.using(alias).filter(
        content_type__app_label=APP_LABEL, codename__in=PERMISSIONS
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("oxide_batch", "0008_audit_triggers_schema_version_3"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(forward, backward)]
