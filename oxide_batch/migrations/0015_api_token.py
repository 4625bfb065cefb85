"""API tokens kept hashed (``oxide_batch.models.ApiToken``): a lookup prefix,
unique and indexed, and the SHA-256 digest of the token. The batch metadata
schema is unchanged: the schema version stays 4 (as for the throttle table of
0010, this table is the API's, not the job repository's).
"""

import django.db.models.deletion
import django.db.models.functions.text
import django.db.models.lookups
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('oxide_batch', '0014_instance_parameters_index'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ApiToken',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=64)),
                ('key_prefix', models.CharField(max_length=12, unique=True)),
                ('digest', models.CharField(max_length=64)),
                ('created_at', models.DateTimeField()),
                ('expires_at', models.DateTimeField(blank=True, null=True)),
                ('revoked_at', models.DateTimeField(blank=True, null=True)),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_tokens', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'API token',
                'db_table': 'ob_api_token',
                'constraints': [models.CheckConstraint(condition=django.db.models.lookups.Exact(django.db.models.functions.text.Length('key_prefix'), 12), name='ob_api_token_prefix'), models.CheckConstraint(condition=django.db.models.lookups.Exact(django.db.models.functions.text.Length('digest'), 64), name='ob_api_token_digest'), models.CheckConstraint(condition=models.Q(django.db.models.lookups.GreaterThanOrEqual(django.db.models.functions.text.Length('name'), 1), django.db.models.lookups.LessThanOrEqual(django.db.models.functions.text.Length('name'), 64)), name='ob_api_token_name_length'), models.CheckConstraint(condition=models.Q(('expires_at__isnull', True), ('expires_at__gt', models.F('created_at')), _connector='OR'), name='ob_api_token_expires_after_created'), models.CheckConstraint(condition=models.Q(('revoked_at__isnull', True), ('revoked_at__gte', models.F('created_at')), _connector='OR'), name='ob_api_token_revoked_after_created')],
            },
        ),
    ]
