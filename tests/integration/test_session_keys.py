# SPDX-License-Identifier: MIT
"""Session keys through the daemon (PROTOCOL.md 5.1 and 7): a verified
message's session key given to the peers allow-session-key-export names
(unix users and groups, TLS client certificate pins), refused to everyone
else without changing anything else of the reply, logged either way
(never the key); and a request carrying a session key decrypts with no
key loaded.  pgpdecd-client's --session-key-out and --with-session-key
against gpg's --show-session-key and --override-session-key for the same
messages."""
import os
import re
import shutil
import ssl
import struct
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import pdwire  # noqa: E402
from pdwire import tlv  # noqa: E402
from test_daemon import CLIENT, Daemon, PGPDECD, check_ok, world  # noqa: E402,F401

pytestmark = pytest.mark.skipif(not shutil.which("gpg") or not os.path.exists(PGPDECD) or not os.path.exists(CLIENT),
                                reason="needs gpg, a built daemon and pgpdecd-client")

PLAIN = b"a message for the auditor 5e0b9d\n" * 50
SKLINE = re.compile(r"\[SKEY\] session key of request (\d+) id (\d+) from (.+?): (\S+) \(status (\w+), key (\S+)\)$",
                    re.M)


def gpg_session_key(world, msg):
    """gpg's own --show-session-key for msg (it holds the secret key)."""
    g = world["gpg"]
    r = subprocess.run(["gpg", "--homedir", g.home, "--batch", "--status-fd", "1", "--show-session-key",
                        "--decrypt"], input=msg, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    m = re.search(rb"^\[GNUPG:\] SESSION_KEY (\d+:[0-9A-F]+)$", r.stdout, re.M)
    assert m, r.stdout
    return m.group(1).decode()


@pytest.fixture(scope="module")
def msgs(world):
    g = world["gpg"]
    good = g.encrypt(PLAIN, "alice@example.org", compress=0)
    bad = bytearray(good)
    bad[-1] ^= 0x01  # inside the MDC
    return {"good": good, "bad": bytes(bad), "armored": g.encrypt(PLAIN, "alice@example.org", armor=True),
            "fpr": g.enc_fprs("alice@example.org")[0].upper(),
            "sk": gpg_session_key(world, good)}


def client(d, *args, input=None):
    return subprocess.run([CLIENT, "--socket", d.sock, *args], input=input, capture_output=True, timeout=60)


def result_tlvs(res, *tags):
    return [v for t, v in res["tlv"] if t in tags]


def skey_lines(d):
    return [m.groups() for m in SKLINE.finditer(d.logtext())]


def test_export_allowed_for_named_user(world, msgs, tmp_path):
    """Our uid is named: --session-key-out writes exactly what gpg's
    --show-session-key says; one line logged, with the key's fingerprint
    and never the session key."""
    d = Daemon(world, tmp_path, "--allow-session-key-export", "yes",
               "--session-key-export-user", str(os.getuid()))
    try:
        f = tmp_path / "m.gpg"
        f.write_bytes(msgs["good"])
        out, skf = tmp_path / "plain", tmp_path / "sk"
        r = client(d, "-o", str(out), "--session-key-out", str(skf), str(f))
        assert r.returncode == 0, r.stderr
        assert out.read_bytes() == PLAIN
        assert skf.read_text() == msgs["sk"] + "\n"
        assert os.stat(skf).st_mode & 0o777 == 0o600
        # armored, through standard input, verified-only: the same key
        r = client(d, "--verified-only", "--session-key-out", str(skf), input=msgs["armored"])
        assert r.returncode == 0 and r.stdout == PLAIN, r.stderr
        assert re.fullmatch(r"9:[0-9A-F]{64}\n", skf.read_text())
        d.wait_log("[SKEY]", 2)
    finally:
        assert d.stop() == 0
    got = skey_lines(d)
    assert len(got) == 2, d.logtext()
    for g in got:
        assert g[2] == "uid %d" % os.getuid() and g[3] == "exported" and g[4] == "OK" and g[5] == msgs["fpr"], g
    hexkey = msgs["sk"].split(":")[1]
    assert hexkey not in d.logtext() and hexkey.lower() not in d.logtext()


def wire_pair(c, msg, flags=0):
    """The same message with and without WANT_SESSION_KEY."""
    a = c.decrypt(msg, flags=flags)
    b = c.decrypt(msg, flags=flags | pdwire.F_WANT_SESSION_KEY)
    return a, b


def test_refused_by_default(world, msgs, tmp_path):
    """Without allow-session-key-export the message still decrypts: the
    RESULT is the one it would have been plus SESSION_KEY_REFUSED (1); a
    failed message's reply is exactly the same as without the flag; the
    client writes the plaintext and exits 77; the refusal is logged."""
    d = Daemon(world, tmp_path)
    try:
        c = d.client()
        (pa, ra, _), (pb, rb, _) = wire_pair(c, msgs["good"])
        check_ok(pb, rb, PLAIN)
        assert pa == pb
        assert result_tlvs(rb, pdwire.T_SESSION_KEY) == []
        assert result_tlvs(rb, pdwire.T_SESSION_KEY_REFUSED) == [b"\x01"]
        assert [t for t in rb["tlv"] if t[0] != pdwire.T_SESSION_KEY_REFUSED] == ra["tlv"]
        assert {k: v for k, v in rb.items() if k != "tlv"} == {k: v for k, v in ra.items() if k != "tlv"}
        for flags in (0, pdwire.F_VERIFIED_ONLY):
            (pa, ra, _), (pb, rb, _) = wire_pair(c, msgs["bad"], flags)
            assert ra["name"] == "INTEGRITY" and (pa, ra) == (pb, rb), (ra, rb)
        c.close()
        f = tmp_path / "m.gpg"
        f.write_bytes(msgs["good"])
        out, skf = tmp_path / "plain", tmp_path / "sk"
        r = client(d, "-o", str(out), "--session-key-out", str(skf), str(f))
        assert r.returncode == 77, r
        assert b"does not give session keys to this client" in r.stderr
        assert out.read_bytes() == PLAIN and not skf.exists()
        d.wait_log("[SKEY]", 4)
    finally:
        assert d.stop() == 0
    got = skey_lines(d)
    assert [g[3] for g in got] == ["refused", "not-given", "not-given", "refused"], got
    assert got[0][5] == msgs["fpr"] and got[1][4] == "INTEGRITY" and got[1][5] == "-", got


def test_refused_when_not_named(world, msgs, tmp_path):
    """Export on, but for another user (nobody) and another group: refused
    to us.  Then our group: given."""
    if os.getuid() == 65534:
        pytest.skip("running as nobody")
    d = Daemon(world, tmp_path, "--allow-session-key-export", "yes", "--session-key-export-user", "nobody",
               "--session-key-export-group", "65533")
    try:
        c = d.client()
        _, res, _ = c.decrypt(msgs["good"], flags=pdwire.F_WANT_SESSION_KEY)
        assert res["name"] == "OK" and result_tlvs(res, pdwire.T_SESSION_KEY_REFUSED) == [b"\x01"], res
        assert result_tlvs(res, pdwire.T_SESSION_KEY) == []
        c.close()
    finally:
        assert d.stop() == 0
    assert [g[3] for g in skey_lines(d)] == ["refused"]
    d = Daemon(world, tmp_path, "--allow-session-key-export", "yes", "--session-key-export-group", str(os.getgid()))
    try:
        c = d.client()
        _, res, _ = c.decrypt(msgs["good"], flags=pdwire.F_WANT_SESSION_KEY)
        sk = result_tlvs(res, pdwire.T_SESSION_KEY)
        assert len(sk) == 1 and "%d:%s" % (sk[0][0], sk[0][1:].hex().upper()) == msgs["sk"], res
        assert result_tlvs(res, pdwire.T_SESSION_KEY_REFUSED) == []
        c.close()
    finally:
        assert d.stop() == 0


def test_config_needs_a_name(world, tmp_path):
    """allow-session-key-export alone names nobody: a configuration error,
    not "anyone who can connect"; a bad pin too."""
    base = [PGPDECD, "--listen", "unix:" + str(tmp_path / "s"), "--keydir", str(world["keys"])]
    r = subprocess.run(base + ["--allow-session-key-export", "yes"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "allow-session-key-export needs session-key-export-user" in r.stderr, r
    r = subprocess.run(base + ["--session-key-export-pin", "abc"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "session-key-export-pin abc: want 64 hex digits" in r.stderr, r
    r = subprocess.run(base + ["--session-key-export-user", "no-such-user-pd"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and "session-key-export-user no-such-user-pd: no such user" in r.stderr, r


@pytest.mark.skipif(not shutil.which("certtool"), reason="needs certtool (gnutls-bin)")
def test_export_by_tls_pin(world, msgs, tmp_path):
    """Over TLS: the client certificate whose SHA-256 is a
    session-key-export-pin gets the key; another certificate of the same CA
    is served but refused the key."""
    from test_daemon_tls import free_port, make_pki, make_cert, tls_client
    pki = make_pki(tmp_path)
    other = make_cert(tmp_path, "client2", pki["ca"], "tls_www_client\nexpiration_days = 30\n")
    der = ssl.PEM_cert_to_DER_cert(pki["good"][1].read_text())
    import hashlib
    pin = hashlib.sha256(der).hexdigest()
    port = free_port()
    d = Daemon(world, tmp_path, "--listen", f"tcp:127.0.0.1:{port}", "--tls-cert", str(pki["srv"][1]),
               "--tls-key", str(pki["srv"][0]), "--tls-ca", str(pki["ca"][1]),
               "--allow-session-key-export", "yes", "--session-key-export-pin", pin)
    try:
        c = tls_client(port, pki, pki["good"])
        _, res, _ = c.decrypt(msgs["good"], flags=pdwire.F_WANT_SESSION_KEY)
        sk = result_tlvs(res, pdwire.T_SESSION_KEY)
        assert res["name"] == "OK" and len(sk) == 1, res
        assert "%d:%s" % (sk[0][0], sk[0][1:].hex().upper()) == msgs["sk"]
        c.close()
        c = tls_client(port, pki, other)
        _, res, _ = c.decrypt(msgs["good"], flags=pdwire.F_WANT_SESSION_KEY)
        assert res["name"] == "OK" and result_tlvs(res, pdwire.T_SESSION_KEY_REFUSED) == [b"\x01"], res
        c.close()
        # the same through pgpdecd-client
        f, skf = tmp_path / "m.gpg", tmp_path / "sk"
        f.write_bytes(msgs["good"])
        tls = ["--connect", f"127.0.0.1:{port}", "--tls-ca", str(pki["ca"][1]), "--tls-server-name", "localhost"]
        r = subprocess.run([CLIENT, *tls, "--tls-cert", str(pki["good"][1]), "--tls-key", str(pki["good"][0]),
                            "--session-key-out", str(skf), str(f)], capture_output=True, timeout=60)
        assert r.returncode == 0 and r.stdout == PLAIN, r.stderr
        assert skf.read_text() == msgs["sk"] + "\n"
        d.wait_log("[SKEY]", 3)
    finally:
        assert d.stop() == 0
    got = skey_lines(d)
    assert [g[3] for g in got] == ["exported", "refused", "exported"], got
    assert all(g[2] == "127.0.0.1" for g in got), got


def test_with_session_key_no_key_loaded(world, msgs, tmp_path):
    """A daemon holding no key of the message (only bob's: the daemon
    starts only with a key) decrypts with the session key gpg printed;
    a wrong key is INTEGRITY like any wrong key; a malformed one is refused
    by the client (64) and, on the wire, BAD_REQUEST; the log says
    session-key, never the key."""
    other = tmp_path / "bobonly"
    other.mkdir()
    shutil.copy(world["base"] / "bob.gpg", other / "bob.gpg")
    d = Daemon(world, tmp_path, "--passphrase-file", str(world["base"] / "bob.pass"), keydir=other)
    try:
        f, skf = tmp_path / "m.gpg", tmp_path / "sk"
        f.write_bytes(msgs["good"])
        r = client(d, str(f))
        assert r.returncode == 69, r  # NO_KEY: nothing loaded
        skf.write_text(msgs["sk"] + "\n")
        r = client(d, "--with-session-key", str(skf), str(f))
        assert r.returncode == 0 and r.stdout == PLAIN, r.stderr
        algo, hexkey = msgs["sk"].split(":")
        wrong = bytearray(bytes.fromhex(hexkey))
        wrong[0] ^= 1
        skf.write_text("%s:%s" % (algo, wrong.hex()))
        r = client(d, "--with-session-key", str(skf), str(f))
        assert r.returncode == 65 and b"INTEGRITY" in r.stderr, r
        skf.write_text("9:XYZ")
        r = client(d, "--with-session-key", str(skf), str(f))
        assert r.returncode == 64 and b"not of the form ALGO:HEX" in r.stderr, r
        c = d.client()
        key = bytes.fromhex(hexkey)
        for bad in (b"\x09" + key[:16], b"\x63" + key, b"\x09"):
            _, res, _ = c.decrypt(msgs["good"], opts=tlv(pdwire.T_SESSION_KEY_IN, bad))
            assert res["name"] == "BAD_REQUEST", (bad[:1], res)
        # and it can ask for the key back: it gives nothing it did not have
        _, res, _ = c.decrypt(msgs["good"], opts=tlv(pdwire.T_SESSION_KEY_IN, bytes([int(algo)]) + key))
        assert res["name"] == "OK", res
        c.close()
        d.wait_log("[REQ] request", 6)  # a SESSION_KEY_IN too short to parse is answered at once, unlogged
    finally:
        assert d.stop() == 0
    log = d.logtext()
    assert re.search(r"\[REQ\] request \d+ id \d+ from .*: OK key session-key integrity mdc", log), log
    assert hexkey not in log and hexkey.lower() not in log and wrong.hex() not in log


def test_round_trip_with_gpg(world, msgs, tmp_path):
    """What pgpdecd exports, gpg --override-session-key decrypts with (in a
    home without the secret key); what gpg --show-session-key printed, the
    daemon decrypts with; for a fresh armored message as well."""
    d = Daemon(world, tmp_path, "--allow-session-key-export", "yes",
               "--session-key-export-user", str(os.getuid()))
    home = tmp_path / "nokeyhome"
    home.mkdir(mode=0o700)
    try:
        msg = world["gpg"].encrypt(b"round trip\n", "alice@example.org", armor=True)
        f, skf = tmp_path / "rt.asc", tmp_path / "sk"
        f.write_bytes(msg)
        r = client(d, "--session-key-out", str(skf), str(f))
        assert r.returncode == 0 and r.stdout == b"round trip\n", r.stderr
        ours = skf.read_text().strip()
        assert ours == gpg_session_key(world, msg)
        r = subprocess.run(["gpg", "--homedir", str(home), "--batch", "--override-session-key", ours,
                            "--decrypt", str(f)], capture_output=True, timeout=60)
        assert r.returncode == 0 and r.stdout == b"round trip\n", r.stderr
        skf.write_text(gpg_session_key(world, msgs["good"]))
        f.write_bytes(msgs["good"])
        r = client(d, "--with-session-key", str(skf), str(f))
        assert r.returncode == 0 and r.stdout == PLAIN, r.stderr
    finally:
        assert d.stop() == 0
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True)
