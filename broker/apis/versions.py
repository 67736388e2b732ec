"""ApiVersions (key 18): what this listener speaks, from the handler registry."""

from __future__ import annotations

from typing import Any

from broker.codec import build
from broker.dispatch import RequestHeader, advertised, handles, response_class
from broker.session import Session


@handles(18, 0, 3)
async def api_versions(session: Session, header: RequestHeader, request: Any) -> Any:
    return build(response_class(request), api_keys=advertised(), throttle_time=0)
