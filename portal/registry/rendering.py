"""Confluent's media types and error bodies: {"error_code": 40401, "message": "..."}."""

from __future__ import annotations

import logging
from typing import Any

from django.http import Http404
from rest_framework import exceptions
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from portal.unavailable import as_unavailable, retry_headers
from replication.errors import StreamgateError

logger = logging.getLogger(__name__)
MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryRenderer(JSONRenderer):
    media_type = MEDIA_TYPE


class RegistryParser(JSONParser):
    media_type = MEDIA_TYPE


class RegistryAnyVersionParser(JSONParser):
    media_type = "application/vnd.schemaregistry+json"


class OctetStreamJSONParser(JSONParser):
    """Confluent's registry reads a body sent without a JSON type (curl's default) as JSON."""

    media_type = "application/octet-stream"


PARSERS = [RegistryParser, RegistryAnyVersionParser, JSONParser, OctetStreamJSONParser]


class AlwaysRegistryJSON(BaseContentNegotiation):
    """Every answer in the registry's media type, whatever Accept lists (as Confluent)."""

    def select_parser(self, request: Any, parsers: list) -> Any:
        content_type = request.content_type.split(";")[0].strip() or MEDIA_TYPE
        return next((p for p in parsers if p.media_type == content_type), parsers[0])

    def select_renderer(self, request: Any, renderers: list, format_suffix: Any = None) -> Any:
        return renderers[0], renderers[0].media_type


def error(status: int, code: int, message: str, headers: dict[str, str] | None = None
          ) -> Response:
    return Response({"error_code": code, "message": message}, status=status, headers=headers)


def _api_error(exc: exceptions.APIException) -> Response:
    status = exc.status_code
    if status == 401:
        # DRF sets the challenge on the exception; clients need it to know to send Basic.
        header = getattr(exc, "auth_header", None) or 'Basic realm="schema registry"'
        return error(401, 40101, f"{exc.detail}: sign in with HTTP Basic, your user name and "
                     "an API token (basic.auth.user.info = <user>:<token>)",
                     {"WWW-Authenticate": header})
    code = {403: 40301, 405: 405, 415: 415, 429: 42901}.get(status, status)
    headers = {"Retry-After": str(int(exc.wait) + 1)} if getattr(exc, "wait", None) else None
    return error(status, code, str(exc.detail), headers)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    exc = as_unavailable(exc) or exc
    if isinstance(exc, StreamgateError):
        code = getattr(exc, "error_code", None) or {404: 404, 403: 40301, 503: 50003}.get(
            exc.http_status, exc.http_status if exc.http_status < 500 else 50001)
        return error(exc.http_status, code, exc.desc, retry_headers(exc))
    if isinstance(exc, Http404):
        return error(404, 404, "HTTP 404 Not Found")
    if isinstance(exc, exceptions.ParseError):
        return error(400, 400, f"the request body is not JSON: {exc.detail}")
    if isinstance(exc, exceptions.APIException):
        return _api_error(exc)
    logger.exception("schema registry request failed", exc_info=exc)
    return error(500, 50001, "internal error: the server's log has the details")
