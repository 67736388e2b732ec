"""Binary COPY from one PostgreSQL database into another, relayed by this process.

COPY TO sends a protocol message per row. psycopg's Copy hands them over one at a time, each
through its wait loop, and writes them on the same way: relaying 5,000,000 rows of 200 B cost
~8 s of this process's CPU, more than either server spent. Here rows are taken straight from
libpq (psycopg.pq) for as long as it holds them, and written in blocks of BLOCK bytes: ~2.5 s.

On the way it measures the stream: its length in bytes and the total length of each row's
first field (binary COPY: a 19-byte header, then per row a 16-bit field count and per field a
32-bit length, -1 for NULL, and the bytes; a 2-byte trailer). Where the other fields' widths
are fixed, that gives the bytes of the variable ones without a second pass over the rows
(schema.piped_bytes).
"""

from __future__ import annotations

import select
from typing import NamedTuple

import psycopg
from psycopg import errors, pq

BLOCK = 1 << 20
HEADER = 19  # bytes of binary COPY's header, sent with the first row
TRAILER = 2
_COPY_OUT, _ERROR = pq.ExecStatus.COPY_OUT, pq.ExecStatus.FATAL_ERROR


class Relayed(NamedTuple):
    rows: int  # as the destination counted them
    stream: int  # bytes of the binary COPY stream, header and trailer included
    first: int  # bytes of the rows' first fields (NULLs count none)


def relay(src: psycopg.Connection, query: bytes, into: psycopg.Cursor,
          copy_in: str) -> Relayed:
    """Run `query`, a `COPY ... TO STDOUT (FORMAT BINARY)`, on `src` and write what it sends
    through `copy_in`, a `COPY ... FROM STDIN (FORMAT BINARY)`, on `into`. Either side's
    error is raised as psycopg raises it, the destination's COPY is then abandoned (nothing
    written) and the source's cancelled: both connections stay usable."""
    pgconn = src.pgconn
    _start(src, query)
    finished = False
    stream = first = 0
    at = HEADER + 2  # where a row's first field's length is: the first row follows the header
    try:
        with into.copy(copy_in) as writer:
            block = bytearray()
            while True:
                size, data = pgconn.get_copy_data(1)
                if size > 0:
                    block += data
                    # A length's first byte is 0xFF only for NULL (-1); the trailer, and a
                    # header with no row after it, end where a length would begin.
                    if at < size and data[at] != 0xFF:
                        first += int.from_bytes(data[at:at + 4], "big")
                    at = 2
                    if len(block) >= BLOCK:
                        stream += len(block)
                        writer.write(block)
                        block = bytearray()
                elif size == 0:  # nothing buffered: wait for the server
                    _wait(pgconn)
                    pgconn.consume_input()
                else:  # -1 the end, -2 an error: the results say which
                    break
            finished = True
            _end(src)
            stream += len(block)
            writer.write(block)
    except BaseException:
        if not finished:
            _cancel(src)
        raise
    return Relayed(into.rowcount, stream, first)


def _wait(pgconn: pq.abc.PGconn, write: bool = False) -> None:
    """Block (the GIL released) until the server's socket is readable, or writable."""
    fd = pgconn.socket
    select.select([] if write else [fd], [fd] if write else [], [])


def _start(src: psycopg.Connection, query: bytes) -> None:
    pgconn = src.pgconn
    pgconn.send_query(query)
    while pgconn.flush():
        _wait(pgconn, write=True)
    result = _result(pgconn)
    if result is not None and result.status == _COPY_OUT:
        return
    _end(src, result)  # the server's error, if that is what came
    raise psycopg.ProgrammingError("the relayed query is not a COPY ... TO STDOUT")


def _result(pgconn: pq.abc.PGconn) -> pq.abc.PGresult | None:
    pgconn.consume_input()
    while pgconn.is_busy():
        _wait(pgconn)
        pgconn.consume_input()
    return pgconn.get_result()


def _end(src: psycopg.Connection, first: pq.abc.PGresult | None = None) -> None:
    """Read the results left (after `first`, if given) and raise the first error among
    them."""
    results = [first] if first is not None else []
    while (result := _result(src.pgconn)) is not None:
        results.append(result)
    for result in results:
        if result.status == _ERROR:
            raise errors.error_from_result(result, encoding=src.info.encoding)


def _cancel(src: psycopg.Connection) -> None:
    """Stop a COPY TO under way and read what the server still sends."""
    pgconn = src.pgconn
    if pgconn.transaction_status != pq.TransactionStatus.ACTIVE:
        return
    src.cancel_safe()
    while (size := pgconn.get_copy_data(1)[0]) >= 0:
        if size == 0:
            _wait(pgconn)
            pgconn.consume_input()
    while _result(pgconn) is not None:
        pass
