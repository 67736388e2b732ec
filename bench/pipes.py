"""The reference pipes of the replication and Spark benchmarks in either store layout (issue 30).

`--layout batches|rows` names the layout of the stores a benchmark makes (the processes it
starts get it as STREAMGATE_STORE_LAYOUT; the stores it opens itself get it as open_store's
`layout`), so its backlog, loaded through the store's API, takes that layout's shape. Beside
the engine the benchmarks time two raw pipes between the same two databases:
- the row pipe: binary COPY of `messages` rows (pid, offset, ... a 200 B value each) out of
  the source and into a same-shaped table of the destination. A batch store holds no rows, so
  there the pipe reads a side table of the source holding one such row per stored message
  (same partitions, same offsets, 200 B values), written before the timing;
- the batch pipe: binary COPY of the `batches` rows the store holds (record batches as sent,
  one row per batch), into a table LIKE `batches` (STORAGE EXTERNAL kept).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import psycopg
from psycopg import sql

from replication.engine.pg.relay import relay

LAYOUTS = ("batches", "rows")
ROW_COLUMNS = 'pid, "offset", ts, key, value, headers, origin, producer'
ROWS_DDL = """
CREATE TABLE {} (
    pid integer NOT NULL, "offset" bigint NOT NULL, ts bigint NOT NULL, key bytea,
    value bytea, headers bytea, origin uuid NOT NULL, producer text,
    PRIMARY KEY (pid, "offset"))
"""
SIDE_ROWS = "sgbench_rows"  # the row pipe's source in a batch store
# One 200 B value per offset, not all alike: 13 MD5 digests of the offset, cut to 200 bytes.
SIDE_FILL = sql.SQL(
    "INSERT INTO {} SELECT {}, g, 0, NULL, "
    "substring(decode(repeat(md5(g::text), 13), 'hex') for 200), NULL, "
    "'00000000-0000-0000-0000-000000000001', NULL FROM generate_series(0, {} - 1) AS g")


def add_layout_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layout", choices=LAYOUTS, default="batches",
                        help="the message store's layout (STREAMGATE_STORE_LAYOUT, issue 30)")


def stored_table(layout: str) -> str:
    """The table holding the messages in a store of `layout`."""
    return "batches" if layout == "batches" else "messages"


def partition_ends(conn: psycopg.Connection, stream: object) -> list[tuple[int, int]]:
    """(partition id, next offset) of each partition of the stream, in id order."""
    return conn.execute("SELECT id, next_offset FROM partitions WHERE stream = %s ORDER BY id",
                        (stream,)).fetchall()


def row_source(conn: psycopg.Connection, layout: str, stream: object) -> str:
    """The table the row pipe reads in the source store: `messages` in a row store; in a batch
    store a side table (made here, untimed) holding a row per message of the stream."""
    if layout != "batches":
        return "messages"
    table = sql.Identifier(SIDE_ROWS)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    conn.execute(sql.SQL(ROWS_DDL).format(table))
    for pid, high in partition_ends(conn, stream):
        conn.execute(SIDE_FILL.format(table, pid, high))
    conn.commit()
    conn.autocommit = True  # hint bits set now, as on any store's settled rows
    conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(table))
    conn.autocommit = False
    return SIDE_ROWS


def drop_row_source(conn: psycopg.Connection, table: str) -> None:
    if table == SIDE_ROWS:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
        conn.commit()


def _pipe(src: psycopg.Connection, dst: psycopg.Connection, create: sql.Composable,
          chunks: Callable[[int, int], list[sql.Composable]], copy_in: str,
          ends: list[tuple[int, int]], session: str | None, counted: str) -> float:
    """Seconds to relay every chunk of every partition into sgbench_pipe, a commit each; then
    (untimed) RuntimeError unless `counted` (SQL of sgbench_pipe) finds every message."""
    for conn in (src, dst):
        if session:
            conn.execute(session)
    dst.execute("DROP TABLE IF EXISTS sgbench_pipe")
    dst.execute(create)
    dst.commit()
    start = time.perf_counter()
    with dst.cursor() as into:
        for pid, high in ends:
            for copy_out in chunks(pid, high):
                relay(src, copy_out.as_bytes(src), into, copy_in)
                src.commit()
                dst.commit()
    elapsed = time.perf_counter() - start
    got = dst.execute(counted).fetchone()[0] or 0
    if got != sum(high for _, high in ends):
        raise RuntimeError(f"the pipe copied {got} of {sum(high for _, high in ends)} messages")
    dst.execute("DROP TABLE sgbench_pipe")
    dst.commit()
    return elapsed


def row_pipe(src_url: str, dst_url: str, stream: object, layout: str, chunk: int | None,
             session: str | None = None) -> tuple[float, int]:
    """(seconds, rows) of the row pipe: `chunk` rows a transaction (None: a partition)."""
    with psycopg.connect(src_url) as src, psycopg.connect(dst_url) as dst:
        table = row_source(src, layout, stream)
        ends = partition_ends(src, stream)
        src.commit()

        def chunks(pid: int, high: int) -> list[sql.Composable]:
            step = chunk or max(high, 1)
            return [sql.SQL("COPY (SELECT {} FROM {} WHERE pid = {} AND \"offset\" >= {} AND "
                            "\"offset\" < {} ORDER BY \"offset\") TO STDOUT (FORMAT BINARY)"
                            ).format(sql.SQL(ROW_COLUMNS), sql.Identifier(table), pid, first,
                                     first + step) for first in range(0, high, step)]

        try:
            elapsed = _pipe(src, dst, sql.SQL(ROWS_DDL).format(sql.Identifier("sgbench_pipe")),
                            chunks, f"COPY sgbench_pipe ({ROW_COLUMNS}) FROM STDIN (FORMAT BINARY)",
                            ends, session, "SELECT count(*) FROM sgbench_pipe")
        finally:
            src.rollback()
            drop_row_source(src, table)
    return elapsed, sum(high for _, high in ends)


def batch_pipe(src_url: str, dst_url: str, stream: object, chunk: int | None,
               session: str | None = None) -> tuple[float, int]:
    """(seconds, messages) of the batch pipe: the stream's `batches` rows, those whose last
    offset falls in each `chunk` offsets a transaction (None: a partition)."""
    with psycopg.connect(src_url) as src, psycopg.connect(dst_url) as dst:
        ends = partition_ends(src, stream)
        src.commit()

        def chunks(pid: int, high: int) -> list[sql.Composable]:
            step = chunk or max(high, 1)
            return [sql.SQL("COPY (SELECT * FROM batches WHERE pid = {} AND last_offset >= {} "
                            "AND last_offset < {} ORDER BY last_offset) TO STDOUT "
                            "(FORMAT BINARY)").format(pid, first, first + step)
                    for first in range(0, high, step)]

        elapsed = _pipe(src, dst, sql.SQL("CREATE TABLE sgbench_pipe (LIKE batches INCLUDING ALL)"),
                        chunks, "COPY sgbench_pipe FROM STDIN (FORMAT BINARY)", ends, session,
                        "SELECT sum(records) FROM sgbench_pipe")
    return elapsed, sum(high for _, high in ends)
