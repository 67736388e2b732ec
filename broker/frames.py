"""A connection's bytes, read by the socket straight into one buffer that frames are cut from.

asyncio's StreamReader copies every byte it receives four times before a handler sees it (the
socket's fresh bytes object, the extend into its buffer, the slice and the bytes of
`readexactly`), plus a copy of all it holds whenever its buffer grows after a read from the
front: about a quarter of the listener's CPU under a producer (py-spy, docs/benchmarks.md).
Here the transport receives into the buffer itself (asyncio.BufferedProtocol) and a frame is
copied out once. `FrameReader` is also the protocol behind the connection's StreamWriter
(flow control of writes: `drain`), and starts the connection's serving task.
"""

from __future__ import annotations

import asyncio
from asyncio.streams import FlowControlMixin
from collections.abc import Callable, Coroutine
from typing import Any

MIN_READ = 64 * 1024  # the least room offered to a receive (the buffer's size to begin with)
SPARE_BUFFERS = 4  # emptied buffers kept for the connections that receive next
_spare: list[bytearray] = []
Serve = Callable[["FrameReader", asyncio.StreamWriter], Coroutine[Any, Any, None]]


class FrameReader(FlowControlMixin, asyncio.BufferedProtocol):
    """What StreamReader offered the listener (`readexactly`, EOF, IncompleteReadError), and
    a look at what is received and not read yet (`buffered`, `peek`), for requests served
    together. Reading pauses while more than `limit` waits unread."""

    def __init__(self, serve: Serve, limit: int) -> None:
        super().__init__()
        self._serve, self._limit = serve, limit
        # Taken when bytes come (get_buffer) and given back while none wait unread
        # (`_give_back`): an idle connection holds no buffer.
        self._buf = bytearray()
        self._start = self._end = 0  # unread bytes: _buf[_start:_end]
        self.eof = False
        self._exception: BaseException | None = None
        self._waiter: asyncio.Future | None = None
        self._paused_reading = False
        self._transport: asyncio.BaseTransport | None = None
        self._over_ssl = False
        self._closed = self._loop.create_future()
        self._task: asyncio.Task | None = None

    # --- the transport's side -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._over_ssl = transport.get_extra_info("sslcontext") is not None
        writer = asyncio.StreamWriter(transport, self, None, self._loop)  # type: ignore[arg-type]
        self._task = self._loop.create_task(self._serve(self, writer))
        self._task.add_done_callback(self._release)

    def get_buffer(self, sizehint: int) -> memoryview:
        if not self._buf:
            # A spare one when there is: a producer's grows to several megabytes, and fresh
            # memory costs (each page faulted in afresh: 17 % of the listener's samples when
            # every run of `bench kafka` connected anew and grew its buffer again).
            self._buf = _spare.pop() if _spare else bytearray(MIN_READ)
        self._room(MIN_READ)
        return memoryview(self._buf)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        self._wake()
        if not self._paused_reading and self.buffered() > self._limit:
            self._paused_reading = True
            self._transport.pause_reading()  # type: ignore[union-attr]

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return not self._over_ssl  # keep the write side open to answer, as StreamReader does

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)  # wakes writers waiting in drain
        self.eof = True
        if exc is not None:
            self._exception = exc
        self._wake()
        if not self._closed.done():
            self._closed.set_result(None)
        self._release()

    def _release(self, _: object = None) -> None:
        """Give the buffer back once neither the transport (closed) nor the serving task
        (done) can touch it."""
        if self._closed.done() and self._task is not None and self._task.done():
            self._give_back()

    def _give_back(self) -> None:
        """The buffer, empty, to the spares (up to SPARE_BUFFERS; one grown for a frame
        larger than twice the read-ahead is dropped): this connection takes one again when
        bytes come."""
        buf, self._buf, self._start, self._end = self._buf, bytearray(), 0, 0
        if 0 < len(buf) <= 2 * self._limit and len(_spare) < SPARE_BUFFERS:
            _spare.append(buf)

    def _get_close_waiter(self, stream: asyncio.StreamWriter) -> asyncio.Future:
        return self._closed  # StreamWriter.wait_closed

    # --- the connection's side ----------------------------------------------------------------

    def buffered(self) -> int:
        """Bytes received and not read yet."""
        return self._end - self._start

    def peek(self, n: int) -> bytes:
        """The first `n` bytes not read yet (fewer when fewer are there), left unread."""
        return bytes(self._buf[self._start:self._start + min(n, self.buffered())])

    async def readexactly(self, n: int) -> bytes:
        """The next `n` bytes; IncompleteReadError (with what came) when the peer closes first."""
        while self.buffered() < n:
            if self._exception is not None:
                raise self._exception
            if self.eof:
                partial = self.peek(self.buffered())
                self._start = self._end
                raise asyncio.IncompleteReadError(partial, n)
            if self.buffered():
                self._room(n - self.buffered())
            else:
                self._give_back()
            if self._paused_reading:  # a frame larger than the read-ahead: read on
                self._paused_reading = False
                self._transport.resume_reading()  # type: ignore[union-attr]
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        with memoryview(self._buf) as view:
            data = bytes(view[self._start:self._start + n])
        self._start += n
        if self._paused_reading and self.buffered() <= self._limit:
            self._paused_reading = False
            self._transport.resume_reading()  # type: ignore[union-attr]
        return data

    def _room(self, n: int) -> None:
        """At least `n` bytes free after the unread ones: moved to the front when no more of
        them are unread than were read before them (each byte moves once at most, on
        average), else into a buffer twice the size (never resized in place: the transport
        may hold a view of it)."""
        if len(self._buf) - self._end >= n:
            return
        start, unread = self._start, self.buffered()
        if start >= unread and len(self._buf) - unread >= n:
            target = self._buf
        else:
            target = bytearray(max(2 * len(self._buf), unread + n))
        with memoryview(self._buf) as source, memoryview(target) as into:
            into[:unread] = source[start:start + unread]  # not overlapping: unread <= start
        self._buf, self._start, self._end = target, 0, unread

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
