# SPDX-License-Identifier: MIT
"""Loading keys as an operator does: the real daemon on a real socket, keys
made by gpg (and hand-built ones no Debian peer writes, keycraft.py),
messages written by gpg, sq and rnp.

- a passphrase per key file: NAME.passphrase beside the key file, or
  key-passphrase = KEYFILE:PASSFILE, or the global passphrase-file; a key
  directory laid out like systemd's credentials directory;
- keys the daemon cannot use (secp256k1, SM2, ML-KEM, v3, v5, a v6 key with
  the legacy Curve25519 OID, garbage) are skipped with a warning naming
  the reason; strict-keys refuses them; only unusable keys: exit 78 and a
  sentence that names the reason;
- key flags: an RSA key flagged certify+sign is not a decryption key (a
  message to it gets NO_KEY, as from Sequoia and GopenPGP), a legacy key
  without key flags decrypts (as in gpg);
- reload says which keys were added and removed, and warns that files under
  $CREDENTIALS_DIRECTORY are copies that only a restart renews.

Run: PD_BUILD_DIR=build /usr/bin/python3 -m pytest -q tests/integration/test_keys.py
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import keycraft  # noqa: E402
import pdwire  # noqa: E402
import pgp  # noqa: E402
from conftest import kill_gpg_agent  # noqa: E402
from pdwire import Client, frame  # noqa: E402

BUILD = os.environ.get("PD_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
PGPDECD = os.path.join(BUILD, "daemon", "pgpdecd")

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("gpg", "sq", "rnp")) or
                                not os.path.exists(PGPDECD),
                                reason="needs gpg, sq, rnp and a built daemon/pgpdecd")


class Gpg:
    def __init__(self, home):
        self.home = str(home)
        os.makedirs(self.home, mode=0o700, exist_ok=True)
        with open(os.path.join(self.home, "gpg-agent.conf"), "w") as f:
            f.write("allow-loopback-pinentry\n")

    def run(self, *args, input=None, passphrase="", check=True):
        return subprocess.run(["gpg", "--homedir", self.home, "--batch", "--yes", "--quiet",
                               "--pinentry-mode", "loopback", "--trust-model", "always",
                               "--passphrase", passphrase, *args],
                              input=input, check=check, capture_output=True)

    def fprs(self, uid):
        """Primary fingerprint, then the subkeys' (gpg's order)."""
        out = self.run("--with-colons", "--list-keys", uid).stdout.decode()
        return [ln.split(":")[9] for ln in out.splitlines() if ln.startswith("fpr")]

    def make(self, uid, palgo, pusage, salgo=None, passphrase=""):
        self.run("--quick-gen-key", uid, palgo, pusage, "never", passphrase=passphrase)
        if salgo:
            self.run("--quick-add-key", self.fprs(uid)[0], salgo, "encr", "never", passphrase=passphrase)
        return self.fprs(uid)

    def export(self, uid, passphrase=""):
        return self.run("--export-secret-keys", uid, passphrase=passphrase).stdout

    def cert(self, uid):
        return self.run("--export", uid).stdout

    def encrypt(self, data, uid):
        return self.run("--encrypt", "-r", uid, input=data).stdout


@pytest.fixture(scope="module")
def kw(tmp_path_factory):
    """The keys, made once: fingerprints, secret key files, certificates."""
    base = tmp_path_factory.mktemp("keys")
    g = Gpg(base / "gnupg")
    w = {"base": base, "gpg": g, "files": {}, "certs": {}, "fprs": {}}

    def keep(name, data, uid=None):
        p = base / f"{name}.pgp"
        p.write_bytes(data)
        w["files"][name] = p
        if uid:
            c = base / f"{name}.cert"
            c.write_bytes(g.cert(uid))
            w["certs"][name] = c
        return p

    # Ed25519 + Cv25519, each protected with its own passphrase.
    for name, pw in (("one", "first secret"), ("two", "second secret"), ("three", "third secret")):
        uid = f"{name}@pd.test"
        w["fprs"][name] = g.make(uid, "ed25519", "cert,sign", "cv25519", passphrase=pw)
        keep(name, g.export(uid, passphrase=pw), uid)
        w[name + ".pass"] = pw
    w["fprs"]["plain"] = g.make("plain@pd.test", "ed25519", "cert,sign", "cv25519")
    keep("plain", g.export("plain@pd.test"), "plain@pd.test")
    # secp256k1 (gpg makes it, pgpdecd has no such curve), brainpool (it has).
    w["fprs"]["k1"] = g.make("k1@pd.test", "secp256k1", "cert,sign", "secp256k1")
    keep("k1", g.export("k1@pd.test"), "k1@pd.test")
    w["fprs"]["bp"] = g.make("bp@pd.test", "brainpoolP256r1", "cert,sign", "brainpoolP256r1")
    keep("bp", g.export("bp@pd.test"), "bp@pd.test")
    # RSA flagged certify+sign, no encryption subkey.
    w["fprs"]["cs"] = g.make("cs@pd.test", "rsa2048", "cert,sign")
    keep("cs", g.export("cs@pd.test"), "cs@pd.test")
    # RSA without any Key Flags subpacket: gpg takes it for an encryption key.
    legacy = keycraft.RsaKey()
    w["fprs"]["legacy"] = [legacy.fpr.hex().upper()]
    keep("legacy", legacy.transferable(b"legacy <legacy@pd.test>"))
    legacy_cert = base / "legacy.cert"
    legacy_cert.write_bytes(legacy.transferable(b"legacy <legacy@pd.test>", secret=False))
    g.run("--import", str(legacy_cert))
    w["certs"]["legacy"] = legacy_cert
    # Hand-built keys no peer here writes.
    keep("v3", keycraft.v3_rsa_key(keycraft.RsaKey()))
    keep("v5", keycraft.v5_key())
    keep("sm2", keycraft.v4_eddsa_primary() + keycraft.sm2_subkey())
    mlkem, _, w["mlkem_fpr"] = keycraft.v6_mlkem_subkey()
    keep("mlkem", mlkem)
    v6legacy, _, w["v6legacy_fpr"] = keycraft.v6_legacy_cv25519_subkey()
    keep("v6legacy", v6legacy)
    keep("garbage", b"this is not an OpenPGP key file\n" * 3)
    yield w
    kill_gpg_agent(g.home)


class Daemon:
    def __init__(self, tmp_path, *args, env=None, expect_start=True):
        self.sock = str(tmp_path / "pd.sock")
        self.logpath = tmp_path / "daemon.log"
        self.log = open(self.logpath, "w+b")
        argv = [PGPDECD, "--listen", "unix:" + self.sock, "--workers", "2", *map(str, args)]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=self.log, env=env)
        if not expect_start:
            return
        deadline = time.time() + 60
        while not self.answers():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("daemon did not start:\n" + self.text())
            time.sleep(0.02)

    def answers(self):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(self.sock)
            s.sendall(frame(pdwire.HELLO, 0, b"PGPD\x00\x01\x00\x01"))
            ok = len(s.recv(9)) > 0
            s.close()
            return ok
        except OSError:
            return False

    def text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def wait_log(self, text, count=1, timeout=60):
        deadline = time.time() + timeout
        while self.text().count(text) < count:
            assert self.proc.poll() is None, self.text()
            assert time.time() < deadline, f"no {text!r} in the log:\n" + self.text()
            time.sleep(0.05)

    def client(self):
        return Client(self.sock)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)
        log = self.text()
        for bad in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
            assert bad not in log, log[-5000:]
        return self.proc.returncode


def refused(tmp_path, *args):
    """Run the daemon expecting it not to start: (exit status, stderr)."""
    p = subprocess.run([PGPDECD, "--listen", "unix:" + str(tmp_path / "never.sock"), *map(str, args)],
                       capture_output=True, timeout=120)
    err = p.stderr.decode(errors="replace")
    for bad in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
        assert bad not in err, err
    return p.returncode, err


def decrypts(d, msg, plain):
    got, res, _ = d.client().decrypt(msg)
    assert res["name"] == "OK", res
    assert got == plain


def sq_encrypt(cert, data, tmp_path):
    src = tmp_path / "sq-plain"
    src.write_bytes(data)
    return subprocess.run(["sq", "encrypt", "--recipient-cert", str(cert), str(src)],
                          capture_output=True, check=True, env=dict(os.environ, HOME=str(tmp_path))).stdout


def rnp_encrypt(cert, data, tmp_path):
    home = tmp_path / "rnphome"
    home.mkdir(exist_ok=True)
    src, out = tmp_path / "rnp-plain", tmp_path / "rnp-plain.gpg"
    src.write_bytes(data)
    subprocess.run(["rnp", "--homedir", str(home), "--keyfile", str(cert), "-e", str(src), "--output", str(out),
                    "--overwrite"], capture_output=True, check=True)
    return out.read_bytes()


def keys_of(d):
    return {k["fpr"] for k in d.client().keys()}


def copy(kw, name, where, as_name=None):
    dst = where / (as_name or f"{name}.pgp")
    shutil.copy(kw["files"][name], dst)
    return dst


# --------------------------------------------------------------------------
# A passphrase per key file

def test_two_passphrases_beside_the_key_files(kw, tmp_path):
    """--key one.pgp --key two.pgp, each unlocked by NAME.passphrase beside
    it; a third key with key-passphrase = KEYFILE:PASSFILE; messages from
    gpg, sq and rnp all decrypt."""
    d_keys = tmp_path / "k"
    d_keys.mkdir()
    one, two, three = (copy(kw, n, d_keys) for n in ("one", "two", "three"))
    (d_keys / "one.pgp.passphrase").write_text(kw["one.pass"] + "\n")
    (d_keys / "two.pgp.passphrase").write_text(kw["two.pass"])
    elsewhere = tmp_path / "three-pass"
    elsewhere.write_text(kw["three.pass"] + "\r\n")
    d = Daemon(tmp_path, "--key", one, "--key", two, "--key", three,
               "--key-passphrase", f"{three}:{elsewhere}", "--log-level", "info")
    try:
        loaded = keys_of(d)
        for n in ("one", "two", "three"):
            assert kw["fprs"][n][1] in loaded, (n, loaded)
        g = kw["gpg"]
        decrypts(d, g.encrypt(b"to one", "one@pd.test"), b"to one")
        decrypts(d, sq_encrypt(kw["certs"]["two"], b"to two", tmp_path), b"to two")
        decrypts(d, rnp_encrypt(kw["certs"]["three"], b"to three", tmp_path), b"to three")
        log = d.text()
        assert f"(passphrase {one}.passphrase)" in log, log
        assert f"(passphrase {elsewhere})" in log, log
        # written 0644: each passphrase file is named, key-passphrase's too
        for pw in (f"{one}.passphrase", f"{two}.passphrase", elsewhere):
            assert f"passphrase file {pw} is open to other users (mode 0644)" in log, log
        for n in ("one", "two", "three"):
            assert kw[n + ".pass"] not in log
    finally:
        assert d.stop() == 0


def test_keydir_as_credentials_directory_per_key(kw, tmp_path):
    """keydir = $CREDENTIALS_DIRECTORY holding a.pgp + a.pgp.passphrase,
    b.pgp + b.pgp.passphrase, an unprotected key and the global passphrase
    for the third protected key: every key loads, no *.passphrase file is
    read as a key, and the reload warns that credentials are copies."""
    creds = tmp_path / "credentials" / "pgpdecd.service"
    creds.mkdir(parents=True, mode=0o700)
    copy(kw, "one", creds, "a.pgp")
    (creds / "a.pgp.passphrase").write_text(kw["one.pass"] + "\n")
    copy(kw, "two", creds, "b.pgp")
    (creds / "b.pgp.passphrase").write_text(kw["two.pass"] + "\n")
    copy(kw, "three", creds, "c.pgp")
    (creds / "passphrase").write_text(kw["three.pass"] + "\n")
    copy(kw, "plain", creds, "plain.pgp")
    env = dict(os.environ, CREDENTIALS_DIRECTORY=str(creds))
    d = Daemon(tmp_path, "--keydir", creds, "--passphrase-file", creds / "passphrase", env=env)
    try:
        loaded = keys_of(d)
        assert len(loaded) == 4, loaded  # the four Cv25519 subkeys; the Ed25519 primaries sign
        g = kw["gpg"]
        for n in ("one", "two", "three", "plain"):
            assert kw["fprs"][n][1] in loaded
            decrypts(d, g.encrypt(f"to {n}".encode(), f"{n}@pd.test"), f"to {n}".encode())
        log = d.text()
        assert "skipped" not in log, log  # no *.passphrase file was taken for a key file
        assert f"(passphrase {creds}/a.pgp.passphrase)" in log
        assert f"(passphrase {creds}/passphrase)" in log  # c.pgp: the global one
        # written 0644, the global one is named like the others
        assert f"passphrase file {creds}/passphrase is open to other users (mode 0644)" in log, log
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log("reloaded:")
        log = d.text()
        assert "reload: keys unchanged" in log, log
        assert (f"reload re-read 7 systemd credentials in {creds} (a.pgp, a.pgp.passphrase, b.pgp, "
                "b.pgp.passphrase, c.pgp, passphrase, plain.pgp)" in log and
                "systemctl restart pgpdecd.service to pick up changed source files" in log), log
    finally:
        assert d.stop() == 0


def test_packaged_unit_with_more_credentials(kw, tmp_path):
    """The packaged unit's ExecStart (--key $CREDENTIALS_DIRECTORY/keys.pgp
    --passphrase-file $CREDENTIALS_DIRECTORY/passphrase) plus the drop-in
    pgpdecd(8) describes: b.pgp and b.pgp.passphrase as credentials and
    keydir = the credentials directory.  keys.pgp is loaded once (not again
    from keydir), its passphrase is the unit's, b.pgp's is its own."""
    creds = tmp_path / "pgpdecd.service"
    creds.mkdir(mode=0o700)
    copy(kw, "one", creds, "keys.pgp")
    (creds / "passphrase").write_text(kw["one.pass"] + "\n")
    copy(kw, "two", creds, "b.pgp")
    (creds / "b.pgp.passphrase").write_text(kw["two.pass"] + "\n")
    for f in creds.iterdir():
        f.chmod(0o400)  # as systemd writes credentials
    conf = tmp_path / "pgpdecd.conf"
    conf.write_text(f"[pgpdecd]\nkeydir = {creds}\n")
    env = dict(os.environ, CREDENTIALS_DIRECTORY=str(creds))
    d = Daemon(tmp_path, "--config", conf, "--key", creds / "keys.pgp", "--passphrase-file", creds / "passphrase",
               env=env)
    try:
        assert keys_of(d) == {kw["fprs"]["one"][1], kw["fprs"]["two"][1]}
        log = d.text()
        assert log.count(f"key file {creds}/keys.pgp") == 1, log
        assert f"key file {creds}/b.pgp (passphrase {creds}/b.pgp.passphrase): 1 decryption key" in log, log
        assert "skipped" not in log and "holds no decryption key" not in log, log
        g = kw["gpg"]
        decrypts(d, g.encrypt(b"to one", "one@pd.test"), b"to one")
        decrypts(d, g.encrypt(b"to two", "two@pd.test"), b"to two")
    finally:
        assert d.stop() == 0


def test_wrong_or_missing_passphrase_names_the_key(kw, tmp_path):
    one = copy(kw, "one", tmp_path)
    (tmp_path / "one.pgp.passphrase").write_text("not the passphrase\n")
    rc, err = refused(tmp_path, "--key", one)
    fpr = kw["fprs"]["one"][1]
    assert rc == 78, err
    assert f"key file {one}: key {fpr}: wrong passphrase (passphrase {one}.passphrase)" in err, err
    assert "not the passphrase" not in err
    (tmp_path / "one.pgp.passphrase").unlink()
    rc, err = refused(tmp_path, "--key", one)
    assert rc == 78, err
    assert (f"key file {one}: key {fpr} is protected and no passphrase was given: put it in "
            f"{one}.passphrase, or set passphrase-file or key-passphrase") in err, err


def test_key_passphrase_must_name_a_loaded_key(kw, tmp_path):
    one = copy(kw, "one", tmp_path)
    pf = tmp_path / "pass"
    pf.write_text(kw["one.pass"])
    rc, err = refused(tmp_path, "--key", one, "--key-passphrase", f"{tmp_path / 'typo.pgp'}:{pf}")
    assert rc == 78 and "key-passphrase" in err and "typo.pgp" in err and "not a key file" in err, err
    rc, err = refused(tmp_path, "--key", one, "--key-passphrase", str(one))
    assert rc == 64 and "key-passphrase" in err and "KEYFILE:PASSFILE" in err, err


# --------------------------------------------------------------------------
# Keys that cannot be used

UNUSABLE = ["k1", "sm2", "mlkem", "v3", "v5", "v6legacy", "garbage"]


def skip_lines(kw, d_keys):
    """The warning each unusable file must cause."""
    f = kw["fprs"]
    return {
        "k1": f"key {f['k1'][1]} in {d_keys}/k1.pgp skipped: unsupported curve secp256k1",
        "sm2": f"in {d_keys}/sm2.pgp skipped: unsupported curve SM2 (1.2.156.10197.1.301)",
        "mlkem": (f"key {kw['mlkem_fpr'].hex().upper()} in {d_keys}/mlkem.pgp skipped: unsupported "
                  "public-key algorithm 35 (ML-KEM-768+X25519)"),
        "v3": f"in {d_keys}/v3.pgp skipped: v3 key (obsolete, not supported)",
        "v5": f"in {d_keys}/v5.pgp skipped: LibrePGP v5 key (not supported: RFC 9580 keys are v4 or v6)",
        "v6legacy": (f"key {kw['v6legacy_fpr'].hex().upper()} in {d_keys}/v6legacy.pgp skipped: v6 key with the "
                     "legacy Curve25519 OID (RFC 9580 section 9.2 allows it only in v4 keys; v6 keys use X25519)"),
        "garbage": f"key file {d_keys}/garbage.pgp skipped: key file is neither armored nor binary OpenPGP",
    }


def test_unusable_keys_are_skipped(kw, tmp_path):
    d_keys = tmp_path / "keys"
    d_keys.mkdir()
    for n in ["plain", "bp"] + UNUSABLE:
        copy(kw, n, d_keys)
    d = Daemon(tmp_path, "--keydir", d_keys)
    try:
        log = d.text()
        for n, line in skip_lines(kw, d_keys).items():
            assert line in log, (n, line, log)
        assert "LibrePGP" not in log.replace(skip_lines(kw, d_keys)["v5"], ""), log
        assert f"key file {d_keys}/k1.pgp skipped: no usable secret decryption key" in log, log
        assert "2 decryption keys loaded" in log, log
        loaded = keys_of(d)
        assert loaded == {kw["fprs"]["plain"][1], kw["fprs"]["bp"][1]}, loaded
        g = kw["gpg"]
        decrypts(d, g.encrypt(b"to plain", "plain@pd.test"), b"to plain")
        decrypts(d, g.encrypt(b"to brainpool", "bp@pd.test"), b"to brainpool")
        # gpg encrypts to the secp256k1 subkey: a key we do not hold.
        got, res, _ = d.client().decrypt(g.encrypt(b"to k1", "k1@pd.test"))
        assert res["name"] == "NO_KEY" and got == b"", res
    finally:
        assert d.stop() == 0


def test_strict_keys_refuses(kw, tmp_path):
    d_keys = tmp_path / "keys"
    d_keys.mkdir()
    copy(kw, "plain", d_keys)
    copy(kw, "k1", d_keys)
    conf = tmp_path / "pgpdecd.conf"
    conf.write_text(f"[keys]\nkeydir = {d_keys}\nstrict-keys = yes\n")
    rc, err = refused(tmp_path, "--config", conf)
    assert rc == 78, err
    assert (f"strict-keys: key {kw['fprs']['k1'][1]} in {d_keys}/k1.pgp: unsupported curve secp256k1 "
            "(remove the key or set strict-keys = no)") in err, err


@pytest.mark.parametrize("name,reason", [
    ("k1", "unsupported curve secp256k1"),
    ("v6legacy", "v6 key with the legacy Curve25519 OID"),
    ("mlkem", "unsupported public-key algorithm 35 (ML-KEM-768+X25519)"),
    ("v3", "v3 key (obsolete, not supported)"),
    ("cs", "key flags do not allow encryption (certify, sign)"),
    ("garbage", "key file is neither armored nor binary OpenPGP"),
])
def test_only_unusable_keys_refuse_to_start(kw, tmp_path, name, reason):
    rc, err = refused(tmp_path, "--key", kw["files"][name])
    assert rc == 78, err
    m = re.search(r"no usable decryption key was loaded: (.*)", err)
    assert m and reason in m.group(1) and str(kw["files"][name]) in m.group(1), err


# --------------------------------------------------------------------------
# Key flags

def test_cert_sign_key_is_not_a_decryption_key(kw, tmp_path):
    """An RSA primary flagged certify+sign: not loaded, and a message to it
    (no peer writes one: built with its public key) gets NO_KEY, with the
    same sentence as one to any key we do not hold.  Sequoia (sq, sqop) and
    GopenPGP (gosop) refuse it too; GnuPG 2.2.40 and RNP 0.16 decrypt it
    (they ignore the flags when decrypting)."""
    plain = copy(kw, "plain", tmp_path)
    cs = copy(kw, "cs", tmp_path)
    d = Daemon(tmp_path, "--key", plain, "--key", cs)
    try:
        cs_fpr = kw["fprs"]["cs"][0]
        assert cs_fpr not in keys_of(d)
        assert f"key file {cs} skipped: no usable secret decryption key: key {cs_fpr}: key flags do not " \
               "allow encryption (certify, sign)" in d.text(), d.text()
        msg = pgp.encrypt_to_rsa(kw["certs"]["cs"].read_bytes(), pgp.literal(b"to the signing key"))
        got, res, _ = d.client().decrypt(msg)
        assert res["name"] == "NO_KEY" and got == b"", res
        # A message to an RSA key nobody holds: the same answer, only the key ID differs.
        other = pgp.encrypt_to_rsa(kw["certs"]["legacy"].read_bytes(), pgp.literal(b"x"))
        _, res2, _ = d.client().decrypt(other)
        assert res2["name"] == "NO_KEY"
        cs_kid, other_kid = cs_fpr[-16:], kw["fprs"]["legacy"][0][-16:]
        assert res["sentence"].upper().replace(cs_kid, "KID") == res2["sentence"].upper().replace(other_kid, "KID"), \
            (res, res2)
        assert set(t for t, _ in res["tlv"]) == set(t for t, _ in res2["tlv"])
    finally:
        assert d.stop() == 0
    m = tmp_path / "cs.msg"
    m.write_bytes(msg)
    p = subprocess.run(["sqop", "decrypt", str(cs)], stdin=open(m, "rb"), capture_output=True)
    assert p.returncode == 29, p  # CANNOT_DECRYPT
    p = subprocess.run(["sq", "decrypt", "--recipient-key", str(cs), str(m)], capture_output=True,
                       env=dict(os.environ, HOME=str(tmp_path)))
    assert p.returncode != 0 and b"No key to decrypt message" in p.stderr, p


def test_flagless_legacy_key_decrypts(kw, tmp_path):
    """A v4 RSA key whose self-signature carries no Key Flags: gpg, rnp and
    gosop encrypt to it (sq refuses: "no suitable encryption key"), and
    pgpdecd decrypts, as gpg does."""
    d = Daemon(tmp_path, "--key", kw["files"]["legacy"])
    try:
        assert keys_of(d) == {kw["fprs"]["legacy"][0]}
        g = kw["gpg"]
        msg = g.encrypt(b"to a key without flags", "legacy@pd.test")
        decrypts(d, msg, b"to a key without flags")
        decrypts(d, rnp_encrypt(kw["certs"]["legacy"], b"rnp too", tmp_path), b"rnp too")
        msg = subprocess.run(["gosop", "encrypt", str(kw["certs"]["legacy"])], input=b"gosop too",
                             capture_output=True, check=True).stdout
        decrypts(d, msg, b"gosop too")
    finally:
        assert d.stop() == 0


# --------------------------------------------------------------------------
# Reload

def test_reload_says_what_changed(kw, tmp_path):
    d_keys = tmp_path / "keys"
    d_keys.mkdir()
    copy(kw, "plain", d_keys)
    d = Daemon(tmp_path, "--keydir", d_keys)
    try:
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log("reloaded:")
        assert "reload: keys unchanged (1 decryption key)" in d.text()
        copy(kw, "bp", d_keys)
        copy(kw, "k1", d_keys)
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log("reloaded:", 2)
        log = d.text()
        bp = kw["fprs"]["bp"][1]
        assert f"reload: key {bp} added (ECDH brainpoolP256r1, {d_keys}/bp.pgp)" in log, log
        assert f"key {kw['fprs']['k1'][1]} in {d_keys}/k1.pgp skipped: unsupported curve secp256k1" in log
        assert "systemd credential" not in log
        (d_keys / "plain.pgp").unlink()
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log("reloaded:", 3)
        assert f"reload: key {kw['fprs']['plain'][1]} removed" in d.text(), d.text()
        assert keys_of(d) == {bp}
    finally:
        assert d.stop() == 0


@pytest.mark.parametrize("with_passphrase", [False, True])
def test_reload_warns_about_a_credential(kw, tmp_path, with_passphrase):
    """--key $CREDENTIALS_DIRECTORY/keys.pgp, and with the packaged unit's
    --passphrase-file $CREDENTIALS_DIRECTORY/passphrase."""
    creds = tmp_path / "pgpdecd.service"
    creds.mkdir(mode=0o700)
    keys = copy(kw, "plain", creds, "keys.pgp")
    args = ["--key", keys]
    if with_passphrase:
        (creds / "passphrase").write_bytes(b"")
        args += ["--passphrase-file", creds / "passphrase"]
    env = dict(os.environ, CREDENTIALS_DIRECTORY=str(creds))
    d = Daemon(tmp_path, *args, env=env)
    try:
        assert "systemd credential" not in d.text()
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log("reloaded:")
        if with_passphrase:
            want = (f"reload re-read 2 systemd credentials in {creds} (keys.pgp, passphrase): systemctl "
                    "restart pgpdecd.service to pick up changed source files")
        else:
            want = (f"reload re-read {keys}, a systemd credential: systemctl restart pgpdecd.service to "
                    "pick up a changed source file")
        assert want in d.text(), d.text()
    finally:
        assert d.stop() == 0


def test_pd_decrypt_names_skipped_keys(kw, tmp_path):
    """The engine's test driver loads through the same key ring: it warns
    about the key it skips and decrypts with the one it loaded; a key file
    with nothing usable stays an error there (exit 12, EUNSUPPORTED)."""
    pd = os.path.join(BUILD, "tools", "pd-decrypt")
    msg = tmp_path / "m.pgp"
    msg.write_bytes(kw["gpg"].encrypt(b"to plain", "plain@pd.test"))
    both = tmp_path / "both.pgp"
    both.write_bytes(kw["files"]["plain"].read_bytes() + kw["files"]["k1"].read_bytes())
    p = subprocess.run([pd, "--key", str(both), str(msg)], capture_output=True)
    assert p.returncode == 0 and p.stdout == b"to plain", p
    assert (f"pd-decrypt: warning: key {kw['fprs']['k1'][1]} in {both} skipped: unsupported curve secp256k1"
            in p.stderr.decode()), p.stderr
    p = subprocess.run([pd, "--key", str(kw["files"]["k1"]), str(msg)], capture_output=True)
    assert p.returncode == 12 and b"pd-decrypt: EUNSUPPORTED: " in p.stderr, p
    assert b"unsupported curve secp256k1" in p.stderr


def test_open_key_files_and_keydir_are_named(kw, tmp_path):
    """A key file or passphrase file other users may read, or a key
    directory others may write to (they would add keys), is loaded as it
    was, with a warning that names it and the chmod that closes it; one
    that is closed gets none.  No check before: such files loaded silently."""
    kd = tmp_path / "kd"
    kd.mkdir()
    one = copy(kw, "one", kd)
    pw = kd / "one.pgp.passphrase"
    pw.write_text(kw["one.pass"] + "\n")
    plain = copy(kw, "plain", kd)
    os.chmod(one, 0o644)
    os.chmod(pw, 0o604)
    os.chmod(plain, 0o600)
    os.chmod(kd, 0o777)
    d = Daemon(tmp_path, "--keydir", kd, "--log-level", "info")
    try:
        assert kw["fprs"]["one"][1] in keys_of(d) and kw["fprs"]["plain"][1] in keys_of(d)
        log = d.text()
        assert f"key file {one} is open to other users (mode 0644)" in log, log
        assert f"chmod o-rwx {one}" in log, log
        assert f"passphrase file {pw} is open to other users (mode 0604)" in log, log
        assert f"key file {plain} is open" not in log, log
        assert f"key directory {kd} is writable by every user (mode 0777)" in log, log
        assert kw["one.pass"] not in log
        # closed: a reload says nothing of them
        for p in (one, pw):
            os.chmod(p, 0o600)
        os.chmod(kd, 0o750)
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log("reloaded:")
        after = d.text()[len(log):]
        assert "open to other users" not in after and "writable by" not in after, after
    finally:
        assert d.stop() == 0
