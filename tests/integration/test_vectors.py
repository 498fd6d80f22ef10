# SPDX-License-Identifier: MIT
"""RFC 9580 Appendix A samples (and the LibrePGP A.3 tag-20 sample) through
the engine's driver: every sample a decrypting implementation can use."""

import os

import pytest

from conftest import HERE, LEAN, expect_err, expect_ok

DATA = HERE.parent / "data"
V = DATA / "rfc9580"
HELLO = b"Hello, world!"
# 2 GiB of memory, one pass: 1 GiB of work by the engine's measure (memory x passes / 2)
ARGON2_2GIB = ["--max-argon2-kib", str(2 * 1024 * 1024), "--max-kdf-mib", "1024"]
# The Argon2 samples cost 2 GiB and 10-40 s each; the sanitizer pass skips them.
slow = pytest.mark.skipif(LEAN, reason="2 GiB Argon2 samples run in the normal build only")


@pytest.mark.parametrize("backend", ["openssl", "gcrypt"])
@pytest.mark.parametrize("slice", [1, 7, 65536])
def test_a08_x25519_ocb(pd, matrix, slice, backend):
    matrix("RFC 9580", "vector", f"A.8 X25519 + SEIPD v2 OCB/{backend}")
    r = pd(V / "a08-x25519-aead-ocb-message.asc", [V / "a04-v6-secret-key.asc"], slice=slice, backend=backend)
    expect_ok(r, plaintext=HELLO)
    assert r.info["integrity"] == "aead" and r.info["aead_algo"] == "OCB"
    assert r.info["key_fpr"] == "12C83F1E706F6308FE151A417743A1F033790E93E9978488D1DB378DA9930885"


@pytest.mark.parametrize("name,mode", [("a09-skesk6-aead-eax-message.asc", "EAX"),
                                       ("a10-skesk6-aead-ocb-message.asc", "OCB"),
                                       ("a11-skesk6-aead-gcm-message.asc", "GCM")])
def test_a09_a11_password_aead(pd, matrix, name, mode):
    matrix("RFC 9580", "vector", f"SKESK v6 + SEIPD v2 {mode}")
    r = pd(V / name, password="password", slice=5)
    expect_ok(r, plaintext=HELLO)
    assert r.info["aead_algo"] == mode and r.info["integrity"] == "aead"
    expect_err(pd(V / name, password="wrong"), "EBADPASS")
    expect_err(pd(V / name), "ENOPASSWORD")


def test_librepgp_a3_ocb_packet(pd, matrix):
    matrix("LibrePGP", "vector", "A.3 SKESK v5 + OCB packet (tag 20)")
    r = pd(DATA / "aead" / "librepgp-a3.pgp", password="password", slice=3)
    expect_ok(r, plaintext=b"Hello, world!\n")
    assert r.info["container"] == 20


@pytest.mark.parametrize("name", ["a06-cleartext-signed-message.asc", "a07-inline-signed-message.asc"])
def test_not_encrypted(pd, matrix, name):
    matrix("RFC 9580", "vector", "A.6/A.7 signed, not encrypted")
    expect_err(pd(V / name, [V / "a04-v6-secret-key.asc"]), "EUNSUPPORTED")


def test_argon2_cap_enforced(pd, matrix):
    matrix("RFC 9580", "vector", "A.12 Argon2 over the default cap")
    expect_err(pd(V / "a12-1-skesk4-argon2-aes128-message.asc", password="password"), "ELIMIT")


@slow
@pytest.mark.parametrize("name", ["a12-1-skesk4-argon2-aes128-message.asc",
                                  "a12-2-skesk4-argon2-aes192-message.asc",
                                  "a12-3-skesk4-argon2-aes256-message.asc"])
def test_a12_argon2(pd, matrix, name):
    matrix("RFC 9580", "vector", "A.12 SKESK v4 Argon2 + SEIPD v1")
    r = pd(V / name, password="password", args=ARGON2_2GIB)
    expect_ok(r, plaintext=HELLO)
    assert r.info["integrity"] == "mdc"


@slow
def test_a05_locked_key_a08(pd, matrix):
    matrix("RFC 9580", "vector", "A.5 Argon2-locked key opens A.8")
    key = V / "a05-v6-secret-key-locked-argon2.asc"
    expect_err(pd(V / "a08-x25519-aead-ocb-message.asc", [key]), "ENEEDPASS")
    r = pd(V / "a08-x25519-aead-ocb-message.asc", [key], passphrase="correct horse battery staple")
    expect_ok(r, plaintext=HELLO)
