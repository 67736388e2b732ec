"""diffstreams' comparison for the domain's services (failback's common prefix, continuous
verification), and copystream's copy of a link (failback's catch-up), registered in
replication/services/compare.py by WorkersConfig.ready.

Below BULK_IN_PROCESS messages the ranges are compared in this process by `diff_ranges`,
the very function each Spark task of a diffstreams job runs: a Spark job's start-up (a
driver, Python workers, a connection pair per task) would cost more than the comparison.
Above it they are cut into the job's windows and compared on Spark."""

from __future__ import annotations

from django.conf import settings

from replication.models import ReplicaLink, Stream, carried_topics
from replication.services.compare import Span
from replication.stores import job_side


def side(stream: Stream):  # type: ignore[no-untyped-def]  # -> workers.spark.ranges.Side
    """The stream's side of a comparison or copy: each partition in its store group's store."""
    from workers.spark.ranges import Side

    url, placed = job_side(stream.cluster, stream.uuid)
    return Side(url, str(stream.uuid), placed)


def streams_differ(a: Stream, b: Stream, spans: list[Span]) -> dict[tuple[str, int], int]:
    # Imported here: workers.spark loads PySpark, which most processes never need.
    from workers.spark.ranges import Range, Work, diff_ranges

    work = Work(side(a), side(b))
    ranges = [Range(s.topic, s.partition, s.start, s.end) for s in spans]
    if sum(r.size for r in ranges) <= settings.BULK_IN_PROCESS:
        rows = list(diff_ranges(work, ranges))
    else:
        from workers.spark.jobs import diff_on_spark
        from workers.spark.session import borrowed_context

        with borrowed_context(settings.SPARK_MASTER_URL or None) as spark:
            rows = diff_on_spark(spark, work, ranges)
    found: dict[tuple[str, int], int] = {}
    for topic, partition, offset in rows:
        if offset is not None:
            found[(topic, partition)] = min(offset, found.get((topic, partition), offset))
    return found


def link_copy(link: ReplicaLink) -> int:
    """What the link's replica lacks of the topics it carries, copied by copystream's Spark
    tasks (as the engine's large-backlog catch-up job copies, without its Job record)."""
    from workers.spark import Spec, copystream
    from workers.spark.session import borrowed_context

    source, replica = link.source, link.replica
    topics = dict(source.topics.values_list("name", "origin_uuid"))
    kept = carried_topics(replica.uuid, topics)  # never back to where a topic comes from
    spec = Spec(side(source), side(replica),
                dict(source.topics.filter(name__in=kept).values_list("name", "partitions")),
                link=str(link.pk))
    with borrowed_context(settings.SPARK_MASTER_URL or None) as spark:
        return copystream(spark, spec)["messages"]
