"""The listener process: accepts connections, reads length-prefixed frames, answers them in
order, one Session per connection.

As a Kafka broker does, a connection is closed (and logged once) when a frame's length is
negative or over `max_request_bytes` (socket.request.max.bytes), when a request cannot be
parsed, when a client sends nothing for `idle_seconds` (connections.max.idle.ms) or stalls in
the middle of a frame; no other connection notices. Before sign-in frames are smaller and the
client has a deadline to sign in; a frame must arrive whole within its own deadline; an
address has so many connections at most (broker/limits.py). What is refused for a
limit is counted for /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import signal
import ssl
import sys
import threading
import zlib
from collections.abc import Awaitable
from dataclasses import dataclass

import structlog
from django.conf import settings

import broker.apis  # noqa: F401  (registers the handlers)
from broker.apis.transactions import TransactionTimeouts
from broker.dispatch import (
    MAX_THROTTLE_MS,
    MAX_TOGETHER,
    dispatch,
    dispatch_together,
    goes_together,
)
from broker.errors import CloseConnection
from broker.frames import FrameReader
from broker.limits import ConnectionGate, Limits, Refused, address_of
from broker.nodes import Beacon
from broker.revocation import RevocationWatch
from broker.session import Listener, Node, Session
from replication.counters import count_refusal

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ListenerOptions:
    listen: str = "127.0.0.1:9092"
    advertise: str = ""  # defaults to `listen`
    node_id: int | None = None  # defaults to a hash of the advertised address
    cluster: str | None = None
    default_stream: str | None = None


def split_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:9092)")
    return host.strip("[]") or "0.0.0.0", int(port)


def stable_node_id(host: str, port: int) -> int:
    """A node id that stays the same across restarts of the listener at one address."""
    return zlib.crc32(f"{host}:{port}".encode()) & 0x3FFFFFFF


def tls_context() -> ssl.SSLContext | None:
    if not settings.KAFKA_TLS_CERT:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(settings.KAFKA_TLS_CERT, settings.KAFKA_TLS_KEY)
    return context


async def _within(read: Awaitable[bytes], waits: list[tuple[float, Refused | None]]) -> bytes:
    """`read`, cut off by the shortest of `waits`: its refusal, or TimeoutError (idle) for
    None."""
    seconds, refusal = min(waits, key=lambda wait: wait[0])
    try:
        async with asyncio.timeout(seconds):
            return await read
    except TimeoutError:
        if refusal is None:
            raise
        raise refusal from None


async def _read_frame(reader: FrameReader, listener: Listener, limits: Limits,
                      sign_in_by: float | None) -> bytes:
    """One frame. Before sign-in (`sign_in_by`: the loop time it must be done by) frames are
    smaller and every wait ends at that deadline; a frame begun must arrive whole within the
    frame deadline, so a client trickling a byte at a time is cut off."""
    waits: list[tuple[float, Refused | None]] = [(listener.idle_seconds, None)]
    limit = listener.max_request_bytes
    if sign_in_by is not None:
        limit = min(limit, limits.preauth_bytes)
        waits.append((sign_in_by - asyncio.get_running_loop().time(), Refused(
            "sign_in_timeout", f"not signed in within {limits.auth_seconds} s of connecting "
            "(STREAMGATE_KAFKA_AUTH_SECONDS)")))
    size = int.from_bytes(await _within(reader.readexactly(4), waits), "big", signed=True)
    if sign_in_by is not None and limit < size <= listener.max_request_bytes:
        raise Refused("frame_before_sign_in", f"a frame of {size} bytes before SASL sign-in: "
                      f"at most {limit} (STREAMGATE_KAFKA_MAX_PREAUTH_BYTES, Kafka's "
                      "sasl.server.max.receive.size)")
    if size < 0 or size > limit:
        raise CloseConnection(f"a frame of {size} bytes is outside 0..{listener.max_request_bytes}"
                              " (socket.request.max.bytes)")
    waits.append((limits.frame_seconds, Refused(
        "frame_timeout", f"a frame of {size} bytes not received within {limits.frame_seconds} s "
        "(STREAMGATE_KAFKA_FRAME_SECONDS)")))
    # A client that stalls inside a frame is cut off after the idle time too.
    return await _within(reader.readexactly(size), waits)


async def _received_with(reader: FrameReader, frame: bytes, listener: Listener) -> list[bytes]:
    """`frame` and the frames of its API key received whole after it and not read yet, when
    its requests may be served together (dispatch.goes_together: consecutive Produce
    requests, which a client sends several of before the first answer): at most
    MAX_TOGETHER, and only what is there already, never waiting for more."""
    frames = [frame]
    if not goes_together(frame[:2]):
        return frames
    while len(frames) < MAX_TOGETHER and reader.buffered() >= 6:
        head = reader.peek(6)
        size = int.from_bytes(head[:4], "big", signed=True)
        if not 0 <= size <= listener.max_request_bytes or reader.buffered() < 4 + size or \
                head[4:6] != frame[:2]:
            break
        await reader.readexactly(4)  # there already: neither waits
        frames.append(await reader.readexactly(size))
    return frames


def _peer_left(reader: FrameReader, writer: asyncio.StreamWriter) -> bool:
    """Whether the client closed the connection (EOF received, whatever requests are still
    buffered). Read from the thread pool too: a bool, set once."""
    return writer.transport.is_closing() or reader.eof


def refused(listener: Listener, reason: str) -> None:
    """Count a refusal for /metrics, in the thread pool (the count is a cache round trip)."""
    listener.executor.submit(count_refusal, reason)


async def serve_connection(listener: Listener, reader: FrameReader,
                           writer: asyncio.StreamWriter, limits: Limits | None = None,
                           gate: ConnectionGate | None = None) -> None:
    peer = writer.get_extra_info("peername")
    session = Session(listener, f"{peer[0]}:{peer[1]}" if peer else "?")
    limits, address = limits or Limits.from_settings(), address_of(session.peer)
    if gate is not None and not gate.admit(address):
        await _turn_away(listener, writer, address, gate.limit)
        return
    session.peer_left = functools.partial(_peer_left, reader, writer)
    listener.sessions[session] = asyncio.current_task()  # for Session.revoke
    sign_in_by = asyncio.get_running_loop().time() + limits.auth_seconds
    try:
        while True:
            frame = await _read_frame(reader, listener, limits,
                                      None if session.user else sign_in_by)
            frames = (await _received_with(reader, frame, listener)
                      if session.user and not session.throttled else [frame])
            if len(frames) == 1:
                responses = [await dispatch(session, frame)]
            else:
                responses = await dispatch_together(session, frames)
            for response in responses:
                for part in response or ():  # framed already (dispatch), None: no answer
                    writer.write(part)
            await writer.drain()
            if session.throttle_seconds > 0:  # over a tenant's quota: muted meanwhile (KIP-219)
                await asyncio.sleep(min(session.throttle_seconds, MAX_THROTTLE_MS / 1000))
            if session.close_after:  # answered, then closed (a failed sign-in, as Kafka does)
                raise CloseConnection(session.close_after)
    except Refused as error:
        refused(listener, error.reason)
        session.note("connection_closed", reason=str(error))
    except asyncio.IncompleteReadError as error:
        if error.partial:
            session.note("connection_closed_mid_frame", received=len(error.partial))
    except TimeoutError:
        session.note("connection_idle_closed", idle_seconds=listener.idle_seconds)
    except CloseConnection as error:
        session.note("connection_closed", reason=str(error))
    except (ConnectionError, ssl.SSLError):
        pass
    except Exception:
        session.log.exception("connection_failed", client_id=session.client_id)
    finally:
        listener.sessions.pop(session, None)
        if gate is not None:
            gate.release(address)
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _turn_away(listener: Listener, writer: asyncio.StreamWriter, address: str,
                     limit: int) -> None:
    """Close a connection past the per-address limit at once, logged once per address."""
    refused(listener, "connections_per_address")
    if address not in listener.noted and len(listener.noted) < 10_000:
        listener.noted.add(address)
        log.warning("connection_refused", peer=address, reason=f"{limit} connections open from "
                    "this address already (STREAMGATE_KAFKA_CONNECTIONS_PER_IP)")
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


def make_listener(options: ListenerOptions, bound_port: int) -> Listener:
    listen_host, _ = split_address(options.listen)
    host, port = split_address(options.advertise) if options.advertise else (listen_host,
                                                                              bound_port)
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    node_id = options.node_id if options.node_id is not None else stable_node_id(host, port)
    return Listener(node=Node(node_id, host, port), cluster=options.cluster,
                    default_stream=options.default_stream,
                    max_request_bytes=settings.KAFKA_MAX_REQUEST_BYTES,
                    idle_seconds=settings.KAFKA_IDLE_SECONDS)


def return_large_buffers() -> None:
    """Have glibc map every buffer of 4 MiB or more on its own, so a large frame or
    decompressed batch goes back to the system once answered. By default glibc raises that
    threshold after the first large free and then keeps such buffers in each thread's arena:
    a listener that decoded a few large batches stayed hundreds of MB larger for good. Not
    lower: at 256 KiB every fetch response and produce batch was a fresh mapping, and the
    listener spent 12-18 % more CPU per produced message (python -m bench kafka).

    Fixing that threshold also fixes glibc's trim threshold at its 128 KiB default, so each
    free of a produce's frames and batch copies (about a megabyte a request group) gave the
    arena's top back to the system and the next request faulted it in afresh: at 8 MiB the
    listener spends about a third less CPU per produced message (docs/benchmarks.md, Kafka).
    Not more: at 16 MiB each thread's arena kept enough that the listener's peak under
    compressed batches grew past its memory bound (tests/broker/test_limits.py). Buffers of
    4 MiB or more still go back at once."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: its own allocator
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, 4 << 20)
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
TRIM_THRESHOLD_BYTES = 8 << 20
# A connection's requests are read ahead of the one being served up to this (FrameReader
# stops reading the socket past that), so that its client closing it is seen: a produce whose
# client left is not written (broker/apis/produce.py). librdkafka pipelines up to five requests
# of up to about a megabyte each; with 1 MiB here the listener stopped reading, never saw the
# close, and wrote the requests a client had given up on and then sent again renumbered under
# a new epoch: stored twice (invariant 10, the chaos soak's run 12).
READ_AHEAD_BYTES = 8 << 20


async def serve(options: ListenerOptions, stop: asyncio.Event | None = None) -> None:
    """Listen until `stop` is set (or SIGTERM/SIGINT when it is None)."""
    return_large_buffers()
    stop = stop or _stop_on_signals()
    host, port = split_address(options.listen)
    holder: list[Listener] = []
    limits = Limits.from_settings()
    gate = ConnectionGate(limits.connections_per_ip)
    # Bound first and serving only once the listener exists (port 0 is known after binding),
    # so a client reconnecting the instant a restarted listener binds is served, not dropped.
    server = await asyncio.get_running_loop().create_server(
        lambda: FrameReader(lambda r, w: serve_connection(holder[0], r, w, limits, gate),
                            READ_AHEAD_BYTES), host, port,
        ssl=tls_context(), start_serving=False)
    bound = server.sockets[0].getsockname()[1]
    listener = make_listener(options, bound)
    holder.append(listener)
    await server.start_serving()
    async with server, Beacon(listener), RevocationWatch(listener), TransactionTimeouts(listener):
        log.info("kafka_listening", listen=f"{host}:{bound}", node_id=listener.node_id,
                 advertise=f"{listener.host}:{listener.port}", cluster=options.cluster,
                 tls=settings.KAFKA_TLS_CERT != "")
        print(f"kafka listener ready on {host}:{bound} node {listener.node_id}", flush=True)
        await stop.wait()
    listener.executor.shutdown(wait=False, cancel_futures=True)


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop


def share_the_interpreter() -> None:
    """The event loop and the thread pool's appends share one GIL: a tenant's megabyte produce
    being decoded in one thread held another tenant's small request for the interpreter's
    5 ms switch interval at each of the hand-overs its path takes (the quiet tenant's p99
    beside a noisy one at its quota: 64.8 ms, 26.5 ms at 1 ms). A shorter interval gives the
    small requests their turn sooner, for a little of the big ones' throughput."""
    sys.setswitchinterval(settings.KAFKA_SWITCH_INTERVAL_MS / 1000)


def run_listener(options: ListenerOptions) -> None:
    share_the_interpreter()
    asyncio.run(serve(options))


def start_listener_thread(options: ListenerOptions) -> threading.Thread:
    """A listener on an event loop of its own in this process (embedded mode: `make run`),
    serving until the process exits."""

    async def forever() -> None:
        await serve(options, asyncio.Event())

    thread = threading.Thread(target=asyncio.run, args=(forever(),), name="kafka-listener",
                              daemon=True)
    thread.start()
    return thread
