"""Building kio entities of any version from plain values, and writing frames.

kio generates one dataclass per API version, each with only that version's fields. Handlers
describe a response once as plain values (dicts, lists, ints) and `build` keeps what the
version has: a field the version lacks is dropped, one the handler left out gets its default
(kio's, or a zero/empty value), nested entities are built from dicts by their field types.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import types
import typing
from collections.abc import Sequence
from functools import cache
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.writers import write_compact_array_length, write_legacy_array_length
from kio.static.primitive import i32Timedelta, i64Timedelta

E = TypeVar("E")


@cache
def _fields(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type, has a default) per field of a kio entity class."""
    return tuple(
        (f.name, f.type, f.default is not dataclasses.MISSING
         or f.default_factory is not dataclasses.MISSING)
        for f in dataclasses.fields(cls)
    )


def _entity_of(kind: Any) -> type | None:
    """The entity class inside `kind` (X, tuple[X, ...], X | None), if any."""
    if dataclasses.is_dataclass(kind):
        return kind  # type: ignore[return-value]
    for arg in typing.get_args(kind):
        if dataclasses.is_dataclass(arg):
            return arg  # type: ignore[return-value]
    return None


def _is_tuple(kind: Any) -> bool:
    return typing.get_origin(kind) is tuple


def _unwrap(kind: Any) -> Any:
    """X for `X | None` (nullable arrays and entities), `kind` itself otherwise."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        others = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        if len(others) == 1:
            return others[0]
    return kind


def _convert(kind: Any, value: Any) -> Any:
    if value is None:
        return None
    kind = _unwrap(kind)
    entity = _entity_of(kind)
    if _is_tuple(kind):
        if entity is not None:
            return tuple(v if isinstance(v, entity) else build(entity, **v) for v in value)
        return tuple(value)
    if entity is not None and isinstance(value, dict):
        return build(entity, **value)
    if kind in (i32Timedelta, i64Timedelta) and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kind is ErrorCode and not isinstance(value, ErrorCode):
        return ErrorCode(value)
    return value


def _zero(kind: Any) -> Any:
    if _is_tuple(kind):
        return ()
    if kind in (i32Timedelta, i64Timedelta):
        return datetime.timedelta(0)
    if kind is ErrorCode:
        return ErrorCode.none
    if kind is bool:
        return False
    if kind is str:
        return ""
    if kind is bytes:
        return b""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        return None
    entity = _entity_of(kind)
    if entity is not None:
        return build(entity)
    return 0


def build(cls: type[E], **values: Any) -> E:
    """An instance of kio entity `cls` from `values`, keeping only the fields `cls` has."""
    kwargs: dict[str, Any] = {}
    for name, kind, has_default in _fields(cls):
        if name in values:
            kwargs[name] = _convert(kind, values[name])
        elif not has_default:
            kwargs[name] = _zero(kind)
    return cls(**kwargs)


def has_field(cls: type, name: str) -> bool:
    return any(field == name for field, _, _ in _fields(cls))


@cache
def reader(cls: type) -> Any:
    return entity_reader(cls)


@cache
def writer(cls: type) -> Any:
    return entity_writer(cls)


def encode(*entities: Any) -> bytes:
    """The entities written one after the other (a response header, then its body)."""
    return b"".join(_written(b"", entities)[0])


def item_class(cls: type, field: str) -> type:
    """The entity class of the items of `cls`'s array field `field`."""
    kind = next(kind for name, kind, _ in _fields(cls) if name == field)
    entity = _entity_of(_unwrap(kind))
    if entity is None:
        raise TypeError(f"{cls.__name__}.{field} is not an array of entities")
    return entity


@dataclasses.dataclass(frozen=True)
class Spliced:
    """A response one of whose arrays is sent as `items`, each the encoded bytes of one entity
    of the array's type: a Metadata for every topic of a big cluster (issue 33) encodes each
    topic once and then only copies it. `response` is the entity with `marker` as that array's
    only item, an item whose encoding occurs nowhere else in it (a unique name)."""

    response: Any
    marker: Any
    items: Sequence[bytes]

    def write(self, buffer: Parts) -> None:
        whole, mark = encode(self.response), encode(self.marker)
        at = whole.index(mark)
        one = self._length(1)
        start = at - len(one)
        if whole[start:at] != one:
            raise ValueError("the marker is not the only item of its array")
        buffer.write(whole[:start])
        buffer.write(self._length(len(self.items)))
        buffer.writelines(self.items)
        buffer.write(whole[at + len(mark):])

    def _length(self, count: int) -> bytes:
        """An array's length as the response's version writes it."""
        out = io.BytesIO()
        if self.response.__flexible__:
            write_compact_array_length(out, count)
        else:
            write_legacy_array_length(out, count)
        return out.getvalue()


Frame = list[bytes | bytearray]  # a response frame's parts, sent one after the other


class Records:
    """A Fetch partition's record batches in parts (Fetched.parts), a `records` value kio
    writes as bytes (their length, then them), which `Parts` keeps as they are."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: Sequence[bytes]) -> None:
        self.parts = parts
        self.size = sum(map(len, parts))

    def __len__(self) -> int:
        return self.size


class Parts:
    """Entities written as a list of parts: small writes gathered in a part, each large one
    (a fetch's record batches) a part as it is, not copied into one buffer with the rest.
    `head`: the first part's first bytes (room for a frame's length)."""

    LARGE = 1 << 15

    def __init__(self, head: bytes) -> None:
        self.parts: Frame = []
        self._small = bytearray(head)
        self.size = 0

    def write(self, data: bytes | Records) -> int:
        if isinstance(data, Records) or len(data) >= self.LARGE:
            if self._small:
                self.parts.append(self._small)
                self._small = bytearray()
            self.parts.extend(data.parts if isinstance(data, Records) else (data,))
        else:
            self._small += data
        self.size += len(data)
        return len(data)

    def writelines(self, items: Sequence[bytes]) -> None:
        for item in items:
            self.write(item)

    def done(self) -> Frame:
        if self._small or not self.parts:
            self.parts.append(self._small)
            self._small = bytearray()
        return self.parts


def _written(head: bytes, entities: Sequence[Any]) -> tuple[Frame, int]:
    """The entities' parts behind `head`, and their size without it."""
    buffer = Parts(head)
    for entity in entities:
        if isinstance(entity, Spliced):
            entity.write(buffer)
        else:
            writer(type(entity))(buffer, entity)
    return buffer.done(), buffer.size


def frame_parts(*entities: Any) -> Frame:
    """The entities written one after the other behind the frame's 4-byte length, as the
    connection sends them: a fetch's megabytes are sent from where they are."""
    parts, size = _written(b"\0\0\0\0", entities)
    parts[0][:4] = size.to_bytes(4, "big")  # type: ignore[index]
    return parts


def encode_frame(*entities: Any) -> bytes:
    """`frame_parts` in one piece."""
    return b"".join(frame_parts(*entities))
