"""Test clients for the portal's pages."""

from django.test import Client


def signed_in(user, csrf: bool = False) -> Client:  # type: ignore[no-untyped-def]
    """A Django test client signed in as `user` (checking CSRF tokens with csrf=True)."""
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client
