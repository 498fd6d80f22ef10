# SPDX-License-Identifier: MIT
"""RFC 9580 Appendix A samples (and the LibrePGP A.3 tag-20 sample) through
the real daemon: build/daemon/pgpdecd on a temporary unix socket, holding
the A.4 v6 secret key, driven by build/client/pgpdecd-client.

Run: PD_BUILD_DIR=build /usr/bin/python3 -m pytest -q tests/integration/test_daemon_vectors.py
"""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import HERE, LEAN, kill_gpg_agent  # noqa: E402
from test_client import CLIENT, run as client  # noqa: E402
from test_daemon import PGPDECD, Daemon  # noqa: E402

V = HERE.parent / "data" / "rfc9580"
AEAD = HERE.parent / "data" / "aead"
HELLO = b"Hello, world!"
EX_UNAVAILABLE = 69

pytestmark = pytest.mark.skipif(not os.path.exists(PGPDECD) or not os.path.exists(CLIENT),
                                reason="needs a built daemon/pgpdecd and client/pgpdecd-client")


@pytest.fixture(scope="module")
def v6daemon(tmp_path_factory):
    """The daemon with the A.4 v6 key (X25519 subkey) as its only key."""
    base = tmp_path_factory.mktemp("v6d")
    keys = base / "keys"
    keys.mkdir()
    (keys / "a04.asc").write_bytes((V / "a04-v6-secret-key.asc").read_bytes())
    d = Daemon(None, base, keydir=keys)
    d.pwfile = base / "pw"
    d.pwfile.write_text("password\n")
    d.badpw = base / "badpw"
    d.badpw.write_text("not the password\n")
    yield d
    assert d.stop() == 0, d.logtext()


def decrypt(d, msg, *args):
    return client(["--socket", d.sock, "-v", *map(str, args)], input=msg.read_bytes(), timeout=120)


def test_keys_listed(v6daemon, matrix):
    matrix("daemon", "RFC 9580", "A.4 v6 key loaded")
    r = client(["--socket", v6daemon.sock, "keys"])
    assert r.returncode == 0, r.stderr
    # The X25519 encryption subkey of A.4 (v6 fingerprints are 32 octets).
    assert b"12C83F1E706F6308FE151A417743A1F033790E93E9978488D1DB378DA9930885" in r.stdout.upper()


@pytest.mark.parametrize("msg", [V / "a08-x25519-aead-ocb-message.asc",
                                 AEAD / "a08-x25519-aead-ocb-message.pgp"])
def test_a08_x25519_v6_pkesk(v6daemon, matrix, msg):
    matrix("daemon", "RFC 9580", "A.8 X25519 v6 PKESK + SEIPD v2 OCB")
    r = decrypt(v6daemon, msg)
    assert r.returncode == 0, r.stderr
    assert r.stdout == HELLO
    assert b"12C83F1E706F6308FE151A417743A1F033790E93E9978488D1DB378DA9930885" in r.stderr.upper()


@pytest.mark.parametrize("name,mode", [("a09-skesk6-aead-eax-message", "EAX"),
                                       ("a10-skesk6-aead-ocb-message", "OCB"),
                                       ("a11-skesk6-aead-gcm-message", "GCM")])
@pytest.mark.parametrize("ext", [".asc", ".pgp"])
def test_a09_a11_skesk6_password(v6daemon, matrix, name, mode, ext):
    matrix("daemon", "RFC 9580", f"SKESK v6 + SEIPD v2 {mode}")
    msg = (V if ext == ".asc" else AEAD) / (name + ext)
    r = decrypt(v6daemon, msg, "--password-file", v6daemon.pwfile)
    assert r.returncode == 0, r.stderr
    assert r.stdout == HELLO
    r = decrypt(v6daemon, msg, "--password-file", v6daemon.badpw)
    # An AEAD-protected SKESK tells a wrong password (its tag is checked
    # before any data): NO_PASSWORD, "wrong password" (issue 12: it was
    # NO_KEY, "bad password for the message").  Nothing comes out.
    assert r.returncode == EX_UNAVAILABLE and r.stdout == b"", r.stderr
    assert b": NO_PASSWORD: wrong password" in r.stderr, r.stderr
    r = decrypt(v6daemon, msg)  # no password sent
    assert r.returncode != 0 and r.stdout == b"", r.stderr
    assert b"NO_PASSWORD" in r.stderr, r.stderr


def test_wrong_password_v4_skesk(v6daemon, matrix, tmp_path):
    """A v4 SKESK (gpg -c) has no check of its own: a wrong password is
    found out by the MDC, so it reads as an integrity failure (the format
    cannot tell it from a modified message; pgpdecd.8 says so)."""
    matrix("daemon", "gpg", "SKESK v4 wrong password")
    home = tmp_path / "g"
    home.mkdir(mode=0o700)
    msg = tmp_path / "c.gpg"
    try:
        subprocess.run(["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase",
                        "password", "-o", str(msg), "-c"], input=b"hello v4", check=True, capture_output=True)
    finally:
        kill_gpg_agent(home)  # gpg -c started one for this home; left, it outlived the run
    r = decrypt(v6daemon, msg, "--password-file", v6daemon.pwfile)
    assert r.returncode == 0 and r.stdout == b"hello v4", r.stderr
    r = decrypt(v6daemon, msg, "--password-file", v6daemon.badpw)
    assert r.returncode != 0 and r.stdout == b"", r.stderr
    assert b": INTEGRITY: " in r.stderr, r.stderr
    r = decrypt(v6daemon, msg)  # no password sent
    assert r.returncode != 0 and r.stdout == b"", r.stderr


def test_librepgp_a3_ocb_packet(v6daemon, matrix):
    matrix("daemon", "LibrePGP", "A.3 SKESK v5 + OCB packet (tag 20)")
    r = decrypt(v6daemon, AEAD / "librepgp-a3.pgp", "--password-file", v6daemon.pwfile)
    assert r.returncode == 0, r.stderr
    assert r.stdout == HELLO + b"\n"


def test_a12_argon2_over_default_cap(v6daemon, matrix):
    """The A.12 samples need 2 GiB of Argon2 memory: the default cap refuses
    them cleanly, and the daemon goes on serving."""
    matrix("daemon", "RFC 9580", "A.12 Argon2 over the default cap")
    r = decrypt(v6daemon, V / "a12-1-skesk4-argon2-aes128-message.asc",
                "--password-file", v6daemon.pwfile)
    assert r.returncode != 0 and r.stdout == b"", r.stderr
    assert b"LIMIT" in r.stderr.upper(), r.stderr
    r = decrypt(v6daemon, AEAD / "a10-skesk6-aead-ocb-message.pgp", "--password-file", v6daemon.pwfile)
    assert r.returncode == 0 and r.stdout == HELLO, r.stderr


ARGON2_OPT = "--max-argon2-memory"


@pytest.mark.skipif(LEAN, reason="2 GiB Argon2 samples run in the normal build only")
@pytest.mark.parametrize("name", ["a12-1-skesk4-argon2-aes128-message.asc",
                                  "a12-2-skesk4-argon2-aes192-message.asc",
                                  "a12-3-skesk4-argon2-aes256-message.asc"])
def test_a12_argon2(tmp_path, matrix, name):
    matrix("daemon", "RFC 9580", "A.12 SKESK v4 Argon2 + SEIPD v1")
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "a04.asc").write_bytes((V / "a04-v6-secret-key.asc").read_bytes())
    d = Daemon(None, tmp_path, ARGON2_OPT, "2G", "--max-kdf-work", "1G", "--max-memory", "3G", keydir=keys)
    try:
        pw = tmp_path / "pw"
        pw.write_text("password\n")
        r = decrypt(d, V / name, "--password-file", pw)
        assert r.returncode == 0, r.stderr
        assert r.stdout == HELLO
    finally:
        assert d.stop() == 0, d.logtext()


@pytest.mark.parametrize("backend", ["openssl", "gcrypt"])
def test_a08_x25519_ecdh_backend(tmp_path, matrix, backend):
    """--ecdh-backend reaches the daemon's keys: the A.8 X25519 message
    decrypts with either backend (the A.8 shared secret on both)."""
    matrix("daemon", "RFC 9580", f"A.8 X25519, --ecdh-backend {backend}")
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "a04.asc").write_bytes((V / "a04-v6-secret-key.asc").read_bytes())
    d = Daemon(None, tmp_path, "--ecdh-backend", backend, keydir=keys)
    try:
        r = decrypt(d, V / "a08-x25519-aead-ocb-message.asc")
        assert r.returncode == 0, (r.stderr, d.logtext())
        assert r.stdout == HELLO
    finally:
        assert d.stop() == 0, d.logtext()


def test_ecdh_backend_refused(tmp_path, matrix):
    matrix("daemon", "RFC 9580", "--ecdh-backend rot13 refused")
    p = subprocess.run([PGPDECD, "--listen", "unix:" + str(tmp_path / "s"), "--key", str(V / "a04-v6-secret-key.asc"),
                        "--ecdh-backend", "rot13"], capture_output=True, timeout=60)
    assert p.returncode != 0
    assert b"ecdh-backend: want openssl or gcrypt, not 'rot13'" in p.stderr, p.stderr
