"""TOTP (RFC 6238: HMAC-SHA-1 over 30-second steps, 6 digits) with the standard library, as
authenticator apps compute it; pyotp is not among the project's dependencies.

`verify` accepts the current step and one either side (clocks drift) and returns the step it
matched, so the caller can refuse a code of a step already used (a replay)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import struct
import time
from urllib.parse import quote, urlencode

STEP_SECONDS = 30
DIGITS = 6
WINDOW = 1  # steps accepted either side of now


def new_secret() -> str:
    """A random 160-bit secret in base32 without padding (RFC 4226 recommends 160 bits)."""
    return base64.b32encode(secrets.token_bytes(20)).decode().rstrip("=")


def _key(secret: str) -> bytes:
    return base64.b32decode(secret.upper() + "=" * (-len(secret) % 8))


def hotp(key: bytes, counter: int, *, digits: int = DIGITS,
         digest: str = "sha1") -> str:
    """RFC 4226's HOTP value of `counter` (dynamic truncation, then the low `digits`)."""
    mac = hmac.new(key, struct.pack(">Q", counter), getattr(hashlib, digest)).digest()
    offset = mac[-1] & 0x0F
    value = struct.unpack(">I", mac[offset:offset + 4])[0] & 0x7FFFFFFF
    return str(value % 10**digits).zfill(digits)


def step_at(when: float) -> int:
    return int(when // STEP_SECONDS)


def code_at(secret: str, when: float) -> str:
    return hotp(_key(secret), step_at(when))


def verify(secret: str, code: str, *, when: float | None = None) -> int | None:
    """The time step `code` matches within the window around `when` (now), or None."""
    code = code.strip().replace(" ", "")
    if len(code) != DIGITS or not code.isdigit():
        return None
    now = step_at(time.time() if when is None else when)
    key = _key(secret)
    for step in range(now - WINDOW, now + WINDOW + 1):
        if hmac.compare_digest(hotp(key, step), code):
            return step
    return None


def provisioning_uri(secret: str, *, account: str, issuer: str = "streamgate") -> str:
    """The otpauth:// URI authenticator apps read (Google Authenticator's Key Uri Format)."""
    label = quote(f"{issuer}:{account}")
    query = urlencode({"secret": secret, "issuer": issuer, "algorithm": "SHA1",
                       "digits": DIGITS, "period": STEP_SECONDS})
    return f"otpauth://totp/{label}?{query}"
