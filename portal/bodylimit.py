"""Request bodies past DATA_UPLOAD_MAX_MEMORY_SIZE (STREAMGATE_MAX_BODY_BYTES) are refused with
413, naming the setting, before any middleware or view reads them. Django applies that limit
when a body is read (DRF's JSON and form parsers read `request.body`), but by raising
RequestDataTooBig, which the API answered with a 500 and a logged traceback; multipart file
parts it does not count at all. A body without a Content-Length (chunked) is not read by DRF."""

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
