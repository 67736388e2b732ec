"""API tokens (knox's AuthToken with a TokenInfo: name, scope, last use): made, listed and
revoked for their own user. Every way a token is made goes through `token_create`: the
account's Tokens page, the API's token login and `manage.py createtenantuser`. Another user's
token answers as absent (404 to the interfaces) whether it exists or not."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone
from knox.models import AuthToken

from accounts.models import TokenScope
from accounts.tokens import issue_token
from replication.errors import InvalidInput, NotFound
from replication.scopes import scope_require

MAX_NAME = 100


@dataclass(frozen=True)
class TokenRow:
    """One token as its owner sees it (never its secret: only its digest's start, as an id)."""

    id: str
    name: str
    scope: str
    created: datetime
    expiry: datetime | None
    last_used: datetime | None


def _clean(name: str, scope: str, expiry: datetime | None) -> tuple[str, TokenScope]:
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise InvalidInput(f"a token needs a name of 1 to {MAX_NAME} characters, to tell it "
                           "from the others in the list", field="name")
    if scope not in TokenScope.values:
        raise InvalidInput(f"unknown scope {scope!r}: use read (consume, describe), produce "
                           "(and commit offsets) or admin", field="scope")
    if expiry is not None and expiry <= timezone.now():
        raise InvalidInput(f"the expiry {expiry:%Y-%m-%d %H:%M} is in the past: choose a later "
                           "date, or no expiry", field="expiry")
    return name, TokenScope(scope)


def token_create(*, actor: AbstractBaseUser, name: str, scope: str = TokenScope.ADMIN,
                 expiry: datetime | None = None) -> tuple[AuthToken, str]:
    """A new token of `actor` and its secret, which is shown once and never kept (knox keeps
    its digest). A token cannot make a wider one than itself."""
    name, kind = _clean(name, scope, expiry)
    scope_require(actor, kind, action=f"making a {kind} token")
    return issue_token(actor, name=name, scope=kind, expiry=expiry)


def tokens_of(*, actor: AbstractBaseUser) -> list[TokenRow]:
    """The actor's live tokens, newest first (an expired one is gone: knox refuses it)."""
    now = timezone.now()
    rows = []
    for token in AuthToken.objects.filter(user=actor).select_related("info").order_by("-created"):
        if token.expiry is not None and token.expiry <= now:
            continue
        info = getattr(token, "info", None)  # none: made before scopes (admin)
        rows.append(TokenRow(
            id=token.digest[:16], name=info.name if info else "", created=token.created,
            scope=info.scope if info else TokenScope.ADMIN, expiry=token.expiry,
            last_used=info.last_used if info else None))
    return rows


def token_revoke(*, actor: AbstractBaseUser, token_id: str) -> None:
    """Delete the actor's token whose id (its digest's first 16 characters) is `token_id`; the
    Kafka connections signed in with it close at the listeners' next revocation check."""
    if len(token_id) != 16:
        raise NotFound(f"no token {token_id!r} of yours: it may be revoked already", field="token")
    deleted, _ = AuthToken.objects.filter(user=actor, digest__startswith=token_id).delete()
    if not deleted:
        raise NotFound(f"no token {token_id!r} of yours: it may be revoked already", field="token")
