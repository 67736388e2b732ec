"""What the domain announces for the layers above it to act on. The domain never imports them
(DESIGN.md: dependencies point down); they connect their receivers in AppConfig.ready."""

from __future__ import annotations

from django.dispatch import Signal

# job_id: a Job was recorded and committed, and waits for a worker to run it. The workers app
# enqueues it (workers/tasks.py job_enqueue: Celery in production, a thread in embedded mode).
job_submitted = Signal()

# rebalance_id: a store group Rebalance (or drain) was recorded and committed; the workers app
# runs it as job_submitted's jobs are run (replication/services/rebalance.py rebalance_run).
rebalance_submitted = Signal()

# stream, before_ms: retention is about to delete the stream's messages older than before_ms.
# The operations app raises an alarm on each replica that has not received them yet
# (operations/alarms.py retention_check). Receivers must not raise: retention runs regardless.
stream_expiring = Signal()

# stream, actor, details: a `stream purge` deleted messages (details: what went and stayed).
# The operations app writes the audit record (operations/audit.py).
stream_purged = Signal()

# stream, actor, details {group, topic, to, before, after}: a consumer group's offsets were
# moved by hand (the stream page's reset). The operations app writes the audit record.
group_offsets_reset_done = Signal()

# link, actor, details {job}: a replica's one-click (or CLI) repair started: the link's
# diffstreams -repair job. The operations app writes the audit record.
replica_repair_started = Signal()

# stream, actor, details {topic, partition, from, to, messagesCopied}: a partition moved to
# another store group (its placement switched). The operations app writes the audit record.
partition_moved = Signal()
