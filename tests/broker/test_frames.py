"""broker/frames.py: the socket receives straight into one buffer that frames are cut from."""

from __future__ import annotations

import asyncio

import pytest

from broker import frames
from broker.frames import FrameReader


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.paused = False
        self.closing = False

    def get_extra_info(self, name, default=None):  # type: ignore[no-untyped-def]
        return default

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True


def receive(reader: FrameReader, data: bytes) -> None:
    """What the transport does: receive into the offered buffer, then say how much came."""
    while data:
        room = reader.get_buffer(-1)
        n = min(len(room), len(data))
        room[:n] = data[:n]
        del room
        reader.buffer_updated(n)
        data = data[n:]


async def _connected(limit: int = 1 << 20) -> tuple[FrameReader, Transport, asyncio.Future]:
    served: asyncio.Future = asyncio.get_running_loop().create_future()

    async def serve(reader: FrameReader, writer: asyncio.StreamWriter) -> None:
        served.set_result(writer)

    reader, transport = FrameReader(serve, limit), Transport()
    reader.connection_made(transport)
    await served
    return reader, transport, served


def test_frames_are_cut_from_what_came_in_pieces_and_a_close_mid_frame_says_so():
    asyncio.run(_frames_are_cut_from_what_came_in_pieces_and_a_close_mid_frame_says_so())


async def _frames_are_cut_from_what_came_in_pieces_and_a_close_mid_frame_says_so() -> None:
    reader, _, _ = await _connected()
    frame = bytes(range(256)) * 1000  # larger than the buffer it starts with
    pending = asyncio.ensure_future(reader.readexactly(4 + len(frame)))
    whole = len(frame).to_bytes(4, "big") + frame
    for at in range(0, len(whole), 70_000):
        receive(reader, whole[at:at + 70_000])
        await asyncio.sleep(0)
    assert (await pending)[4:] == frame
    receive(reader, b"\x00\x00\x00\x09abc")
    assert reader.buffered() == 7 and reader.peek(4) == b"\x00\x00\x00\x09"
    assert await reader.readexactly(4) == b"\x00\x00\x00\x09"
    assert not reader.eof
    reader.eof_received()
    with pytest.raises(asyncio.IncompleteReadError) as error:
        await reader.readexactly(9)
    assert error.value.partial == b"abc" and reader.eof


def test_reading_pauses_past_the_read_ahead_and_resumes_once_read():
    asyncio.run(_reading_pauses_past_the_read_ahead_and_resumes_once_read())


async def _reading_pauses_past_the_read_ahead_and_resumes_once_read() -> None:
    reader, transport, _ = await _connected(limit=100_000)
    receive(reader, b"x" * 150_000)
    assert transport.paused
    await reader.readexactly(100_000)
    assert not transport.paused
    # A frame larger than the read-ahead is read on whole.
    receive(reader, b"y" * 200_000)
    assert transport.paused
    assert await reader.readexactly(250_000) == b"x" * 50_000 + b"y" * 200_000


def test_an_emptied_buffer_serves_the_next_connection_and_an_idle_one_holds_none(monkeypatch):
    monkeypatch.setattr(frames, "_spare", [])
    asyncio.run(_an_emptied_buffer_serves_the_next_connection_and_an_idle_one_holds_none())


async def _an_emptied_buffer_serves_the_next_connection_and_an_idle_one_holds_none() -> None:
    reader, _, _ = await _connected()
    receive(reader, b"z" * 300_000)
    await reader.readexactly(300_000)
    grown = reader._buf
    waiting = asyncio.ensure_future(reader.readexactly(4))
    await asyncio.sleep(0)  # nothing unread while it waits: the buffer goes back
    assert reader._buf == bytearray() and frames._spare == [grown]
    receive(reader, b"\x00\x00\x00\x01")
    assert await waiting == b"\x00\x00\x00\x01" and reader._buf is grown
    reader.connection_lost(None)
    await asyncio.sleep(0)  # the serving task's done callback
    assert frames._spare == [grown]
    following, _, _ = await _connected()
    following.get_buffer(-1)
    assert following._buf is grown and frames._spare == []
