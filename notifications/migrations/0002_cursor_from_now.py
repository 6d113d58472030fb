"""The scan starts from the decisions of the day it is installed: an existing installation is not flooded with
notifications about its whole history."""
from django.db import migrations
from django.db.models import Max


def start_cursor(apps, schema_editor):
    Decision = apps.get_model("core", "Decision")
    ScanCursor = apps.get_model("notifications", "ScanCursor")
    last = Decision.objects.aggregate(n=Max("id"))["n"] or 0
    ScanCursor.objects.update_or_create(name="decisions", defaults={"last_decision_id": last})


class Migration(migrations.Migration):
    dependencies = [("notifications", "0001_initial")]
    operations = [migrations.RunPython(start_cursor, migrations.RunPython.noop)]
