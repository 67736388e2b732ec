"""The record batch's compression codecs (attributes bits 0-2): compress, and decompress in
bounded steps, so a compression bomb is refused before it expands (recordbatch.py frames and
decodes the batches these bytes sit in)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame
import zstandard

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
CHUNK = 256 * 1024  # decompressed in steps of at most this
_XERIAL = b"\x82SNAPPY\x00"
_INT32 = struct.Struct(">i")


class CorruptRecord(ValueError):
    """The batch is not valid record batch v2: Kafka's CORRUPT_MESSAGE."""

    kafka_error = "corrupt_message"


class BatchTooLarge(ValueError):
    """The batch's records would take more than the listener allows decoded: Kafka's
    RECORD_LIST_TOO_LARGE, answered before that memory is spent."""

    kafka_error = "record_list_too_large"


def decompress(codec: int, data: bytes, limit: int) -> bytes:
    """The records section decompressed in steps of at most CHUNK bytes, refused with
    BatchTooLarge as soon as it passes `limit`: a bomb costs at most limit + 1 bytes, never
    what it would expand to."""
    out = bytearray()
    _inflate(codec, data, out, limit)
    return bytes(out)


def decompressed_size(codec: int, data: bytes, limit: int) -> int:
    """What the records section takes decompressed, each step counted and dropped (a check
    keeps nothing: memory is one step, CHUNK bytes); refused as `decompress` refuses."""
    counted = _Counted()
    _inflate(codec, data, counted, limit)  # type: ignore[arg-type]
    return len(counted)


def _inflate(codec: int, data: bytes, out: bytearray, limit: int) -> None:
    inflate = _INFLATE.get(codec)
    if inflate is None:
        raise CorruptRecord(f"unknown compression codec {codec} in the batch attributes (0-4)")
    try:
        inflate(data, out, limit)
    except (cramjam.DecompressionError, zlib.error, zstandard.ZstdError, RuntimeError,
            struct.error) as error:  # lz4.frame raises RuntimeError on a bad frame
        raise CorruptRecord(f"the records do not decompress with codec {codec}: {error}") from None


class _Counted:
    """Where decompressed pieces go when only their total matters: `out += piece` counts."""

    def __init__(self) -> None:
        self.total = 0

    def __iadd__(self, piece: bytes) -> _Counted:
        self.total += len(piece)
        return self

    def __len__(self) -> int:
        return self.total


def _room(out: bytearray, limit: int) -> int:
    """How much the next step may produce: one chunk, or one byte past the limit."""
    return min(CHUNK, limit + 1 - len(out))


def _add(out: bytearray, piece: bytes, limit: int) -> None:
    out += piece
    if len(out) > limit:
        raise BatchTooLarge(f"the records decompress to more than {limit} bytes")


def _gunzip(data: bytes, out: bytearray, limit: int) -> None:
    while data:  # gzip members one after another, as gzip allows
        inflater, pending = zlib.decompressobj(wbits=31), data
        while not inflater.eof:
            piece = inflater.decompress(pending, _room(out, limit))
            pending = inflater.unconsumed_tail
            if not piece and not pending and not inflater.eof:
                raise CorruptRecord("the gzip records end before their stream does")
            _add(out, piece, limit)
        data = inflater.unused_data


def _unlz4(data: bytes, out: bytearray, limit: int) -> None:
    while data:  # LZ4 frames one after another
        frame = lz4.frame.LZ4FrameDecompressor()
        _add(out, frame.decompress(data, max_length=_room(out, limit)), limit)
        while not frame.eof:
            if frame.needs_input:
                raise CorruptRecord("the lz4 records end before their frame does")
            _add(out, frame.decompress(b"", max_length=_room(out, limit)), limit)
        data = frame.unused_data


def _unzstd(data: bytes, out: bytearray, limit: int) -> None:
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    while piece := reader.read(_room(out, limit)):
        _add(out, piece, limit)


def _unsnappy(data: bytes, out: bytearray, limit: int) -> None:
    """Raw snappy (librdkafka) or xerial-framed snappy (the Java client): the magic header,
    two int32 versions, then blocks each prefixed with its int32 length. A raw block states
    its decompressed length first: a block past the limit is refused before it is expanded."""
    blocks = [data]
    if data.startswith(_XERIAL):
        pos, blocks = 16, []
        while pos < len(data):
            (size,) = _INT32.unpack_from(data, pos)
            blocks.append(data[pos + 4 : pos + 4 + size])
            pos += 4 + size
    for block in blocks:
        if len(out) + cramjam.snappy.decompress_raw_len(block) > limit:
            raise BatchTooLarge(f"the records decompress to more than {limit} bytes")
        _add(out, bytes(cramjam.snappy.decompress_raw(block)), limit)


_INFLATE: dict[int, Callable[[bytes, bytearray, int], None]] = {
    GZIP: _gunzip, SNAPPY: _unsnappy, LZ4: _unlz4, ZSTD: _unzstd}


def compress(codec: int, data: bytes) -> bytes:
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    return data
