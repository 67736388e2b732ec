"""A team runs its tenant itself: signing up (a tenant and its first administrator),
invitations by one-time link with a role, and the tenant administrator's changes to roles and
memberships. Every interface goes through here; the audit trail records each row written
(operations/audit.py: tenants, memberships and invitations are audited models).

A tenant always keeps an administrator: the last one can be neither demoted nor removed.
Memberships and invitations of a tenant the actor is not in read as missing (404), as every
tenant-owned row does; a member or viewer who is in it is told that only an administrator may.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import timedelta

from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Invitation, Membership, Role, Tenant, validate_tenant_name
from replication import ace
from replication.errors import AlreadyExists, Conflict, InvalidInput, NotFound, PermissionDenied

INVITATION_DAYS = (1, 3, 7, 14, 30)  # the choices of how long a link stays valid
UserHook = Callable[[AbstractBaseUser], object]


def _is_operator(user: AbstractBaseUser) -> bool:
    return bool(user.is_active and user.is_staff)


# --- new accounts -------------------------------------------------------------------------------


def _check_username(username: str) -> None:
    if not username:
        raise InvalidInput("the user name is empty: choose one", field="username")
    try:
        UnicodeUsernameValidator()(username)
        ace.default_for(username)  # stream ACEs name their creator: u:<username>
    except (ValidationError, ace.AceError) as error:
        raise InvalidInput(f"user name {username!r} cannot be used: choose 1-150 letters, "
                           "digits, '_', '-', '.' or '@'", field="username") from error
    if len(username) > 150:
        raise InvalidInput("the user name is longer than 150 characters: choose a shorter one",
                           field="username")
    if get_user_model().objects.filter(username__iexact=username).exists():
        raise AlreadyExists(f"user name {username} is taken: choose another, or sign in if it is "
                            "yours", field="username")


def _check_email(email: str) -> None:
    try:
        validate_email(email)
    except ValidationError as error:
        raise InvalidInput(f"{email!r} is not an email address: give one where a password reset "
                           "can reach you", field="email") from error


def _check_password(password: str, user: AbstractBaseUser) -> None:
    try:
        password_validation.validate_password(password, user)
    except ValidationError as error:
        raise InvalidInput(" ".join(error.messages) + " Choose another password.",
                           field="password") from error


def _new_user(username: str, email: str, password: str) -> AbstractBaseUser:
    """A user checked as the sign-up page promises (the name usable in ACEs and free in any
    case, a real email, a password Django's validators accept), created."""
    username, email = username.strip(), email.strip()
    _check_username(username)
    _check_email(email)
    user = get_user_model()(username=username, email=email)
    _check_password(password, user)
    user.set_password(password)
    try:
        with transaction.atomic():
            user.save()
    except IntegrityError as error:  # the same name signed up at the same moment
        raise AlreadyExists(f"user name {username} is taken: choose another",
                            field="username") from error
    return user


def _check_tenant_name(name: str) -> None:
    try:
        validate_tenant_name(name)
    except ValidationError as error:
        raise InvalidInput(error.messages[0], field="tenant") from error
    if Tenant.objects.filter(name__iexact=name).exists():
        raise AlreadyExists(f"tenant {name} exists already: choose another name, or ask its "
                            "administrator for an invitation", field="tenant")


@transaction.atomic
def tenant_signup(*, username: str, email: str, password: str, tenant: str, approved: bool,
                  on_user_created: UserHook | None = None) -> Membership:
    """A new tenant and its first administrator, a new user. `approved=False` (sign-up by
    approval) leaves the tenant waiting for an operator. `on_user_created` is called with the
    user before the tenant is written (the page makes it the request's user, so the audit
    trail names the newcomer as who created the tenant)."""
    tenant = tenant.strip()
    _check_tenant_name(tenant)  # before the user, so a refusal leaves nothing behind
    user = _new_user(username, email, password)
    if on_user_created is not None:
        on_user_created(user)
    try:
        with transaction.atomic():
            created = Tenant.objects.create(name=tenant, approved=approved)
    except IntegrityError as error:
        raise AlreadyExists(f"tenant {tenant} exists already: choose another name",
                            field="tenant") from error
    return Membership.objects.create(user=user, tenant=created, role=Role.ADMIN)


def tenant_approve(*, actor: AbstractBaseUser, tenant: Tenant) -> Tenant:
    """An operator lets a signed-up tenant create streams."""
    if not _is_operator(actor):
        raise PermissionDenied("only an operator may approve a tenant")
    if not tenant.approved:
        tenant.approved = True
        tenant.save(update_fields=["approved"])
    return tenant


# --- who administers a tenant ---------------------------------------------------------------------


def _require_admin(actor: AbstractBaseUser, tenant: Tenant, action: str) -> None:
    if tenant.administered_by(actor):
        return
    if not Membership.objects.filter(user=actor, tenant=tenant).exists():
        raise NotFound(f"tenant {tenant.name} is not one of yours")
    admins = ", ".join(Membership.objects.filter(tenant=tenant, role=Role.ADMIN)
                       .values_list("user__username", flat=True)) or "an operator"
    raise PermissionDenied(f"only a tenant administrator may {action} in {tenant.name}: "
                           f"ask {admins}")


def _keep_an_admin(membership: Membership, what: str) -> None:
    """Refuse `what` when `membership` is its tenant's last administrator. The tenant's admin
    rows are locked first, so two administrators demoting each other at once cannot both win."""
    admins = list(Membership.objects.select_for_update().filter(
        tenant_id=membership.tenant_id, role=Role.ADMIN).values_list("pk", flat=True))
    if admins == [membership.pk]:
        raise Conflict(f"{membership.user.get_username()} is the last administrator of "
                       f"{membership.tenant.name} and cannot be {what}: make another member an "
                       "administrator first", field="role")


def _role(value: str) -> Role:
    if value not in Role.values:
        raise InvalidInput(f"{value!r} is no role: use {', '.join(Role.values)}", field="role")
    return Role(value)


@transaction.atomic
def membership_role_change(*, actor: AbstractBaseUser, membership: Membership,
                           role: str) -> Membership:
    new = _role(role)
    _require_admin(actor, membership.tenant, "change roles")
    if membership.role == Role.ADMIN and new != Role.ADMIN:
        _keep_an_admin(membership, "demoted")
    if membership.role != new:
        membership.role = new
        membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def membership_remove(*, actor: AbstractBaseUser, membership: Membership) -> None:
    _require_admin(actor, membership.tenant, "remove members")
    if membership.role == Role.ADMIN:
        _keep_an_admin(membership, "removed")
    membership.delete()


# --- invitations ----------------------------------------------------------------------------------


def invitation_create(*, actor: AbstractBaseUser, tenant: Tenant, role: str, email: str = "",
                      days: int = 7) -> tuple[Invitation, str]:
    """An invitation and its token, the only time the token exists outside the link."""
    new = _role(role)
    _require_admin(actor, tenant, "invite")
    email = email.strip()
    if email:
        _check_email(email)
    if days not in INVITATION_DAYS:
        raise InvalidInput(f"{days} days is not offered: choose one of "
                           f"{', '.join(map(str, INVITATION_DAYS))}", field="days")
    token = secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        tenant=tenant, role=new, email=email, token_hash=Invitation.hash_of(token),
        created_by=actor, expires=timezone.now() + timedelta(days=days))
    return invitation, token


@transaction.atomic
def invitation_revoke(*, actor: AbstractBaseUser, invitation: Invitation) -> Invitation:
    _require_admin(actor, invitation.tenant, "revoke invitations")
    state = invitation.state(timezone.now())
    if state in ("used", "revoked"):
        raise Conflict(f"this invitation is {state} already: nothing to revoke")
    invitation.revoked = timezone.now()
    invitation.save(update_fields=["revoked"])
    return invitation


def invitation_open(*, token: str, lock: bool = False) -> Invitation:
    """The invitation a link names, if it can still be used; else why not."""
    found = Invitation.objects.select_related("tenant")
    if lock:
        found = found.select_for_update(of=("self",))
    invitation = found.filter(token_hash=Invitation.hash_of(token)).first()
    if invitation is None:
        raise NotFound("this invitation link is not valid: check that it was copied whole, or "
                       "ask the tenant's administrator for a new one")
    state = invitation.state(timezone.now())
    if state != "open":
        when = {"used": "has been used already", "revoked": "was revoked",
                "expired": f"expired on {invitation.expires:%Y-%m-%d %H:%M} UTC"}[state]
        raise Conflict(f"this invitation to {invitation.tenant.name} {when}: ask its "
                       "administrator for a new one")
    return invitation


@transaction.atomic
def invitation_accept(*, actor: AbstractBaseUser, token: str) -> Membership:
    """The actor joins the invitation's tenant with its role; the link is spent."""
    invitation = invitation_open(token=token, lock=True)
    held = Membership.objects.filter(user=actor, tenant=invitation.tenant).first()
    if held is not None:
        raise AlreadyExists(f"you are a member of {invitation.tenant.name} already (as "
                            f"{held.role}): the invitation stays unused for someone else")
    membership = Membership.objects.create(user=actor, tenant=invitation.tenant,
                                           role=invitation.role)
    invitation.used, invitation.used_by = timezone.now(), actor
    invitation.save(update_fields=["used", "used_by"])
    return membership


@transaction.atomic
def invitation_signup(*, token: str, username: str, email: str, password: str,
                      on_user_created: UserHook | None = None) -> Membership:
    """A new account for the invitee, joined to the tenant at once."""
    invitation_open(token=token)  # a spent link creates no account
    user = _new_user(username, email, password)
    if on_user_created is not None:
        on_user_created(user)
    return invitation_accept(actor=user, token=token)
