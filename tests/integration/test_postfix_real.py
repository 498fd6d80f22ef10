# SPDX-License-Identifier: MIT
"""Debian's real Postfix on loopback (tests/integration/postfix_harness.py)
with the recipes of contrib/postfix/README.md, issue 11:

- plain mail through smtpd is delivered byte-exact (proves the harness);
- the archive pipe(8) transport with `user=pgpmail` and pgpmail a member of
  the socket's group (what the README said) bounces: pipe(8) runs the
  command with one group only, the user's primary group, and the client
  gets EACCES on the socket's directory; with `user=pgpmail:pgpdecd` the
  inline armored mail is decrypted into the archive file;
- daemon down: the archive transport defers (4.x.x), the mail waits in the
  deferred queue, and is delivered after the daemon starts and a flush;
- the after-queue plumbing (content_filter -> smtp -> second smtpd), and a
  milter that is down with milter_default_action = tempfail: 4xx before
  the queue, deferred after it.

Here pgpmail is TEST_USER (pgpmail-test) and pgpdecd is TEST_GROUP
(pgpdecd-test), system accounts created when missing.
"""
import os
import shutil
import subprocess

import pytest

from conftest import kill_gpg_agent
from mailgw import CLIENT, DAEMON, KEYS, Daemon, wait_for
from postfix_harness import (TEST_GROUP, TEST_USER, Postfix, ensure_group, ensure_user,
                             free_port, require_postfix, strip_received)

pytestmark = pytest.mark.skipif(not (shutil.which("gpg") and DAEMON.exists()),
                                reason="needs gpg and the built daemon")

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


def archive_pipe(pf, name, user, archive):
    """contrib/postfix/README.md, recipe 1, with the test's paths."""
    # --no-retry: Postfix's queue is the retry (a deferral, sent again with
    # its backoff); the client's own retry would hold the pipe for --timeout.
    pf.add_pipe(name, [CLIENT, "--socket", pf.root / "pgpdecd" / "pgpdecd.sock",
                       "--verified-only", "--no-retry", "--timeout", "120", "-o",
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
    wait_for(path.exists, f"{path}", timeout=timeout)
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


def test_archive_pipe_needs_group_in_user(tmp_path, encrypt, accounts):
    pf = Postfix(artifacts=tmp_path / "postfix")
    daemon = Daemon(pf.root, tmp_path / "daemon.log", workers=1)
    try:
        archive = make_archive(pf)
        # as the README said: user=pgpmail, and pgpmail in group pgpdecd
        archive_pipe(pf, "pgparchu", TEST_USER, archive)
        # as it must be: user=pgpmail:pgpdecd
        archive_pipe(pf, "pgparchg", f"{TEST_USER}:{TEST_GROUP}", archive)
        pf.add_transport("archive-u@test.example", "pgparchu:")
        pf.add_transport("archive-g@test.example", "pgparchg:")
        daemon.start()
        pf.start()

        # The README's check passes: run with all of its groups (as sudo -u
        # does), pgpmail reaches the daemon ...
        ping = subprocess.run([str(CLIENT), "--socket", str(daemon.sock), "ping"],
                              user=accounts.pw_uid, group=accounts.pw_gid,
                              extra_groups=os.getgrouplist(TEST_USER, accounts.pw_gid),
                              capture_output=True, timeout=60)
        assert ping.returncode == 0, ping.stderr

        # ... but pipe(8) drops the supplementary groups: the mail bounces
        mail = mail_to("archive-u@test.example", encrypt(BODY))
        r = pf.send(mail, "alice@test.example", ["archive-u@test.example"])
        assert r.code == 250, r
        m = pf.wait_log(rf"{r.queue_id}: to=<archive-u@test.example>, relay=pgparchu, "
                        r".*dsn=(5\.\d\.\d), status=bounced \((.*)\)$")
        # 77 EX_NOPERM: pipe(8) bounces with 5.7.0
        assert m.group(1) == "5.7.0", m.group(0)
        # ... and says what to do: the directory, its group, PGPDECD_SOCKET
        assert f"permission denied on {daemon.dir} (group {TEST_GROUP})" in m.group(2), m.group(0)
        assert f"add your user to group {TEST_GROUP}" in m.group(2), m.group(0)
        dsn = pf.wait_delivered(1, recipient="alice@test.example")["alice@test.example"][0]
        assert b"archive-u@test.example" in dsn and b"5.7.0" in dsn, dsn
        assert list(archive.iterdir()) == []

        mail = mail_to("archive-g@test.example", encrypt(BODY))
        r = pf.send(mail, "alice@test.example", ["archive-g@test.example"])
        assert r.code == 250, r
        out = wait_file(archive / f"{r.queue_id}.txt")
        assert out == BODY
        pf.wait_log(rf"{r.queue_id}: to=<archive-g@test.example>, relay=pgparchg, "
                    r".*dsn=2\.0\.0, status=sent")
        assert sorted(p.name for p in archive.iterdir()) == [f"{r.queue_id}.txt"]
        st = (archive / f"{r.queue_id}.txt").stat()
        assert (st.st_uid, st.st_gid) == (accounts.pw_uid, ensure_group(TEST_GROUP))
        assert st.st_mode & 0o777 == 0o600
        # no second DSN: only the first mail bounced
        assert len(pf.delivered().get("alice@test.example", [])) == 1
        assert pf.queue() == []
    finally:
        pf.stop()
        daemon.stop()


def test_archive_daemon_down_defers_then_delivers(tmp_path, encrypt, accounts):
    # long backoff: the mail stays deferred until flush() (no automatic retry)
    pf = Postfix(artifacts=tmp_path / "postfix",
                 main={"queue_run_delay": "300s", "minimal_backoff_time": "300s",
                       "maximal_backoff_time": "600s"})
    daemon = Daemon(pf.root, tmp_path / "daemon.log", workers=1)  # not started yet
    try:
        archive = make_archive(pf)
        archive_pipe(pf, "pgparchg", f"{TEST_USER}:{TEST_GROUP}", archive)
        pf.add_transport("archive@test.example", "pgparchg:")
        pf.start()

        mail = mail_to("archive@test.example", encrypt(BODY))
        r = pf.send(mail, "alice@test.example", ["archive@test.example"])
        assert r.code == 250, r
        m = pf.wait_log(rf"{r.queue_id}: to=<archive@test.example>, relay=pgparchg, "
                        r".*dsn=(4\.\d\.\d), status=deferred")
        assert m.group(1) == "4.3.0", m.group(0)
        q = pf.wait_queue(lambda q: [e["queue_id"] for e in q if e["queue_name"] == "deferred"]
                          == [r.queue_id])
        assert len(q) == 1 and q[0]["recipients"][0]["address"] == "archive@test.example"
        assert q[0]["recipients"][0]["delay_reason"], q
        assert list(archive.iterdir()) == [] and pf.messages() == []

        daemon.start()
        mark = pf.log_mark()
        pf.flush()
        assert wait_file(archive / f"{r.queue_id}.txt") == BODY
        pf.wait_log(rf"{r.queue_id}: to=<archive@test.example>, relay=pgparchg, "
                    r".*dsn=2\.0\.0, status=sent", since=mark)
        pf.wait_queue(lambda q: q == [])
        assert pf.messages() == []  # no DSN to the sender: nothing bounced
    finally:
        pf.stop()
        daemon.stop()


def test_after_queue_pattern_and_milter_down(tmp_path):
    """The plumbing the milter tests use: content_filter -> smtp client ->
    a second smtpd -> queue -> delivery; and a milter that is down, with
    milter_default_action = tempfail, gives 4xx before the queue and a
    deferral (nothing lost) after it."""
    require_postfix()
    pf = Postfix(artifacts=tmp_path / "postfix")
    try:
        pf.after_queue_filter("scan")  # main smtpd -> scan -> pf.reinject_port
        down = f"inet:127.0.0.1:{free_port()}"  # nobody listens there
        p_milter = pf.add_smtpd("milter", {"content_filter": "", "smtpd_milters": down,
                                           "milter_default_action": "tempfail"})
        p_in = pf.add_smtpd("in", {"content_filter": f"scan:[127.0.0.1]:{p_milter}"})
        pf.start()

        mail = b"From: alice@test.example\r\nSubject: after queue\r\n\r\nbody\r\n"
        r = pf.send(mail, "alice@test.example", ["bob@test.example"])
        assert r.code == 250, r
        got = pf.wait_delivered(1)["bob@test.example"]
        assert len(got) == 1
        assert got[0].count(b"\nReceived: ") + got[0].startswith(b"Received: ") == 2, got[0]
        assert strip_received(got[0]) == mail.replace(b"\r\n", b"\n")
        pf.wait_log(rf"{r.queue_id}: to=<bob@test.example>, relay=127\.0\.0\.1\[127\.0\.0\.1\]:"
                    rf"{pf.reinject_port}, .*status=sent")

        # before the queue: the SMTP client sees the temporary failure
        r = pf.send(mail, "alice@test.example", ["bob@test.example"], port=p_milter)
        assert 400 <= r.code < 500, r
        # after the queue: accepted, then deferred in the queue
        r = pf.send(mail, "alice@test.example", ["carol@test.example"], port=p_in)
        assert r.code == 250, r
        pf.wait_log(rf"{r.queue_id}: to=<carol@test.example>, .*dsn=4\.\d\.\d, status=deferred")
        pf.wait_queue(lambda q: [e["queue_id"] for e in q if e["queue_name"] == "deferred"]
                      == [r.queue_id])
        assert "carol@test.example" not in pf.delivered()
    finally:
        pf.stop()
