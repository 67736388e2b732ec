"""The hooks MessageStore (storebase.py) provides to the parts of it written in modules of their
own (storecursors.py, storeretention.py): declared once here for the type checker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

Connection = Any  # a DB-API connection: psycopg's or sqlite3's (both have .execute)


class StoreHooks:
    """Mixed into MessageStore's parts; MessageStore fills these in."""

    if TYPE_CHECKING:
        def _reading(self) -> AbstractContextManager[Connection]: ...
        def _writing(self) -> AbstractContextManager[Connection]: ...
        def _key(self, stream: UUID) -> Any: ...
        def _sql(self, statement: str) -> str: ...
        def _pid(self, conn: Connection, stream: UUID, topic: str, partition: int) -> int: ...
        def _one(self, conn: Connection, statement: str, args: Sequence) -> tuple | None: ...
        def _all(self, conn: Connection, statement: str, args: Sequence) -> list[tuple]: ...
