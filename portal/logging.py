"""Structured logs: structlog and the standard library's loggers (Django, Celery) rendered by one
formatter, as JSON lines in production and readable lines on a developer's console.

Context travels in structlog's context variables: `RequestIdMiddleware` binds a request id to
everything a request logs (and returns it as X-Request-ID), and workers/celery.py binds the task
id to everything a task logs.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable

import structlog
from django.http import HttpRequest, HttpResponse

REQUEST_ID_HEADER = "X-Request-ID"
# A caller's id is kept when it is a plausible id (a proxy's or a client's), never arbitrary text
# that would end up in every log line of the request.
GIVEN_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")

SHARED_PROCESSORS: list[structlog.types.Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]

log = structlog.get_logger("portal.request")


def configure_structlog() -> None:
    """structlog hands its events to the standard library, whose handlers (LOGGING) render
    them with the formatters below; so both kinds of logger write the same lines."""
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *SHARED_PROCESSORS,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def _formatter(renderer: structlog.types.Processor) -> structlog.stdlib.ProcessorFormatter:
    return structlog.stdlib.ProcessorFormatter(
        # Standard-library records get the same context (request id, task id) as structlog's.
        foreign_pre_chain=SHARED_PROCESSORS,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )


def json_formatter() -> logging.Formatter:
    return _formatter(structlog.processors.JSONRenderer())


def console_formatter() -> logging.Formatter:
    return _formatter(structlog.dev.ConsoleRenderer(colors=False))


def logging_config(*, json: bool, level: str) -> dict:
    """The LOGGING setting."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {"()": "portal.logging.json_formatter"},
            "console": {"()": "portal.logging.console_formatter"},
        },
        "handlers": {"console": {"class": "logging.StreamHandler",
                                 "formatter": "json" if json else "console"}},
        "root": {"handlers": ["console"], "level": level},
        # One line per applied batch would drown the console; failures still log.
        "loggers": {"celery.app.trace": {"level": "WARNING"}},
    }


def request_id_of(request: HttpRequest) -> str:
    given = request.headers.get(REQUEST_ID_HEADER, "")
    return given if GIVEN_ID.fullmatch(given) else uuid.uuid4().hex


class RequestIdMiddleware:
    """Bind a request id to every log line of the request, log the request once it is answered,
    and return the id in X-Request-ID so a user's report can be matched with the logs."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_of(request)
        started = time.monotonic()
        with structlog.contextvars.bound_contextvars(request_id=request_id):
            response = self.get_response(request)
            user = getattr(request, "user", None)
            log.info("request", method=request.method, path=request.path,
                     status=response.status_code,
                     duration_ms=round((time.monotonic() - started) * 1000, 1),
                     user=user.get_username() if user and user.is_authenticated else None)
        response[REQUEST_ID_HEADER] = request_id
        return response
