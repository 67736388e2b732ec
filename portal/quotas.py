"""Tenant request quotas on the HTTP interfaces (/api/v1 and /rest, DRF's throttling): each
request of a signed-in user counts against the request quota of every tenant they belong to
(replication/quotas.py); over it, 429 with Retry-After, as DRF answers a throttled request."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from replication.quotas import request_rates, requests_charge


class TenantRequestThrottle(BaseThrottle):
    over = 0.0

    def allow_request(self, request: Request, view: Any) -> bool:
        user = request.user
        if not user or not user.is_authenticated:
            return True
        self.over = requests_charge(request_rates(user.pk))
        return self.over <= 0

    def wait(self) -> float:
        return self.over
