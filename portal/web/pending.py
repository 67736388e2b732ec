"""A tenant signed up with STREAMGATE_SIGNUP=approval waits for an operator. Its members sign
in, but while it is their current tenant every page shows "waiting for approval" instead,
except the few marked `open_to_pending` (tenancy.py). The pages are a courtesy: the services
themselves refuse to create a stream in a waiting tenant, on every interface."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from portal.web.tenancy import current_tenant, render_page


class PendingTenantMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view: Callable[..., HttpResponse],
                     args: Any, kwargs: Any) -> HttpResponse | None:
        # Only the portal's own pages: the admin, the API and /rest answer as they always do.
        module = getattr(view, "__module__", "") or ""
        if not module.startswith("portal.web.") or getattr(view, "open_to_pending", False):
            return None
        user = request.user
        if not user.is_authenticated or user.is_staff:
            return None
        tenant = current_tenant(request)
        if tenant is None or tenant.approved:
            return None
        return render_page(request, "web/waiting.html", {"tenant": tenant}, status=403)
