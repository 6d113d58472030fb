import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


MOVED = ("department", "gpumodel", "decision", "membership")


def content_types_follow(apps, schema_editor):
    """The moved models keep their content types (and so their permissions and admin log entries)."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="scheduler", model__in=MOVED).update(app_label="core")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("contenttypes", "0002_remove_content_type_name"),
        ("scheduler", "0004_autoscaling"),
    ]

    operations = [
        # The models moved here from the scheduler app: only the state moves, the rows stay in their tables
        # (renamed in 0002).
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.CreateModel(
                name='Department',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.SlugField(max_length=64, unique=True)),
                    ('description', models.TextField(blank=True)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                ],
                options={
                    'db_table': 'scheduler_department',
                    'ordering': ['name'],
                },
            ),
            migrations.CreateModel(
                name='GPUModel',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(max_length=32, unique=True)),
                    ('memory_gib', models.PositiveIntegerField()),
                ],
                options={
                    'db_table': 'scheduler_gpumodel',
                    'verbose_name': 'GPU model',
                    'ordering': ['name'],
                    'constraints': [models.CheckConstraint(condition=models.Q(('memory_gib__gt', 0)), name='gpumodel_memory_positive'), models.CheckConstraint(condition=models.Q(('name__in', ('cpu', 'memory')), _negated=True), name='gpumodel_name_not_reserved')],
                },
            ),
            migrations.CreateModel(
                name='Decision',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('kind', models.CharField(choices=[('admission', 'Admission'), ('placement', 'Placement'), ('preemption', 'Preemption'), ('pending', 'Still pending'), ('cancellation', 'Cancellation'), ('quota', 'Quota change'), ('lending', 'Lending'), ('scaling', 'Scaling'), ('rightsizing', 'Right-sizing'), ('alert', 'Alert')], db_index=True, max_length=16)),
                    ('subject', models.CharField(db_index=True, help_text='What it is about, e.g. "job:42", "node:n1".', max_length=160)),
                    ('reason', models.CharField(help_text='Machine-readable reason code.', max_length=64)),
                    ('message', models.TextField(help_text='The reason as a sentence for the people it affects.')),
                    ('data', models.JSONField(blank=True, default=dict)),
                    ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                    ('department', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='decisions', to='core.department')),
                ],
                options={
                    'db_table': 'scheduler_decision',
                    'ordering': ['-created_at', '-id'],
                    'indexes': [models.Index(fields=['subject', '-created_at'], name='scheduler_d_subject_9a8a1c_idx')],
                },
            ),
            migrations.CreateModel(
                name='Membership',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('role', models.CharField(choices=[('member', 'Member'), ('admin', 'Department admin')], default='member', max_length=16)),
                    ('department', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='core.department')),
                    ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to=settings.AUTH_USER_MODEL)),
                ],
                options={
                    'db_table': 'scheduler_membership',
                    'ordering': ['department__name', 'user__username'],
                    'constraints': [models.UniqueConstraint(fields=('user', 'department'), name='membership_unique_user_department'), models.CheckConstraint(condition=models.Q(('role__in', ['member', 'admin'])), name='membership_role_valid')],
                },
            ),
        ]),
        migrations.RunPython(content_types_follow, migrations.RunPython.noop),
    ]
