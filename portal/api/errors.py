"""Errors on /api/v1: domain errors and DRF's own, as DRF-shaped JSON; never a traceback.

A `StreamgateError` answers with its `http_status` and
`{"detail": desc, "code": "<class name in snake_case>", <field>: [desc], "hint": {...}}` (the
field entry only when the error names one; `hint`, what to do, only when the domain says:
`{"action": "replica.resume", "params": {...}, "text": "resume it ..."}`), so clients branch on
`code` and `hint.action`, and forms show the text by the field.
An outage of Redis or a message store is a `ServiceUnavailable` (portal/unavailable.py): 503,
code `service_unavailable`, with Retry-After.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import IntegrityError
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from portal.unavailable import as_unavailable, retry_headers
from replication.errors import StreamgateError

logger = logging.getLogger(__name__)
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def error_code(exc: StreamgateError) -> str:
    return _CAMEL.sub("_", type(exc).__name__).lower()


def domain_error_body(exc: StreamgateError) -> dict[str, Any]:
    body: dict[str, Any] = {"detail": exc.desc, "code": error_code(exc)}
    if exc.field:
        body[exc.field] = [exc.desc]
    if exc.hint is not None:
        body["hint"] = exc.hint.as_dict()
    return body


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    exc = as_unavailable(exc) or exc
    if isinstance(exc, StreamgateError):
        set_rollback()
        return Response(domain_error_body(exc), status=exc.http_status,
                        headers=retry_headers(exc))
    if isinstance(exc, IntegrityError):
        # The services check uniqueness first; this is two requests racing past that check.
        set_rollback()
        logger.warning("integrity error on %s: %s", _where(context), exc)
        return Response({"detail": "a concurrent change conflicts with this request; "
                                   "reload and retry", "code": "conflict"},
                        status=status.HTTP_409_CONFLICT)
    response = drf_exception_handler(exc, context)
    if response is None:
        set_rollback()
        logger.exception("unhandled error on %s", _where(context))
        return Response({"detail": "internal error; it has been logged",
                         "code": "server_error"},
                        status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    if isinstance(exc, APIException) and isinstance(response.data, dict):
        detail = response.data.get("detail")
        if detail is not None and "code" not in response.data:
            response.data["code"] = getattr(detail, "code", None) or exc.default_code
    return response


def _where(context: dict[str, Any]) -> str:
    request = context.get("request")
    return f"{request.method} {request.path}" if request is not None else "?"


@contextmanager
def field_alias(**aliases: str) -> Iterator[None]:
    """Report a service error on the API's name for a field (services speak CLI option names,
    e.g. `topic`, where the API says `name`)."""
    try:
        yield
    except StreamgateError as err:
        if err.field in aliases:
            err.field = aliases[err.field]
        raise
