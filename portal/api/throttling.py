"""The produce rate limit, which lets requests through while its cache (Redis) is down.

The limit protects the portal from a runaway producer; refusing every produce while Redis
restarts would do more harm than the few seconds of unlimited producing it prevents, and the
produce itself needs no Redis (wake-ups and traffic counters are best-effort, and replicators
sweep for what a lost wake-up missed). The sign-in limit (accounts/throttle.py) is different:
it guards passwords, and refuses with a 503 instead (portal/unavailable.py).
"""

from __future__ import annotations

from typing import Any

import structlog
from rest_framework.request import Request
from rest_framework.throttling import ScopedRateThrottle

from portal.unavailable import REDIS_DOWN

log = structlog.get_logger(__name__)


class FailOpenScopedRateThrottle(ScopedRateThrottle):
    def allow_request(self, request: Request, view: Any) -> bool:
        try:
            return super().allow_request(request, view)
        except REDIS_DOWN as error:
            log.warning("throttle_cache_unavailable", scope=self.scope, error=str(error))
            return True
