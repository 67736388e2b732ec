"""API tokens (knox's AuthToken with a TokenInfo: name, scope, last use): made, listed and
revoked for their own user. Every way a token is made goes through `token_create`: the
account's Tokens page, /api/v1/tokens/, `streamgate token create`, the API's token login and
`manage.py createtenantuser`. Another user's token answers as absent (404 to the interfaces)
whether it exists or not. A token cannot make a token wider than itself: not a wider scope,
and not one that outlives it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone
from knox.models import AuthToken

from accounts.models import TokenScope
from accounts.tokens import issue_token, token_expiry
from replication.errors import InvalidInput, NotFound
from replication.scopes import scope_require

MAX_NAME = 100
MAX_DAYS = 3650
EXPIRY_DAYS = (("30", "30 days"), ("90", "90 days"), ("365", "a year"), ("never", "never"))


@dataclass(frozen=True)
class TokenRow:
    """One token as its owner sees it (never its secret: only its digest's start, as an id)."""

    id: str
    name: str
    scope: str
    created: datetime
    expiry: datetime | None
    last_used: datetime | None


def expiry_from(days: str, on: str = "") -> datetime | None:
    """When a token expires, as every interface takes it: a date `on` (YYYY-MM-DD, its end of
    day, local time) wins over a number of `days`; "never": None."""
    if on:
        try:
            day = datetime.strptime(on, "%Y-%m-%d").date()
        except ValueError as error:
            raise InvalidInput(f"expiry date {on!r} is not a date: use YYYY-MM-DD",
                               field="expiry") from error
        return timezone.make_aware(datetime.combine(day, time.max))
    if days == "never":
        return None
    if not days.isdigit() or not 1 <= int(days) <= MAX_DAYS:
        raise InvalidInput(f"expiry {days!r} is not a number of days: choose 1 to {MAX_DAYS} "
                           "(30, 90, 365) or never, or give a date", field="expiry")
    return timezone.now() + timedelta(days=int(days))


def _within_own_expiry(actor: AbstractBaseUser, expiry: datetime | None) -> None:
    """A token that expires cannot make one that outlives it (a session or a SCRAM sign-in
    has no expiry, so it may)."""
    own = token_expiry(actor)
    if own is None or (expiry is not None and expiry <= own):
        return
    asked = "no expiry" if expiry is None else f"the expiry {expiry:%Y-%m-%d %H:%M}"
    raise InvalidInput(f"{asked} outlives the token you signed in with, which expires "
                       f"{own:%Y-%m-%d %H:%M}: choose an earlier expiry, or make the token "
                       "on the account page's Tokens page", field="expiry")


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
    _within_own_expiry(actor, expiry)
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
