import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("oxide_batch", "0004_legacy_definition")]
    operations = [
        migrations.AlterField(
            model_name="jobexecution",
            name="definition",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="oxide_batch.jobdefinition",
            ),
        ),
    ]
