from django.db import migrations


class Migration(migrations.Migration):
    """The moved models' tables take the core app's names (a rename: the rows, keys and constraints stay)."""

    dependencies = [
        ("core", "0001_initial"),
        ("colocation", "0004_core_inventory"),
        ("scheduler", "0005_moved_to_core"),
    ]

    operations = [
        migrations.AlterModelTable(name="department", table=None),
        migrations.AlterModelTable(name="gpumodel", table=None),
        migrations.AlterModelTable(name="membership", table=None),
        migrations.AlterModelTable(name="decision", table=None),
        migrations.RenameIndex(model_name="decision", new_name="core_decisi_subject_1942f2_idx",
                               old_name="scheduler_d_subject_9a8a1c_idx"),
    ]
