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
from broker.codec import Frame, Spliced, build, frame_parts, has_field, reader
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


def _encode(correlation_id: int, response: Any) -> Frame:
    # ApiVersions responses keep header v0 whatever their version, so that a client can read
    # one before it knows which versions the broker speaks (KIP-511).
    entity = response.response if isinstance(response, Spliced) else response
    flexible = entity.__flexible__ and entity.__api_key__ != API_VERSIONS
    header = (ResponseHeaderV1 if flexible else ResponseHeaderV0)(correlation_id=correlation_id)
    return frame_parts(header, response)


def unsupported_versions(correlation_id: int) -> Frame:
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


async def dispatch(session: Session, payload: bytes) -> Frame | None:
    """The response frame (its length first, in parts) to one request frame (None: nothing
    to send); CloseConnection when the connection must be closed without an answer."""
    if session.raw_sasl:
        token = await _raw_sasl[0](session, payload)
        return None if token is None else [len(token).to_bytes(4, "big") + token]
    api_key, version, correlation_id = _frame_prefix(payload)
    if not supported(api_key, version):
        if api_key == API_VERSIONS:
            session.note("unsupported_version", api_key=api_key, version=version)
            return unsupported_versions(correlation_id)
        raise CloseConnection(f"API key {api_key} version {version} is not supported")
    _check_session(session, api_key)
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
    return _answer(session, correlation_id, response)


def _check_session(session: Session, api_key: int) -> None:
    if session.user is None and api_key not in BEFORE_AUTH:
        raise CloseConnection(f"API key {api_key} before SASL authentication")
    if api_key not in BEFORE_AUTH and session.expired():
        raise CloseConnection(f"API key {api_key} after the SASL session expired: re-authenticate"
                              " before session_lifetime_ms passes (KIP-368)")


def _answer(session: Session, correlation_id: int, response: Any) -> Frame | None:
    if response is None:
        return None
    if session.throttle_seconds > 0:
        throttle = datetime.timedelta(
            milliseconds=min(int(session.throttle_seconds * 1000), MAX_THROTTLE_MS))
        response = _throttled(response, throttle)
    return _encode(correlation_id, response)


def _throttled(response: Any, throttle: datetime.timedelta) -> Any:
    if isinstance(response, Spliced):
        return dataclasses.replace(response, response=_throttled(response.response, throttle))
    if not has_field(type(response), "throttle_time"):
        return response
    return dataclasses.replace(response, throttle_time=throttle)


# --- requests served together -------------------------------------------------------------

MAX_TOGETHER = 5  # as many as a Kafka client keeps in flight on a connection (librdkafka's 5)
TogetherHandler = Callable[["Session", list[Any]], Awaitable[list[Any]]]
together: dict[int, tuple[Callable[[list[Any]], bool], TogetherHandler]] = {}


def handles_together(api_key: int, may: Callable[[list[Any]], bool],
                     ) -> Callable[[TogetherHandler], TogetherHandler]:
    """Register the handler of consecutive requests of `api_key` already received on one
    connection, served at once when `may` says they can be (else one by one); it answers
    each request, in order."""
    def register(handler: TogetherHandler) -> TogetherHandler:
        together[api_key] = (may, handler)
        return handler

    return register


def goes_together(head: bytes) -> bool:
    """Whether a frame beginning with `head` (its API key first) may be served with the ones
    of its key that follow it."""
    return len(head) >= 2 and int.from_bytes(head[:2], "big", signed=True) in together


async def dispatch_together(session: Session, payloads: list[bytes]) -> list[Frame | None]:
    """The responses to consecutive frames of one API key with a handler in `together`, in
    order: served together when all parse and its `may` agrees, else one by one (each
    request's checks, quotas and errors as `dispatch` applies them)."""
    decoded = []
    if not session.raw_sasl and session.user is not None:
        for payload in payloads:
            api_key, version, correlation_id = _frame_prefix(payload)
            if api_key not in together or not supported(api_key, version):
                break
            decoded.append((api_key, correlation_id, *_decode(payload, api_key, version)))
    keys = {api_key for api_key, *_ in decoded}
    requests = [request for *_, request in decoded]
    if len(decoded) < 2 or len(decoded) != len(payloads) or len(keys) != 1 or \
            not together[keys.pop()][0](requests):
        return [await dispatch(session, payload) for payload in payloads]
    api_key = decoded[0][0]
    _check_session(session, api_key)
    session.client_id = decoded[-1][2].client_id or session.client_id
    session.throttle_seconds = 0.0
    for _ in decoded:
        await session.charge_request()
    try:
        responses = await together[api_key][1](session, requests)
    except KafkaError as error:
        session.note("request_failed", api_key=api_key, code=error.code.name,
                     message=error.message)
        responses = [_error_response(request, error) for request in requests]
    return [_answer(session, correlation_id, response)
            for (_, correlation_id, *_), response in zip(decoded, responses, strict=True)]
