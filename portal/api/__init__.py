"""The REST API under /api/v1 (DRF)."""

from typing import Any

API_PREFIX = "/api/v1/"

def only_api_v1(endpoints: list[tuple[str, Any, str, Any]], **kwargs: Any) -> list:
    """Preprocessing hook: the OpenAPI document describes /api/v1 only. /rest is maprcli's
    command facade, described by `streamgate help`, not by OpenAPI."""
    return [endpoint for endpoint in endpoints if endpoint[0].startswith(API_PREFIX)]
