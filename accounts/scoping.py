"""The one tenant-scoping choke point.

Every API view, page and websocket consumer reaches tenant-owned rows through
`RestrictedQuerySet.restrict(user)`; a row outside the user's tenants is simply absent, so
callers answer 404 for it and never learn whether it exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from django.db import models
from django.db.models import Q

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser


class RestrictedQuerySet(models.QuerySet):
    # Lookups from the model to its owning tenant ("" for the Tenant model itself); a row is
    # visible when any of them leads to a tenant the user is a member of.
    tenant_paths: tuple[str, ...] = ("tenant",)

    def restrict(self, user: AbstractBaseUser | AnonymousUser) -> Self:
        if not user.is_authenticated or not user.is_active:
            return self.none()
        if user.is_staff:
            return self.all()
        query = Q()
        for path in self.tenant_paths:
            query |= Q(**{f"{path}__memberships__user" if path else "memberships__user": user})
        return self.filter(query).distinct()
