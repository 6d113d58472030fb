import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('colocation', '0003_autoscaling'),
        ('core', '0001_initial'),
    ]

    operations = [
        # Department, GPU model, membership and decision moved to the core app: state only, the tables stay.
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.AlterField(
                model_name='inferenceservice',
                name='department',
                field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='services', to='core.department'),
            ),
            migrations.AlterField(
                model_name='inferenceservice',
                name='gpu_model',
                field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='services', to='core.gpumodel'),
            ),
            migrations.AlterField(
                model_name='node',
                name='gpu_model',
                field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='nodes', to='core.gpumodel'),
            ),
            migrations.AlterField(
                model_name='resourcegroup',
                name='gpu_model',
                field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='resource_groups', to='core.gpumodel'),
            ),
        ]),
    ]
