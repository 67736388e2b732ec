"""The message store on PostgreSQL: one database per cluster, rows in and out in binary.

One class, PostgresStore, made of its parts by responsibility: the pool and partition catalog
(catalog.py), appends (append.py), replicated batches (apply.py, with pipe.py shared by Spark's
copy), reads and stats (reads.py), cursors (cursors.py) and retention (retention.py)."""

from __future__ import annotations

from replication.engine.pg.append import Appending
from replication.engine.pg.apply import Applying
from replication.engine.pg.cursors import Cursors
from replication.engine.pg.reads import Reading
from replication.engine.pg.retention import Retention


class PostgresStore(Appending, Applying, Reading, Cursors, Retention):
    """MessageStore on PostgreSQL. Thread-safe: each call takes a connection from the pool."""
