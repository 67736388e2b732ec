"""The optional TOTP second factor of a browser sign-in: set up (a secret, confirmed with a
code), checked (a code of a later step than the last accepted one: never a replay; or a
one-use recovery code), and removed. Recovery codes are random (50 bits), so a SHA-256 of
each is kept, as knox keeps a digest of a token, rather than a slow password hash."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from accounts import totp
from accounts.models import RecoveryCode, TotpDevice

RECOVERY_CODES = 10
ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i to misread


def has_second_factor(user: AbstractBaseUser) -> bool:
    return TotpDevice.objects.filter(user_id=user.pk, confirmed=True).exists()


def device_start(user: AbstractBaseUser) -> TotpDevice:
    """A new unconfirmed secret (replacing an unconfirmed one; a confirmed one stays until
    disabled with a code)."""
    device, _ = TotpDevice.objects.update_or_create(
        user=user, confirmed=False, defaults={"secret": totp.new_secret(), "last_step": 0})
    return device


def _digest(code: str) -> str:
    return hashlib.sha256(code.strip().lower().replace("-", "").encode()).hexdigest()


def _new_recovery_codes(user: AbstractBaseUser) -> list[str]:
    codes = ["".join(secrets.choice(ALPHABET) for _ in range(10)) for _ in range(RECOVERY_CODES)]
    RecoveryCode.objects.filter(user=user).delete()
    RecoveryCode.objects.bulk_create(RecoveryCode(user=user, code_hash=_digest(c)) for c in codes)
    return [f"{c[:5]}-{c[5:]}" for c in codes]


def _accept_code(device: TotpDevice, code: str) -> bool:
    """A TOTP code of a step later than the last accepted: the step is kept in the same
    UPDATE that checks it, so two requests with one code cannot both pass."""
    step = totp.verify(device.secret, code)
    if step is None:
        return False
    return bool(TotpDevice.objects.filter(pk=device.pk, last_step__lt=step)
                .update(last_step=step))


def device_confirm(user: AbstractBaseUser, code: str) -> list[str] | None:
    """Confirm the unconfirmed device with a code from the app; the recovery codes (to show
    once), or None when the code is wrong."""
    device = TotpDevice.objects.filter(user=user, confirmed=False).first()
    if device is None or not _accept_code(device, code):
        return None
    with transaction.atomic():
        TotpDevice.objects.filter(pk=device.pk).update(confirmed=True)
        return _new_recovery_codes(user)


def code_accepted(user: AbstractBaseUser, code: str) -> bool:
    """A sign-in's second factor: a fresh TOTP code, or an unused recovery code (used up)."""
    device = TotpDevice.objects.filter(user=user, confirmed=True).first()
    if device is None:
        return False
    if _accept_code(device, code):
        return True
    deleted, _ = RecoveryCode.objects.filter(user=user, code_hash=_digest(code)).delete()
    return bool(deleted)


def device_disable(user: AbstractBaseUser, code: str) -> bool:
    """Remove the second factor, proven with a code (TOTP or recovery); False when wrong."""
    if not code_accepted(user, code):
        return False
    TotpDevice.objects.filter(user=user).delete()
    RecoveryCode.objects.filter(user=user).delete()
    return True


def recovery_codes_left(user: AbstractBaseUser) -> int:
    return RecoveryCode.objects.filter(user=user).count()
