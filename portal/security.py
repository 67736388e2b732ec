"""Response headers and cookie flags Django's SecurityMiddleware does not set.

- Content-Security-Policy on every response (CONTENT_SECURITY_POLICY): scripts and styles from
  the portal itself only, nothing inline, so markup that slipped into a page cannot run. The
  pages of third-party apps (the admin site, DRF's browsable API, Swagger UI) carry a few inline
  style blocks and attributes of their own: under /admin/ and /api/ inline styles (never
  scripts) are allowed.
- The session and CSRF cookies are marked Secure on every response to a request that came over
  TLS (the ASGI server's own certificate, or a proxy's X-Forwarded-Proto: https), even when
  HTTPS is not set: HTTPS=true marks them always (settings).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

INLINE_STYLE_PATHS = ("/admin/", "/api/")


def policy_for(path: str, policy: str) -> str:
    if not path.startswith(INLINE_STYLE_PATHS):
        return policy
    directives = [d.strip() for d in policy.split(";") if d.strip()]
    return "; ".join(f"{d} 'unsafe-inline'" if d.split()[0] == "style-src" else d
                     for d in directives)


def _over_tls(request: HttpRequest) -> bool:
    # Marking a cookie Secure only narrows where it goes, so a forwarded header nobody
    # vouches for may ask for it; it never loosens anything.
    return request.is_secure() or request.META.get("HTTP_X_FORWARDED_PROTO") == "https"


class SecurityHeadersMiddleware:
    """Listed before the session and CSRF middleware, so it sees the cookies they set."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if settings.CONTENT_SECURITY_POLICY and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy_for(
                request.path, settings.CONTENT_SECURITY_POLICY)
        if _over_tls(request):
            for name in (settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME):
                if name in response.cookies:
                    response.cookies[name]["secure"] = True
        return response
