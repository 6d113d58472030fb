import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('colocation', '0004_core_inventory'),
        ('core', '0001_initial'),
        ('scheduler', '0004_autoscaling'),
    ]

    operations = [
        # Department, GPU model, membership and decision moved to the core app: state only, the tables stay.
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.AlterField(
                model_name='trainingjob',
                name='department',
                field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='jobs', to='core.department'),
            ),
            migrations.AlterField(
                model_name='quota',
                name='department',
                field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='quotas', to='core.department'),
            ),
            migrations.RemoveField(
                model_name='membership',
                name='department',
            ),
            migrations.AlterField(
                model_name='quota',
                name='gpu_model',
                field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='quotas', to='core.gpumodel'),
            ),
            migrations.AlterField(
                model_name='trainingjob',
                name='gpu_model',
                field=models.ForeignKey(blank=True, help_text='Preferred GPU model; empty for CPU-only jobs.', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='preferred_by_jobs', to='core.gpumodel'),
            ),
            migrations.AlterField(
                model_name='jobrun',
                name='gpu_model',
                field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='runs', to='core.gpumodel'),
            ),
            migrations.AlterField(
                model_name='trainingjob',
                name='assigned_gpu_model',
                field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='assigned_jobs', to='core.gpumodel'),
            ),
            migrations.RemoveField(
                model_name='membership',
                name='user',
            ),
            migrations.AlterField(
                model_name='framework',
                name='certified_on',
                field=models.ManyToManyField(blank=True, related_name='frameworks', to='core.gpumodel'),
            ),
            migrations.DeleteModel(
                name='Decision',
            ),
            migrations.DeleteModel(
                name='Department',
            ),
            migrations.DeleteModel(
                name='GPUModel',
            ),
            migrations.DeleteModel(
                name='Membership',
            ),
        ]),
    ]
