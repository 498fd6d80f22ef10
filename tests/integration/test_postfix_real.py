# SPDX-License-Identifier: MIT
"""Debian's real Postfix on loopback (tests/integration/postfix_harness.py),
issue 11: plain mail through smtpd is delivered byte-exact (proves the
harness)."""
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import kill_gpg_agent
from postfix_harness import (TEST_GROUP, TEST_USER, Postfix, ensure_group, ensure_user,
                             require_postfix, strip_received)

SRC = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("PD_BUILD_DIR", SRC / "build")).resolve()
DAEMON = BUILD / "daemon" / "pgpdecd"
CLIENT = BUILD / "client" / "pgpdecd-client"
KEYS = SRC / "tests" / "data" / "keys"

pytestmark = pytest.mark.skipif(
    not (shutil.which("gpg") and DAEMON.exists() and CLIENT.exists()),
    reason="needs gpg and the built daemon and client")

BODY = "Quarterly audit report.\nLine two, \u00e4\u00f6\u00fc.\n".encode()


@pytest.fixture(scope="module")
def encrypt(tmp_path_factory):
    home = tmp_path_factory.mktemp("pf-real-gpg")
    gpg = ["gpg", "--homedir", str(home), "--batch", "--yes", "--quiet", "--trust-model",
           "always"]
    subprocess.run(gpg + ["--import", str(KEYS / "rsa2048-public.gpg")], check=True,
                   capture_output=True)
    out = subprocess.run(gpg + ["--with-colons", "--list-keys"], check=True,
                         capture_output=True, text=True).stdout
    fpr = [l.split(":")[9] for l in out.splitlines() if l.startswith("fpr:")][0]

    def enc(data):
        return subprocess.run(gpg + ["--armor", "--encrypt", "-r", fpr], input=data, check=True,
                              capture_output=True).stdout

    yield enc
    kill_gpg_agent(home)


@pytest.fixture(scope="module")
def accounts():
    require_postfix()
    ensure_group(TEST_GROUP)
    # the README's recipe: a dedicated user, member of the socket's group
    return ensure_user(TEST_USER, groups=[TEST_GROUP])


class Daemon:
    """pgpdecd on a Unix socket of mode 0660, group TEST_GROUP, in a
    directory only that group may enter (as the packaged units lay out
    /run/pgpdecd)."""

    def __init__(self, root, log):
        self.dir = root / "pgpdecd"
        self.dir.mkdir(mode=0o750)
        os.chown(self.dir, 0, ensure_group(TEST_GROUP))
        self.sock = self.dir / "pgpdecd.sock"
        self.logpath, self.proc = log, None

    def start(self):
        self.log = open(self.logpath, "ab")
        self.proc = subprocess.Popen(
            [str(DAEMON), "--listen", f"unix:{self.sock}", "--key", str(KEYS / "rsa2048.gpg"),
             "--workers", "1", "--socket-group", TEST_GROUP, "--socket-mode", "0660"],
            stdout=self.log, stderr=subprocess.STDOUT)
        end = time.monotonic() + 60
        while not self.sock.exists():
            assert self.proc.poll() is None, self.logpath.read_text()
            assert time.monotonic() < end, "daemon socket did not appear"
            time.sleep(0.02)

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=60)
            self.log.close()
            self.proc = None


def archive_pipe(pf, name, user, archive):
    """contrib/postfix/README.md, recipe 1, with the test's paths."""
    pf.add_pipe(name, [CLIENT, "--socket", pf.root / "pgpdecd" / "pgpdecd.sock",
                       "--verified-only", "--timeout", "120", "-o",
                       f"{archive}/${{queue_id}}.txt"], user=user, flags="q", maxproc=10)


def make_archive(pf):
    archive = pf.root / "pgp-archive"
    archive.mkdir(mode=0o700)
    u = ensure_user(TEST_USER)
    os.chown(archive, u.pw_uid, u.pw_gid)
    return archive


def mail_to(rcpt, body):
    return (b"From: Alice <alice@test.example>\r\n"
            b"To: " + rcpt.encode() + b"\r\n"
            b"Subject: audit\r\n"
            b"Message-ID: <" + rcpt.encode() + b".1@test.example>\r\n"
            b"Content-Type: text/plain; charset=us-ascii\r\n"
            b"\r\n" + body)


def wait_file(path, timeout=30):
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} did not appear"
        time.sleep(0.05)
    return path.read_bytes()


def test_plain_mail_byte_exact(tmp_path):
    require_postfix()
    mail = (b"From: Alice <alice@test.example>\r\n"
            b"To: Bob <bob@test.example>\r\n"
            b"Subject: =?utf-8?q?gr=C3=BC=C3=9Fe?=\r\n"
            b"X-Folded: one\r\n\ttwo\r\n"
            b"Message-ID: <plain.1@test.example>\r\n"
            b"Date: Mon, 1 Jan 2024 00:00:00 +0000\r\n"
            b"MIME-Version: 1.0\r\n"
            b"Content-Type: text/plain; charset=utf-8\r\n"
            b"Content-Transfer-Encoding: 8bit\r\n"
            b"\r\n"
            b"8-bit \xc3\xa4\xc3\xb6\xc3\xbc and a raw \xff octet\r\n"
            b".a line that starts with a dot\r\n"
            b"..two dots\r\n"
            b"\r\n"
            b"trailing spaces   \r\n"
            b"last line without line end")
    with Postfix(artifacts=tmp_path / "postfix") as pf:
        r = pf.send(mail, "alice@test.example", ["bob@test.example", "carol@test.example"])
        assert r.code == 250 and r.queue_id, r
        got = pf.wait_delivered(2)
        want = mail.replace(b"\r\n", b"\n") + b"\n"  # Postfix stores lines, LF-terminated
        for rcpt in ("bob@test.example", "carol@test.example"):
            assert len(got[rcpt]) == 1
            data = got[rcpt][0]
            assert data.startswith(b"Received: from client.test.example"), data[:200]
            assert strip_received(data) == want
        assert {m.sender for m in pf.messages()} == {"alice@test.example"}
        # a recipient outside the test domain is refused, and nothing leaves
        r = pf.send(mail, "alice@test.example", ["someone@example.org"])
        assert r.code == 550 and "5.1.1" in r.text, r
        assert pf.queue() == []
