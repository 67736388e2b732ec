"""TOTP with the standard library (accounts/totp.py), against RFC 6238's published test
vectors (Appendix B), and the acceptance window."""

from __future__ import annotations

import base64

import pytest

from accounts import totp

# RFC 6238 Appendix B: the seeds of each hash, and (time, 8-digit TOTP) per hash.
SEEDS = {"sha1": b"12345678901234567890",
         "sha256": b"12345678901234567890123456789012",
         "sha512": b"1234567890123456789012345678901234567890123456789012345678901234"}
VECTORS = [
    (59, {"sha1": "94287082", "sha256": "46119246", "sha512": "90693936"}),
    (1111111109, {"sha1": "07081804", "sha256": "68084774", "sha512": "25091201"}),
    (1111111111, {"sha1": "14050471", "sha256": "67062674", "sha512": "99943326"}),
    (1234567890, {"sha1": "89005924", "sha256": "91819424", "sha512": "93441116"}),
    (2000000000, {"sha1": "69279037", "sha256": "90698825", "sha512": "38618901"}),
    (20000000000, {"sha1": "65353130", "sha256": "77737706", "sha512": "47863826"}),
]
SHA1_SECRET = base64.b32encode(SEEDS["sha1"]).decode()


@pytest.mark.parametrize("when,expected", VECTORS)
@pytest.mark.parametrize("digest", ["sha1", "sha256", "sha512"])
def test_the_rfc_6238_test_vectors(when, expected, digest):
    step = totp.step_at(when)
    assert totp.hotp(SEEDS[digest], step, digits=8, digest=digest) == expected[digest]


def test_the_six_digit_code_is_the_low_digits_of_the_vector():
    assert totp.code_at(SHA1_SECRET, 59) == "287082"
    assert totp.code_at(SHA1_SECRET, 1111111109) == "081804"  # a leading zero kept


def test_a_code_is_accepted_one_step_either_side_and_no_further():
    now = 1111111111
    for drift, accepted in ((-60, False), (-30, True), (0, True), (30, True), (60, False)):
        code = totp.code_at(SHA1_SECRET, now + drift)
        found = totp.verify(SHA1_SECRET, code, when=now)
        assert (found is not None) is accepted, drift
        if accepted:
            assert found == totp.step_at(now + drift)


@pytest.mark.parametrize("code", ["", "12345", "1234567", "abcdef", "12 34 5x"])
def test_malformed_codes_are_refused(code):
    assert totp.verify(SHA1_SECRET, code, when=59) is None


def test_a_new_secret_is_160_bits_of_base32_and_the_uri_names_it():
    secret = totp.new_secret()
    assert len(secret) == 32 and len(base64.b32decode(secret)) == 20
    uri = totp.provisioning_uri(secret, account="alice")
    assert uri.startswith("otpauth://totp/streamgate%3Aalice?")
    assert f"secret={secret}" in uri and "period=30" in uri and "digits=6" in uri
