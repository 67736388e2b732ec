"""Test clients for the portal's pages."""

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext


def signed_in(user, csrf: bool = False) -> Client:  # type: ignore[no-untyped-def]
    """A Django test client signed in as `user` (checking CSRF tokens with csrf=True)."""
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def query_count(client: Client, path: str) -> int:
    """Database queries one GET of `path` takes; it must answer 200."""
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(path).status_code == 200
    return len(ctx.captured_queries)
