"""Replica topic rows carry their origin topic's compaction overrides (issue 31): the rows of
replicas made before are brought up to their origins' once; propagate_topics keeps them so."""

from django.db import migrations

CARRIED = ("cleanuppolicy", "mincompactionlag", "deleteretention", "mincleanabledirtyratio")


def carry_overrides(apps, schema_editor):  # type: ignore[no-untyped-def]
    Topic = apps.get_model("replication", "Topic")
    origins = {(t.stream.uuid, t.name): t for t in Topic.objects.select_related("stream")}
    changed = []
    for (stream_uuid, name), topic in origins.items():
        origin = origins.get((topic.origin_uuid, name))
        if topic.origin_uuid == stream_uuid or origin is None:
            continue
        if any(getattr(topic, f) != getattr(origin, f) for f in CARRIED):
            for field in CARRIED:
                setattr(topic, field, getattr(origin, field))
            changed.append(topic)
    Topic.objects.bulk_update(changed, CARRIED)


class Migration(migrations.Migration):
    dependencies = [("replication", "0014_topic_flush")]

    operations = [migrations.RunPython(carry_overrides, migrations.RunPython.noop)]
