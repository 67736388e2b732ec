"""The Job model now lives in the replication app (replication/migrations/0005): drop it from
this app's state, keep its table, and hand its content type over so admin history and
permissions follow it."""

from django.db import migrations


def content_type_to(app_label: str, other: str):
    def move(apps, schema_editor) -> None:
        content_types = apps.get_model("contenttypes", "ContentType").objects
        if not content_types.filter(app_label=app_label, model="job").exists():
            content_types.filter(app_label=other, model="job").update(app_label=app_label)
    return move


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('workers', '0001_job'),
        ('replication', '0005_job_moved_from_workers'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='Job')],
        ),
        migrations.RunPython(content_type_to("replication", "workers"),
                             content_type_to("workers", "replication")),
    ]
