# SPDX-License-Identifier: MIT
"""pgpdecd-gpg, the gpg-compatible front end, against the real daemon and
the real consumers from Debian: python-gnupg with its gpgbinary pointed at
it, GPGME (its Python binding) with the engine file name set to it, and
`pass show` with it first on PATH as gpg and gpg2.  And its status lines
compared line by line with gpg 2.2's own for the same messages, in a gpg
home holding exactly the key the daemon holds: equal except for the
differences pgpdecd-gpg(1) documents (each asserted here as such)."""
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_daemon import BUILD, CLIENT, Daemon, PGPDECD, world  # noqa: E402,F401
from conftest import has_o_tmpfile, plaintext_written  # noqa: E402

GPGFRONT = os.path.join(BUILD, "client", "pgpdecd-gpg")
pytestmark = pytest.mark.skipif(not shutil.which("gpg") or not os.path.exists(PGPDECD)
                                or not os.path.exists(GPGFRONT), reason="needs gpg and a built pgpdecd-gpg")

PLAIN = b"front end test 41c7\nsecond line\n"
PW = "front pw"
# Lines gpg writes about its own machinery or about signatures, which
# pgpdecd-gpg does not write (it has no keyring, no card, and does not
# verify signatures).
GPG_ONLY = ("KEY_CONSIDERED", "CARDCTRL", "NEWSIG", "SIG_ID", "GOODSIG", "BADSIG", "ERRSIG", "VALIDSIG",
            "TRUST_", "PINENTRY_LAUNCHED", "NO_PUBKEY")


@pytest.fixture(scope="module")
def front(world, tmp_path_factory):
    """A gpg home with alice's secret key only (what the daemon holds), the
    messages, and the daemon."""
    base = tmp_path_factory.mktemp("front")
    home = base / "gnupg"
    home.mkdir(mode=0o700)
    subprocess.run(["gpg", "--homedir", str(home), "--batch", "--import", str(world["keys"] / "alice.gpg")],
                   check=True, capture_output=True)
    g = world["gpg"]
    good = g.encrypt(PLAIN, "alice@example.org")
    bad = bytearray(good)
    bad[-1] ^= 0x01
    rnd = random.Random(15)
    msgs = {
        "success": good,
        "armored": g.encrypt(PLAIN, "alice@example.org", armor=True),
        "nokey": g.encrypt(PLAIN, "bob@example.org"),
        "tampered": bytes(bad),
        "garbage": bytes(rnd.randrange(256) for _ in range(300)),
        "password": g.run("--symmetric", "--passphrase", PW, input=PLAIN),
        "hidden": g.run("--encrypt", "--hidden-recipient", "alice@example.org", input=PLAIN),
        "hidden-nokey": g.run("--encrypt", "--hidden-recipient", "bob@example.org", input=PLAIN),
        "signed": g.run("--sign", "--encrypt", "-u", "alice@example.org", "-r", "alice@example.org", input=PLAIN),
    }
    files = {}
    for k, v in msgs.items():
        files[k] = base / (k + ".pgp")
        files[k].write_bytes(v)
    bindir = base / "bin"
    bindir.mkdir()
    for name in ("gpg", "gpg2"):
        os.symlink(GPGFRONT, bindir / name)
    d = Daemon(world, base, "--allow-session-key-export", "yes", "--session-key-export-user", str(os.getuid()))
    yield {"home": home, "msgs": msgs, "files": files, "base": base, "bin": bindir, "daemon": d}
    assert d.stop() == 0
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True)


def status_of(argv, front, case, pw=None, env=None):
    """Run a decryption with --status-fd 3; (exit code, status lines, stdout)."""
    r_fd, w_fd = os.pipe()
    args = [*argv, "--batch", "--status-fd", str(w_fd)]
    if pw is not None:
        args += ["--pinentry-mode", "loopback", "--passphrase-fd", "0"]
    args += ["--decrypt", str(front["files"][case])]
    p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         pass_fds=(w_fd,), env=env)
    os.close(w_fd)
    out, err = p.communicate((pw + "\n").encode() if pw is not None else b"", timeout=60)
    with os.fdopen(r_fd, "rb") as f:
        lines = f.read().decode().splitlines()
    return p.returncode, lines, out, err


def gpg_status(front, case, pw=None):
    return status_of(["gpg", "--homedir", str(front["home"])], front, case, pw)


def our_status(front, case, pw=None, prog=GPGFRONT):
    env = dict(os.environ, PGPDECD_SOCKET=front["daemon"].sock)
    return status_of([prog, "--homedir", "/nonexistent"], front, case, pw, env)


def expected_from_gpg(case, lines):
    """gpg's lines with the documented differences applied."""
    out = [ln for ln in lines if not ln.split(" ")[1].startswith(GPG_ONLY)]
    if case == "tampered":
        # A message that failed its MDC: which key's trial decoded it, the
        # cipher and the literal packet are unauthenticated: not said.
        out = [ln for ln in out if not ln.split(" ")[1] in ("DECRYPTION_KEY", "DECRYPTION_INFO", "PLAINTEXT",
                                                             "PLAINTEXT_LENGTH")]
    if case == "hidden-nokey":
        # A wildcard PKESK no loaded key opens: the trial's key is random,
        # so it ends as a modified message, by design (no oracle).
        out = [ln for ln in out if ln != "[GNUPG:] NO_SECKEY 0000000000000000"]
        out.insert(out.index("[GNUPG:] BEGIN_DECRYPTION") + 1, "[GNUPG:] BADMDC")
    if case == "password":
        # The S2K of the SKESK is the daemon's business: mode and hash 0.
        out = [re.sub(r"^(\[GNUPG:\] NEED_PASSPHRASE_SYM \d+) \d+ \d+$", r"\1 0 0", ln) for ln in out]
    if case == "password-wrong":
        # Failed: not even the cipher is said (it comes with the RESULT of
        # a message that opened), so no DECRYPTION_INFO either.
        out = [re.sub(r"^\[GNUPG:\] NEED_PASSPHRASE_SYM \d+ \d+ \d+$", "[GNUPG:] NEED_PASSPHRASE_SYM 0 0 0", ln)
               for ln in out if " DECRYPTION_INFO " not in ln]
    return out


CASES = ["success", "armored", "nokey", "tampered", "garbage", "password", "hidden", "hidden-nokey", "signed"]


@pytest.mark.parametrize("case", CASES)
def test_status_lines_like_gpg(front, case):
    """Line by line, the same status output (and exit code, and plaintext)
    as gpg 2.2 for the same message."""
    pw = PW if case == "password" else None
    grc, glines, gout, gerr = gpg_status(front, case, pw)
    orc, olines, oout, oerr = our_status(front, case, pw)
    assert orc == grc, (case, grc, orc, oerr)
    assert olines == expected_from_gpg(case, glines), (case, glines, olines)
    if grc == 0:
        assert oout == gout == PLAIN
    # pgpdecd-client --status-fd writes the same lines
    if case != "password":
        env = dict(os.environ, PGPDECD_SOCKET=front["daemon"].sock)
        r_fd, w_fd = os.pipe()
        p = subprocess.run([CLIENT, "--status-fd", str(w_fd), str(front["files"][case])], pass_fds=(w_fd,),
                           capture_output=True, env=env, timeout=60)
        os.close(w_fd)
        with os.fdopen(r_fd, "rb") as f:
            assert f.read().decode().splitlines() == olines, case
        assert (p.returncode == 0) == (orc == 0)


def test_documented_differences_are_real(front):
    """The differences the comparison allows are there in gpg's output
    (else the allowance would hide nothing and should go)."""
    _, t, _, _ = gpg_status(front, "tampered")
    assert any(" DECRYPTION_KEY " in ln for ln in t) and any(" PLAINTEXT " in ln for ln in t)
    _, h, _, _ = gpg_status(front, "hidden-nokey")
    assert "[GNUPG:] NO_SECKEY 0000000000000000" in h
    _, s, _, _ = gpg_status(front, "signed")
    assert any(" GOODSIG " in ln for ln in s)
    _, p, _, _ = gpg_status(front, "password", PW)
    assert [ln for ln in p if "NEED_PASSPHRASE_SYM" in ln] != [ln for ln in our_status(front, "password", PW)[1]
                                                                if "NEED_PASSPHRASE_SYM" in ln]


def test_wrong_password_and_refusals(front, tmp_path):
    """A wrong password: gpg's ERROR line and exit 2.  Commands that are not
    decryption, and unknown options: exit 2 with a clear message."""
    grc, glines, _, _ = gpg_status(front, "password", "wrong")
    orc, olines, _, _ = our_status(front, "password", "wrong")
    assert grc == orc == 2
    assert olines == expected_from_gpg("password-wrong", glines), (glines, olines)
    assert any(" DECRYPTION_INFO " in ln for ln in glines)
    for argv, msg in ((["--encrypt", "-r", "x"], b"--encrypt is not supported: pgpdecd-gpg only decrypts"),
                      (["--list-keys"], b"--list-keys is not supported"),
                      (["--keyring", "k", "-d"], b"--keyring is not supported"),
                      (["--frobnicate", "-d"], b'invalid option "--frobnicate"'),
                      ([str(front["files"]["success"])], b"only decrypts (-d, --decrypt)"),
                      (["-d", "a", "b"], b"one message at a time")):
        r = subprocess.run([GPGFRONT, *argv], capture_output=True, timeout=30)
        assert r.returncode == 2 and msg in r.stderr, (argv, r)
    # -o onto an existing file without --yes: refused, file untouched
    out = tmp_path / "out"
    out.write_text("keep")
    env = dict(os.environ, PGPDECD_SOCKET=front["daemon"].sock)
    r = subprocess.run([GPGFRONT, "--batch", "-o", str(out), "-d", str(front["files"]["success"])],
                       capture_output=True, env=env, timeout=30)
    assert r.returncode == 2 and b"exists" in r.stderr and out.read_text() == "keep"
    r = subprocess.run([GPGFRONT, "--batch", "--yes", "-o", str(out), "-d", str(front["files"]["success"])],
                       capture_output=True, env=env, timeout=30)
    assert r.returncode == 0 and out.read_bytes() == PLAIN
    # a failed message leaves no output file behind
    out2 = tmp_path / "out2"
    r = subprocess.run([GPGFRONT, "--batch", "-o", str(out2), "-d", str(front["files"]["tampered"])],
                       capture_output=True, env=env, timeout=30)
    assert r.returncode == 2 and not out2.exists() and not list(tmp_path.glob(".out2.*"))


@pytest.mark.parametrize("existing", [False, True], ids=["new", "yes-overwrite"])
def test_killed_output_leaves_no_plaintext(front, world, tmp_path, existing):
    """-o FILE killed mid-message (GPGME's cancel, a caller's timeout,
    Ctrl-C): the unverified plaintext received so far is under no name in
    FILE's directory, FILE is not made (or, with --yes, is left as it was),
    and the program dies of the signal, as gpg does."""
    ct = world["gpg"].encrypt(os.urandom(1 << 20) * 16, "alice@example.org", compress=0)
    d = tmp_path / "out"
    d.mkdir()
    out = d / "plain.txt"
    if existing:
        out.write_bytes(b"previous\n")
    before = sorted(os.listdir(d))
    env = dict(os.environ, PGPDECD_SOCKET=front["daemon"].sock)
    p = subprocess.Popen([GPGFRONT, "--batch", "--yes", "-o", str(out), "-d"], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    # Half the message through a pipe: the rest never comes before the signal.
    p.stdin.write(ct[:len(ct) // 2])
    p.stdin.flush()
    t0 = time.monotonic()
    while plaintext_written(p.pid, d) < 1 << 20:
        assert p.poll() is None, p.stderr.read()
        assert time.monotonic() - t0 < 60, "no plaintext written"
        time.sleep(0.01)
    # Unverified so far: under no name at all where the file system can.
    assert sorted(os.listdir(d)) == before or not has_o_tmpfile(d)
    p.send_signal(signal.SIGTERM)
    p.stdin.close()
    rc = p.wait(30)
    err = p.stderr.read()
    p.stderr.close()
    assert rc == -signal.SIGTERM, err
    assert sorted(os.listdir(d)) == before
    if existing:
        assert out.read_bytes() == b"previous\n"
    else:
        assert not out.exists()


def test_output_file_mode_and_overwrite(front, tmp_path):
    """-o FILE: mode 0600 (before umask), made only once the message
    verified; --yes replaces an existing file, whatever its mode was."""
    env = dict(os.environ, PGPDECD_SOCKET=front["daemon"].sock)
    out = tmp_path / "plain"
    for pre in (None, 0o644):
        if pre is not None:
            out.write_text("old")
            out.chmod(pre)
        r = subprocess.run([GPGFRONT, "--batch", "--yes", "-o", str(out), "-d", str(front["files"]["success"])],
                           capture_output=True, env=env, timeout=30)
        assert r.returncode == 0, r.stderr
        assert out.read_bytes() == PLAIN and out.stat().st_mode & 0o777 == 0o600
        assert os.listdir(tmp_path) == ["plain"]


def test_version_and_config():
    """The first line python-gnupg's VERSION_RE and GPGME read; the
    cfg:version line of --list-config --with-colons."""
    r = subprocess.run([GPGFRONT, "--version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.splitlines()[0] == "gpg (GnuPG) 2.2.40", r.stdout
    assert "pgpdecd-gpg" in r.stdout and "not GnuPG" in r.stdout
    r = subprocess.run([GPGFRONT, "--list-config", "--with-colons"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "cfg:version:2.2.40" in r.stdout.splitlines()
    assert not any(ln.startswith("cfg:group:") for ln in r.stdout.splitlines())


def test_session_keys_like_gpg(front):
    """--show-session-key: the SESSION_KEY line gpg writes, same key; then
    --override-session-key with it (and -fd)."""
    _, glines, _, _ = status_of(["gpg", "--homedir", str(front["home"]), "--show-session-key"], front, "success")
    env = dict(os.environ, PGPDECD_SOCKET=front["daemon"].sock)
    orc, olines, out, err = status_of([GPGFRONT, "--show-session-key"], front, "success", env=env)
    assert orc == 0 and out == PLAIN
    assert olines == expected_from_gpg("success", glines)
    sk = [ln.split(" ")[2] for ln in olines if " SESSION_KEY " in ln]
    assert len(sk) == 1 and re.fullmatch(r"\d+:[0-9A-F]+", sk[0])
    assert ("session key: '%s'" % sk[0]).encode() in err
    r = subprocess.run([GPGFRONT, "--batch", "--override-session-key", sk[0], "-d", str(front["files"]["success"])],
                       capture_output=True, env=env, timeout=30)
    assert r.returncode == 0 and r.stdout == PLAIN, r.stderr
    rd, wr = os.pipe()
    os.write(wr, (sk[0] + "\n").encode())
    os.close(wr)
    r = subprocess.run([GPGFRONT, "--batch", "--override-session-key-fd", str(rd), "-d",
                        str(front["files"]["success"])], pass_fds=(rd,), capture_output=True, env=env, timeout=30)
    os.close(rd)
    assert r.returncode == 0 and r.stdout == PLAIN, r.stderr
    r = subprocess.run([GPGFRONT, "--batch", "--override-session-key", "9:00", "-d", str(front["files"]["success"])],
                       capture_output=True, env=env, timeout=30)
    assert r.returncode == 2


# --------------------------------------------------------------------------
# the consumers

def test_python_gnupg(front, monkeypatch):
    gnupg = pytest.importorskip("gnupg")
    monkeypatch.setenv("PGPDECD_SOCKET", front["daemon"].sock)
    home = front["base"] / "pygnupg-home"
    home.mkdir(exist_ok=True)
    g = gnupg.GPG(gpgbinary=GPGFRONT, gnupghome=str(home))
    assert g.version == (2, 2, 40)
    f = front["files"]
    r = g.decrypt_file(open(f["success"], "rb"))
    assert r.ok and r.status == "decryption ok" and r.data == PLAIN and r.returncode == 0, r.stderr
    assert r.key_id == next(ln.split()[2] for ln in our_status(front, "success")[1] if " ENC_TO " in ln)
    r = g.decrypt(front["msgs"]["armored"].decode())
    assert r.ok and r.data == PLAIN
    r = g.decrypt_file(open(f["nokey"], "rb"))
    assert not r.ok and r.status == "no secret key" and r.data == b""
    r = g.decrypt_file(open(f["tampered"], "rb"))
    assert not r.ok and r.status == "decryption failed"
    r = g.decrypt_file(open(f["garbage"], "rb"))
    assert not r.ok and r.status == "no data was provided"
    r = g.decrypt_file(open(f["password"], "rb"), passphrase=PW)
    assert r.ok and r.data == PLAIN, r.stderr
    r = g.decrypt_file(open(f["password"], "rb"), passphrase="wrong")
    assert not r.ok and r.status == "decryption failed"
    out = front["base"] / "pygnupg.out"
    out.write_text("old")
    r = g.decrypt_file(open(f["success"], "rb"), output=str(out))  # python-gnupg adds --yes
    assert r.ok and out.read_bytes() == PLAIN
    r = g.decrypt_file(open(f["signed"], "rb"))
    assert r.ok and r.data == PLAIN and not r.valid  # no signature verification: not claimed valid


def test_gpgme(front, monkeypatch):
    gpg = pytest.importorskip("gpg")
    monkeypatch.setenv("PGPDECD_SOCKET", front["daemon"].sock)
    home = front["base"] / "gpgme-home"
    home.mkdir(exist_ok=True, mode=0o700)

    def ctx():
        c = gpg.Context()
        c.set_engine_info(gpg.constants.protocol.OpenPGP, file_name=GPGFRONT, home_dir=str(home))
        return c
    assert ctx().engine_info.version == "2.2.40"
    m = front["msgs"]
    plain, res, _ = ctx().decrypt(m["success"], verify=False)
    assert plain == PLAIN and res.symkey_algo == "AES256.CFB" and len(res.recipients) == 1
    assert res.recipients[0].status == 0
    for case, code in (("nokey", gpg.errors.NO_SECKEY), ("tampered", gpg.errors.DECRYPT_FAILED),
                       ("garbage", gpg.errors.NO_DATA)):
        with pytest.raises(gpg.errors.GPGMEError) as e:
            ctx().decrypt(m[case], verify=False)
        assert e.value.getcode() == code, (case, e.value.getstring())
    c = ctx()
    c.pinentry_mode = gpg.constants.PINENTRY_MODE_LOOPBACK
    asked = []
    c.set_passphrase_cb(lambda hint, desc, prev, hook=None: asked.append(prev) or PW)
    assert c.decrypt(m["password"], verify=False)[0] == PLAIN
    assert asked == [0]
    c = ctx()
    c.set_ctx_flag("export-session-key", "1")
    plain, res, _ = c.decrypt(m["success"], verify=False)
    assert plain == PLAIN and re.fullmatch(r"9:[0-9A-F]{64}", res.session_key or ""), res
    c = ctx()
    c.set_ctx_flag("override-session-key", res.session_key)
    assert c.decrypt(m["success"], verify=False)[0] == PLAIN
    # decrypt and verify: the plaintext, and no signature claimed verified
    plain, _, vres = ctx().decrypt(m["signed"], verify=True)
    assert plain == PLAIN and not any(s.summary & gpg.constants.sigsum.VALID for s in vres.signatures)


@pytest.mark.skipif(not shutil.which("pass"), reason="needs pass")
def test_pass_show(front, tmp_path):
    """`pass show` with pgpdecd-gpg first on PATH as gpg and gpg2."""
    store = tmp_path / "store"
    store.mkdir()
    (store / ".gpg-id").write_text("alice@example.org\n")
    (store / "web").mkdir()
    (store / "web" / "site.gpg").write_bytes(
        subprocess.run(["gpg", "--homedir", str(front["home"]), "--batch", "--trust-model", "always", "-e", "-r",
                        "alice@example.org"], input=b"hunter2\nuser: alice\n", capture_output=True,
                       check=True).stdout)
    shutil.copy(front["files"]["nokey"], store / "other.gpg")
    env = dict(os.environ, PATH=str(front["bin"]) + ":" + os.environ["PATH"], PASSWORD_STORE_DIR=str(store),
               GNUPGHOME=str(tmp_path / "nohome"), PGPDECD_SOCKET=front["daemon"].sock)
    r = subprocess.run(["pass", "show", "web/site"], capture_output=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stdout == b"hunter2\nuser: alice\n", r.stderr
    r = subprocess.run(["pass", "show", "other"], capture_output=True, env=env, timeout=60)
    assert r.returncode == 2 and r.stdout == b"" and b"decryption failed: No secret key" in r.stderr, r
