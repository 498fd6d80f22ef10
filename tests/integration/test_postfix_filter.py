# SPDX-License-Identifier: MIT
"""contrib/postfix/pgpdecd-filter (a thin wrapper around pgpdecd-client
--mime) against a real daemon and a recording sendmail: the exit codes and
sendmail arguments of the wrapper, inline PGP and PGP/MIME mail decrypted
and re-injected, plain mail and mail for another key passed through tagged,
tampered mail bounced (65) with the status name only, daemon down deferred
(75).  The MIME work itself is tested with real Postfix in
test_postfix_real.py and against the layout corpus in test_mime.py."""
import email
import email.policy
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import kill_gpg_agent

SRC = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("PD_BUILD_DIR", SRC / "build")).resolve()
FILTER = SRC / "contrib" / "postfix" / "pgpdecd-filter"
KEYS = SRC / "tests" / "data" / "keys"

pytestmark = pytest.mark.skipif(
    not (shutil.which("gpg") and (BUILD / "daemon" / "pgpdecd").exists()),
    reason="needs gpg and the built daemon")

BODY = "Quarterly audit report.\nLine two, \u00e4\u00f6\u00fc.\n"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("pf")
    home = d / "gnupg"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--yes", "--quiet", "--trust-model", "always"]
    subprocess.run(gpg + ["--import", str(KEYS / "rsa2048-public.gpg")], check=True,
                   capture_output=True)
    out = subprocess.run(gpg + ["--with-colons", "--list-keys"], check=True, capture_output=True,
                         text=True).stdout
    fpr = [l.split(":")[9] for l in out.splitlines() if l.startswith("fpr:")][0]

    def encrypt(data: bytes) -> str:
        return subprocess.run(gpg + ["--armor", "--encrypt", "-r", fpr], input=data, check=True,
                              capture_output=True).stdout.decode()

    sock = d / "pd.sock"
    log = open(d / "daemon.log", "wb")
    p = subprocess.Popen([str(BUILD / "daemon" / "pgpdecd"), "--listen", f"unix:{sock}",
                          "--key", str(KEYS / "rsa2048.gpg"), "--workers", "1"],
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        if sock.exists():
            break
        time.sleep(0.05)
    sendmail = d / "sendmail"
    sendmail.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$OUT.args"\ncat > "$OUT.msg"\n')
    sendmail.chmod(0o755)
    yield {"dir": d, "encrypt": encrypt, "sock": sock, "sendmail": sendmail}
    p.terminate()
    p.wait(timeout=30)
    log.close()
    kill_gpg_agent(home)


def run_filter(env, mail: str, name: str, sock=None):
    out = env["dir"] / name
    e = dict(os.environ, SENDMAIL=str(env["sendmail"]),
             PGPDECD_CLIENT=str(BUILD / "client" / "pgpdecd-client"),
             PGPDECD_SOCKET=str(sock or env["sock"]), OUT=str(out))
    r = subprocess.run(["sh", str(FILTER), "alice@example.org", "bob@example.org",
                        "carol@example.org"], input=mail.encode(), env=e, capture_output=True,
                       timeout=60)
    msg = Path(f"{out}.msg")
    args = Path(f"{out}.args")
    return r, (msg.read_text() if msg.exists() else None), (
        args.read_text().split("\n")[:-1] if args.exists() else None)


HDR = "From: alice@example.org\nTo: bob@example.org\nSubject: report\n"


STATUS_OK = "X-Pgpdecd-Status: decrypted; pieces=1; decrypted=1; no-key=0; failed=0\n"


def test_inline(env):
    mail = HDR + "Content-Type: text/plain; charset=utf-8\n\n" + env["encrypt"](BODY.encode())
    r, msg, args = run_filter(env, mail, "inline")
    assert r.returncode == 0, r.stderr
    assert args == ["-G", "-i", "-f", "alice@example.org", "--", "bob@example.org",
                    "carol@example.org"]
    assert msg.startswith(STATUS_OK), msg
    assert HDR in msg and "Content-Type: text/plain; charset=utf-8\n" in msg
    assert "BEGIN PGP" not in msg
    body = email.message_from_string(msg, policy=email.policy.default).get_content()
    assert body == BODY


def test_pgp_mime(env):
    entity = "Content-Type: text/plain; charset=utf-8\n\n" + BODY
    mail = (HDR + "MIME-Version: 1.0\nContent-Type: multipart/encrypted;\n"
            ' protocol="application/pgp-encrypted"; boundary="b1"\n\n'
            "--b1\nContent-Type: application/pgp-encrypted\n\nVersion: 1\n\n"
            "--b1\nContent-Type: application/octet-stream\n\n"
            + env["encrypt"](entity.encode()) + "\n--b1--\n")
    r, msg, _ = run_filter(env, mail, "mime")
    assert r.returncode == 0, r.stderr
    assert msg.startswith(STATUS_OK) and msg.endswith(HDR + "MIME-Version: 1.0\n" + entity), msg


def test_plain_passes(env):
    mail = HDR + "\nnothing secret\n"
    r, msg, _ = run_filter(env, mail, "plain")
    assert r.returncode == 0 and msg == "X-Pgpdecd-Status: not-encrypted\n" + mail


def test_other_key_passes(env):
    # a password-only message: no key of the daemon opens it
    home = env["dir"] / "gnupg"
    enc = subprocess.run(["gpg", "--homedir", str(home), "--batch", "--armor", "--symmetric",
                          "--pinentry-mode", "loopback", "--passphrase", "pw"],
                         input=b"x", capture_output=True, check=True).stdout.decode()
    mail = HDR + "\n" + enc
    r, msg, _ = run_filter(env, mail, "other")
    assert r.returncode == 0, r.stderr
    assert msg.startswith("X-Pgpdecd-Status: no-key; pieces=1; decrypted=0; no-key=1; failed=0;")
    assert "status=NO_PASSWORD" in msg and msg.endswith(mail)


def test_tampered_bounces(env):
    arm = env["encrypt"](BODY.encode()).splitlines()
    # flip a character in the middle of the base64 body
    i = len(arm) // 2
    arm[i] = ("B" if arm[i][0] != "B" else "C") + arm[i][1:]
    mail = HDR + "\n" + "\n".join(arm) + "\n"
    r, msg, _ = run_filter(env, mail, "bad")
    assert r.returncode == 65, r.stderr
    assert msg is None
    # The bounce text (pipe(8) takes stderr) names the status, nothing else:
    # neither the sentence the daemon gives the client nor a temporary path.
    c = subprocess.run([str(BUILD / "client" / "pgpdecd-client"), "--socket", str(env["sock"]),
                        "--verified-only"], input=mail.encode(), capture_output=True, timeout=60)
    prefix = "pgpdecd-client: (stdin): INTEGRITY: "
    line = c.stderr.decode().strip()
    assert c.returncode == 65 and line.startswith(prefix), line
    detail = line[len(prefix):]
    err = r.stderr.decode()
    assert err == "pgpdecd-client: not decrypted: INTEGRITY\n", err
    assert detail not in err and "/tmp" not in err and "pgpdecd-filter." not in err


def test_daemon_down_defers(env):
    mail = HDR + "\n" + env["encrypt"](BODY.encode())
    r, msg, _ = run_filter(env, mail, "down", sock=env["dir"] / "nonexistent.sock")
    assert r.returncode == 75, r.stderr
    assert msg is None
    assert r.stderr.decode() == "pgpdecd-client: not decrypted: UNAVAILABLE\n"
