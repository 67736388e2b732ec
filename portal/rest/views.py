"""maprcli over HTTP: `/rest/<command path>?param=value`, in MapR's envelope.

Every response, errors included, has the envelope's shape (timestamp, timeofday, status, then
total+data or errors), so maprcli scripts and the `streamgate` CLI read one format.

Commands that only read answer GET and POST, as MapR's /rest does; commands that change
anything take POST (or DELETE) only. A page on another site can make a signed-in browser send
a GET (a link, `location=`, an image) with the session cookie, SameSite=Lax included, and
without a CSRF token; a POST or DELETE authenticated by the session cookie must carry the CSRF
token (DRF's SessionAuthentication checks it), while token and Basic calls need none.
"""

from __future__ import annotations

import difflib
import errno
import logging
import math
from typing import Any

from django.http import Http404
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import SessionAuthentication
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.permissions import AllowAny, BasePermission, IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.tokens import BasicTokenAuthentication, TokenAuthentication
from portal.rest.commands import REGISTRY, Command
from portal.rest.hints import command_desc
from portal.unavailable import as_unavailable, retry_headers
from replication.errors import InvalidInput, NotFound, StreamgateError

logger = logging.getLogger(__name__)
CSRF_FIELD = "csrfmiddlewaretoken"  # Django's name for the CSRF token in a form body
Row = dict[str, Any]


def _clock() -> dict[str, Any]:
    now = timezone.localtime()
    millis = now.microsecond // 1000
    return {
        "timestamp": int(now.timestamp() * 1000),
        # MapR's form: "2018-03-16 01:48:46.943 GMT-0700 PM" (12-hour clock).
        "timeofday": f"{now:%Y-%m-%d %I:%M:%S}.{millis:03d} GMT{now:%z} {now:%p}",
    }


def success(rows: list[Row]) -> Response:
    return Response({**_clock(), "status": "OK", "total": len(rows), "data": rows})


def failure(
    error_id: int, desc: str, status: int, headers: dict[str, str] | None = None
) -> Response:
    body = {**_clock(), "status": "ERROR", "errors": [{"id": error_id, "desc": desc}]}
    return Response(body, status=status, headers=headers)


def envelope_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """Every failure in the envelope; a traceback is logged, never returned."""
    exc = as_unavailable(exc) or exc
    if isinstance(exc, StreamgateError):
        return failure(exc.errno, command_desc(exc), exc.http_status, retry_headers(exc))
    if isinstance(exc, Http404):
        return failure(errno.ENOENT, "not found", 404)
    if isinstance(exc, exceptions.APIException):
        # DRF sets auth_header on 401s; clients need it to know which scheme to use.
        # A throttled request (a tenant's request quota) says when to send it again.
        auth_header, wait = getattr(exc, "auth_header", None), getattr(exc, "wait", None)
        headers = {"WWW-Authenticate": auth_header} if auth_header else {}
        if wait is not None:
            headers["Retry-After"] = str(math.ceil(wait))
        error_id = (errno.EACCES if exc.status_code in (401, 403) else
                    errno.EAGAIN if wait is not None else errno.EINVAL)
        return failure(error_id, str(exc.detail), exc.status_code, headers or None)
    logger.exception("unexpected error in /rest", exc_info=exc)
    return failure(errno.EIO, "internal error: the server logged the details", 500)


def changes_refused_over_get(spec: Command) -> Response:
    """405 before the command runs: nothing is read from the parameters or changed."""
    return failure(
        errno.EINVAL,
        f"'{spec.name}' changes data, so it takes POST, not GET (only commands that read "
        "answer GET, so that no link or page on another site can change anything): send the "
        "same options as a POST form body (curl -u <user> -d path=... <url>), or run "
        f"'streamgate {spec.name}'",
        405,
    )


def raw_params(request: Request) -> dict[str, str]:
    """The query string and the form body together, MapR's REST accepting either."""
    values: dict[str, list[str]] = {}
    for source in (request.query_params, request.data):
        for key in source:
            if key == CSRF_FIELD:  # the CSRF check's, not an option of the command
                continue
            values.setdefault(key, []).extend(source.getlist(key))
    for key, found in values.items():
        if len(found) > 1:
            raise InvalidInput(f"-{key} is given {len(found)} times: give it once", field=key)
        # PostgreSQL cannot store NUL, and an uploaded file is no option value.
        if not isinstance(found[0], str) or "\x00" in found[0]:
            raise InvalidInput(f"-{key} must be text without NUL characters", field=key)
    return {key: found[0] for key, found in values.items()}


class EnvelopeOnly(DefaultContentNegotiation):
    """Always the JSON envelope. DRF would read `?format=` as a renderer choice and answer
    404, but `-format` is an option of maprcli commands (`cluster gateway local`)."""

    def select_renderer(self, request: Request, renderers: list, format_suffix: str | None = None
                        ) -> tuple:
        return renderers[0], renderers[0].media_type


class SessionWithCsrf(SessionAuthentication):
    """DRF's session authentication, which checks the CSRF token on POST and DELETE (the
    methods that change), with a refusal that says what to send."""

    def enforce_csrf(self, request: Request) -> None:
        try:
            super().enforce_csrf(request)
        except exceptions.PermissionDenied as refused:
            raise exceptions.PermissionDenied(
                f"{refused.detail} A POST or DELETE to /rest signed in by the session cookie "
                "must carry the csrftoken cookie's value in the X-CSRFToken header (or the "
                "csrfmiddlewaretoken field); scripts send an API token instead "
                "(Authorization: Token <token>)"
            ) from refused


class MaprRestView(APIView):
    content_negotiation_class = EnvelopeOnly
    # A request with an Authorization header is authenticated by it and needs no CSRF token:
    # a page on another site cannot set that header, and browsers hold no Basic credentials
    # for /rest (its 401 asks for a Token). Only the session cookie needs one.
    authentication_classes = [TokenAuthentication, BasicTokenAuthentication, SessionWithCsrf]
    permission_classes = [IsAuthenticated]
    renderer_classes = [JSONRenderer]
    parser_classes = [FormParser, MultiPartParser]
    # MapR's REST documents GET, POST and (for gateway delete) DELETE; others answer 405.
    http_method_names = ["get", "post", "delete"]
    # Not in the OpenAPI document: /rest is maprcli's generic command form, described by its
    # own registry (GET /rest/); /api/v1 is the documented API.
    schema = None

    def get_permissions(self) -> list[BasePermission]:
        # The command list is documentation, so `streamgate help` works before signing in.
        if not self._command_path():
            return [AllowAny()]
        return super().get_permissions()

    @property
    def default_response_headers(self) -> dict[str, str]:
        headers = super().default_response_headers
        spec = REGISTRY.get(self._command_path())
        if spec is not None and spec.changes:
            headers["Allow"] = "POST, DELETE"
        return headers

    def get_exception_handler(self):  # type: ignore[no-untyped-def]
        return envelope_exception_handler

    def get(self, request: Request, command: str = "") -> Response:
        spec = self._command()
        if spec is None:
            return self._index()
        if spec.changes:
            return changes_refused_over_get(spec)
        return success(spec.run(request.user, raw_params(request)))

    def post(self, request: Request, command: str = "") -> Response:
        spec = self._command()
        if spec is None:
            return self._index()
        return success(spec.run(request.user, raw_params(request)))

    delete = post

    def _index(self) -> Response:
        return success([spec.describe() for _, spec in sorted(REGISTRY.items())])

    def _command(self) -> Command | None:
        """The command the URL names; None for the index (/rest/)."""
        path = self._command_path()
        if not path:
            return None
        spec = REGISTRY.get(path)
        if spec is None:
            name = path.replace("/", " ")
            close = difflib.get_close_matches(name, [k.replace("/", " ") for k in REGISTRY],
                                              n=1, cutoff=0.75)
            hint = f" did you mean '{close[0]}'?" if close else ""
            raise NotFound(f"unknown command '{name}':{hint} list the commands with "
                           "'streamgate help' or GET /rest/")
        return spec

    def _command_path(self) -> str:
        return self.kwargs.get("command", "").strip("/")


