"""The PostgreSQL store with a record batch a row (issue 30)."""

from replication.engine.pgbatch.store import PgBatchStore

__all__ = ["PgBatchStore"]
