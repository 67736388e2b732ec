"""Hot-path queries compiled by the ORM once per process and run as plain SQL afterwards.

Building and compiling a queryset costs about a millisecond of CPU per query, more with
subqueries and joins; a gateway asks for its link on every batch and the portal for
synchronous links on every produce. The rule stays where it is written (a QuerySet method or
filter); only its compiled form is kept. One parameter varies per call: the queryset is built
with a placeholder value there, which `run` replaces.
"""

from __future__ import annotations

import psycopg
from django.db import connection
from django.db.models import QuerySet

PLACEHOLDER = -1  # stands for the varying value; no other parameter of these queries is -1


class Compiled:
    def __init__(self, queryset: QuerySet) -> None:
        self.sql, params = queryset.query.sql_with_params()
        self.params = list(params)
        self.slot = self.params.index(PLACEHOLDER) if PLACEHOLDER in self.params else None

    def run(self, value: object = None) -> list[tuple]:
        params = list(self.params)
        if self.slot is not None:
            params[self.slot] = value
        if connection.vendor != "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(self.sql, params)
                return cursor.fetchall()
        # Bound by the server and prepared once per connection, under Django's error wrapping:
        # half the CPU of Django's cursor, which binds the parameters into the text each time.
        connection.ensure_connection()
        with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
            return cursor.execute(self.sql, params, prepare=True).fetchall()
