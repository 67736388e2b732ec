"""KafkaProducerId and KafkaGroup now live in the replication app (replication/migrations/0008):
drop them from this app's state, keep their tables, and hand their content types over so
permissions follow them."""

from django.db import migrations

MODELS = ("kafkaproducerid", "kafkagroup")


def content_types_to(app_label: str, other: str):
    def move(apps, schema_editor) -> None:
        content_types = apps.get_model("contenttypes", "ContentType").objects
        for model in MODELS:
            if not content_types.filter(app_label=app_label, model=model).exists():
                content_types.filter(app_label=other, model=model).update(app_label=app_label)
    return move


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('workers', '0004_merge_kafka_group'),
        ('replication', '0008_kafka_models_moved_from_workers'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='KafkaGroup'),
                migrations.DeleteModel(name='KafkaProducerId'),
            ],
        ),
        migrations.RunPython(content_types_to("replication", "workers"),
                             content_types_to("workers", "replication")),
    ]
