"""The handler registry and the path of one request: header, body, handler, response.

A handler is registered for an API key's version range with `@handles(key, min, max)`; it
receives the Session, the request header and the kio request entity of the version the client
sent, and returns the kio response entity of the same version (`response_class(request)`), or
None to send no response (Produce with acks=0). ApiVersions answers from this registry only,
so an API nobody registered is never advertised.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from kio.index import load_request_schema as _load_request_schema
from kio.index import load_response_schema as _load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1

from broker import errors
from broker.codec import build, encode, has_field, reader
from broker.errors import CloseConnection, KafkaError

if TYPE_CHECKING:
    from broker.session import Session

log = structlog.get_logger(__name__)
RequestHeader = RequestHeaderV1 | RequestHeaderV2
Handler = Callable[["Session", RequestHeader, Any], Awaitable[Any]]
API_VERSIONS = 18
# What an unauthenticated connection may send (Kafka closes the connection on anything else).
BEFORE_AUTH = frozenset({API_VERSIONS, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate
_PREFIX = struct.Struct(">hhi")
# kio finds a schema class by importing its dotted name (pkgutil.resolve_name) on every call:
# ~4 % of the listener's time under a producer; the classes never change.
load_request_schema = functools.cache(_load_request_schema)
load_response_schema = functools.cache(_load_response_schema)
MAX_THROTTLE_MS = 30_000  # the most one answer asks its client to wait (Kafka caps it too)


@dataclass(frozen=True)
class Registration:
    handler: Handler
    min_version: int
    max_version: int


registry: dict[int, Registration] = {}
RawHandler = Callable[["Session", bytes], Awaitable[bytes | None]]
_raw_sasl: list[RawHandler] = []


def handles(api_key: int, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        if api_key in registry:
            raise RuntimeError(f"two handlers for API key {api_key}")
        registry[api_key] = Registration(handler, min_version, max_version)
        return handler

    return register


def on_raw_sasl(handler: RawHandler) -> RawHandler:
    """The handler of the unframed SASL token a client sends after SaslHandshake v0."""
    _raw_sasl[:] = [handler]
    return handler


def supported(api_key: int, version: int) -> bool:
    found = registry.get(api_key)
    return found is not None and found.min_version <= version <= found.max_version


def response_class(request: Any) -> type:
    return load_response_schema(request.__api_key__, request.__version__)


def _frame_prefix(payload: bytes) -> tuple[int, int, int]:
    if len(payload) < _PREFIX.size:
        raise CloseConnection(f"a request of {len(payload)} bytes is shorter than its header")
    return _PREFIX.unpack_from(payload)


def _decode(payload: bytes, api_key: int, version: int) -> tuple[RequestHeader, Any]:
    request_cls = load_request_schema(api_key, version)
    header_cls = RequestHeaderV2 if request_cls.__flexible__ else RequestHeaderV1
    try:
        header, size = reader(header_cls)(payload, 0)
        request, _ = reader(request_cls)(payload, size)
    except Exception as error:  # kio raises several kinds on truncated or garbled input
        raise CloseConnection(f"cannot parse {request_cls.__name__}: {error}") from error
    return header, request


def _encode(correlation_id: int, response: Any) -> bytes:
    # ApiVersions responses keep header v0 whatever their version, so that a client can read
    # one before it knows which versions the broker speaks (KIP-511).
    flexible = response.__flexible__ and response.__api_key__ != API_VERSIONS
    header = (ResponseHeaderV1 if flexible else ResponseHeaderV0)(correlation_id=correlation_id)
    return encode(header, response)


def unsupported_versions(correlation_id: int) -> bytes:
    """ApiVersions v0 with UNSUPPORTED_VERSION and what is supported, the answer Kafka gives a
    client asking ApiVersions in a version it does not know, so the client retries lower."""
    response_cls = load_response_schema(API_VERSIONS, 0)
    return _encode(correlation_id, build(response_cls, error_code=errors.UNSUPPORTED_VERSION,
                                         api_keys=advertised()))


def advertised() -> list[dict[str, int]]:
    return [{"api_key": key, "min_version": r.min_version, "max_version": r.max_version}
            for key, r in sorted(registry.items())]


def _error_response(request: Any, error: KafkaError) -> Any:
    response_cls = response_class(request)
    if not has_field(response_cls, "error_code"):
        raise CloseConnection(f"{type(request).__name__} failed: {error.message}") from error
    return build(response_cls, error_code=error.code, error_message=error.message or None)


async def dispatch(session: Session, payload: bytes) -> bytes | None:
    """The encoded response to one request frame (None: nothing to send); CloseConnection
    when the connection must be closed without an answer."""
    if session.raw_sasl:
        return await _raw_sasl[0](session, payload)
    api_key, version, correlation_id = _frame_prefix(payload)
    if not supported(api_key, version):
        if api_key == API_VERSIONS:
            session.note("unsupported_version", api_key=api_key, version=version)
            return unsupported_versions(correlation_id)
        raise CloseConnection(f"API key {api_key} version {version} is not supported")
    if session.user is None and api_key not in BEFORE_AUTH:
        raise CloseConnection(f"API key {api_key} before SASL authentication")
    if api_key not in BEFORE_AUTH and session.expired():
        raise CloseConnection(f"API key {api_key} after the SASL session expired: re-authenticate"
                              " before session_lifetime_ms passes (KIP-368)")
    header, request = _decode(payload, api_key, version)
    session.client_id = header.client_id or session.client_id
    session.throttle_seconds = 0.0
    if api_key not in BEFORE_AUTH:
        await session.charge_request()
    try:
        response = await registry[api_key].handler(session, header, request)
    except KafkaError as error:
        session.note("request_failed", api_key=api_key, code=error.code.name,
                     message=error.message)
        response = _error_response(request, error)
    if response is None:
        return None
    if session.throttle_seconds > 0 and has_field(type(response), "throttle_time"):
        response = dataclasses.replace(response, throttle_time=datetime.timedelta(
            milliseconds=min(int(session.throttle_seconds * 1000), MAX_THROTTLE_MS)))
    return _encode(correlation_id, response)
