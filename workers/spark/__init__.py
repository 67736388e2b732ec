"""The bulk jobs on Apache Spark: copystream, diffstreams (with repair) and the replication
engine's large-backlog catch-up (a copystream of one replica link). Nothing here imports
Django (DESIGN.md); workers/jobs.py is the Celery side that submits and records them."""

from workers.spark.jobs import Spec, copystream, diffstreams
from workers.spark.ranges import Side
from workers.spark.session import spark_context

__all__ = ["Side", "Spec", "copystream", "diffstreams", "spark_context"]
