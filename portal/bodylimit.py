"""Request bodies past DATA_UPLOAD_MAX_MEMORY_SIZE (STREAMGATE_MAX_BODY_BYTES) are refused with
413 before any view reads them. Django checks that limit only where it parses a form itself;
DRF's parsers (the API's JSON, /rest's forms) read the raw stream, so without this a body of
any size was read whole into memory. A body without a Content-Length (chunked) is not read by
DRF at all."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse


def too_large(request: HttpRequest) -> HttpResponse | None:
    """The 413 answer to a body over the limit, or None."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return JsonResponse({"detail": "Content-Length is not a number of bytes",
                             "code": "parse_error"}, status=400)
    if limit is None or length <= limit:
        return None
    return JsonResponse({"detail": f"the request body is {length} bytes, over the {limit} "
                                   "allowed (STREAMGATE_MAX_BODY_BYTES): send less a request",
                         "code": "request_too_large"}, status=413)


class BodyLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return too_large(request) or self.get_response(request)
