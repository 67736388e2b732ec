"""The message store on PostgreSQL (production): binary COPY in, binary rows out."""

from replication.engine.pg.schema import create_pg_database
from replication.engine.pg.store import PostgresStore

__all__ = ["PostgresStore", "create_pg_database"]
