# SPDX-License-Identifier: MIT
"""What the daemon tells the operator about each request: one line per
finished DECRYPT (log-requests), never plaintext, the key only for a
verified message; the same event as searchable fields in a real journald
(systemd-journald started in a private mount namespace, read back with
journalctl); and lines a peer can cause (protocol errors, TLS failures,
refused connections) limited to a few a minute plus a count."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import pdwire  # noqa: E402
from pdwire import frame  # noqa: E402
from test_daemon import Daemon, PGPDECD, check_ok, world  # noqa: E402,F401

pytestmark = pytest.mark.skipif(not shutil.which("gpg") or not os.path.exists(PGPDECD),
                                reason="needs gpg and a built daemon/pgpdecd")

LINE = re.compile(r"\[REQ\] request (\d+) id (\d+) from (.+?): (\w+) key (\S+) integrity (\w+) "
                  r"in (\d+) out (\d+) ([0-9.]+) ms$", re.M)
SECRET = b"the plaintext must never reach the log: 8d1f0c2b-secret\n"


def lines(text):
    return [m.groups() for m in LINE.finditer(text)]


@pytest.fixture(scope="module")
def msgs(world):
    g = world["gpg"]
    good = g.encrypt(SECRET * 100, "alice@example.org", compress=0)
    bad = bytearray(good)
    bad[-1] ^= 0x01  # inside the MDC: INTEGRITY
    nokey = g.encrypt(SECRET, "bob@example.org")
    return {"good": good, "bad": bytes(bad), "nokey": nokey,
            "fpr": g.enc_fprs("alice@example.org")[0].upper()}


def exchange(d, msgs):
    c = d.client()
    got, res, _ = c.decrypt(msgs["good"])
    check_ok(got, res, SECRET * 100)
    got, res, _ = c.decrypt(msgs["bad"], flags=pdwire.F_VERIFIED_ONLY)
    assert res["name"] == "INTEGRITY" and got == b"", res
    got, res, _ = c.decrypt(msgs["nokey"])
    assert res["name"] == "NO_KEY", res
    got, res, _ = c.decrypt(b"not OpenPGP " * 20)
    assert res["name"] == "NOT_PGP", res
    c.close()


def test_one_line_per_request(world, msgs, tmp_path):
    """Each finished request: its number, wire id, peer (the uid of a unix
    peer), status, key (a verified message only), integrity, bytes in and
    out, milliseconds; pings and stats are not requests."""
    d = Daemon(world, tmp_path, "--log-level", "info")
    try:
        c = d.client()
        assert c.ping(b"x") == b"x"
        c.stats()
        c.close()
        exchange(d, msgs)
        d.wait_log("[REQ] request", 4)
    finally:
        assert d.stop() == 0
    log = d.logtext()
    got = lines(log)
    assert len(got) == 4, log
    uid = "uid %d" % os.getuid()
    st = {g[3]: g for g in got}
    ok, bad, nokey, junk = st["OK"], st["INTEGRITY"], st["NO_KEY"], st["NOT_PGP"]
    assert [int(g[0]) for g in got] == sorted(int(g[0]) for g in got)
    assert all(g[2] == uid for g in got), got
    assert ok[4] == msgs["fpr"] and ok[5] == "mdc", ok
    assert int(ok[6]) == len(msgs["good"]) and int(ok[7]) == len(SECRET) * 100, ok
    # A failed message says nothing of which key decoded it, nor how much
    # plaintext it made; what the peer sent is its own.
    assert bad[4] == "-" and bad[5] == "none" and bad[7] == "0", bad
    assert int(bad[6]) == len(msgs["bad"]), bad
    assert nokey[4] == "-" and nokey[7] == "0", nokey
    assert int(junk[6]) == 240 and float(junk[8]) >= 0, junk
    assert SECRET.strip().decode() not in log
    assert "8d1f0c2b" not in log


@pytest.mark.parametrize("setting,logged", [("off", False), ("debug", False), ("notice", True), ("info", True)])
def test_log_requests_level(world, msgs, tmp_path, setting, logged):
    """log-requests sets the line's level (shown when log-level lets it
    through) or turns it off."""
    d = Daemon(world, tmp_path, "--log-level", "info", "--log-requests", setting)
    try:
        exchange(d, msgs)
        c = d.client()
        assert c.ping(b"sync") == b"sync"
        c.close()
        if logged:
            d.wait_log("[REQ] request", 4)
    finally:
        assert d.stop() == 0
    log = d.logtext()
    assert len(lines(log)) == (4 if logged else 0), log
    if logged:
        level = "notice" if setting == "notice" else "info"
        assert len(re.findall(r"pgpdecd %s \[REQ\] request \d+ id" % level, log)) == 4, log


def test_bad_log_requests_value(world, tmp_path):
    r = subprocess.run([PGPDECD, "--listen", "unix:" + str(tmp_path / "s"), "--keydir", str(world["keys"]),
                        "--log-requests", "loud", "--check-config"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 64, r  # a flag: EX_USAGE
    assert "log-requests wants err, warning, notice, info, debug or off, not 'loud'" in r.stderr, r.stderr


def test_peer_caused_lines_are_limited(world, tmp_path):
    """A peer that sends garbage on 60 connections costs 20 lines and a
    count, not 60 lines; the count is written when the daemon stops."""
    d = Daemon(world, tmp_path, "--log-level", "info")
    try:
        for _ in range(60):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(d.sock)
            s.sendall(frame(77, 0, b"nonsense"))
            while s.recv(4096):
                pass
            s.close()
        c = d.client()
        assert c.ping(b"still") == b"still"
        c.close()
    finally:
        assert d.stop() == 0
    log = d.logtext()
    n = len(re.findall(r"\[PROTO\] closing the connection of uid \d+: ", log))
    assert n == 20, log[-4000:]
    m = re.search(r"(\d+) more protocol errors in the last \d+ s not logged \(at most 20 per 60 s\)", log)
    assert m and int(m.group(1)) == 40, log[-4000:]


# --------------------------------------------------------------------------
# journald

# Runs inside a private mount namespace: /run/systemd is a fresh tmpfs (the
# daemon's sd_journal_sendv() and the stream socket are at fixed paths
# there) and /run/log/journal is the test's directory, so journalctl reads
# it from outside.  Starts systemd-journald, connects a stdout stream for
# the daemon's stderr the way systemd does for a service (JOURNAL_STREAM),
# then becomes the daemon.
NS_SCRIPT = r"""
import os, socket, subprocess, sys, time
jdir, pidfile = sys.argv[1], sys.argv[2]
argv = sys.argv[3:]
subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/run/systemd"], check=True)
os.makedirs("/run/log/journal", exist_ok=True)
subprocess.run(["mount", "--bind", jdir, "/run/log/journal"], check=True)
j = subprocess.Popen(["/lib/systemd/systemd-journald"], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open(pidfile, "w").write(str(j.pid))
deadline = time.time() + 20
while not os.path.exists("/run/systemd/journal/stdout"):
    assert time.time() < deadline and j.poll() is None, "journald did not start"
    time.sleep(0.05)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("/run/systemd/journal/stdout")
# identifier, unit id, priority, level prefix, syslog, kmsg, console
s.sendall(b"pgpdecd\n\n6\n1\n0\n0\n0\n")
st = os.fstat(s.fileno())
os.dup2(s.fileno(), 2)
os.environ["JOURNAL_STREAM"] = "%d:%d" % (st.st_dev, st.st_ino)
os.execv(argv[0], argv)
"""

journald_only = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/lib/systemd/systemd-journald") or not shutil.which("journalctl")
    or not shutil.which("unshare"), reason="needs root, unshare, systemd-journald and journalctl")


def journal(jdir, *match):
    r = subprocess.run(["journalctl", "--directory", str(jdir), "--no-pager", "-o", "json", *match],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]


@journald_only
def test_journal_fields(world, msgs, tmp_path):
    """Under journald each request line is a native entry with PGPDECD_*
    fields: `journalctl PGPDECD_STATUS=INTEGRITY` finds the tampered one;
    other lines still arrive through the stream with their priority."""
    jdir = tmp_path / "journal"
    jdir.mkdir()
    sock = str(tmp_path / "pgpdecd.sock")
    pidfile = tmp_path / "journald.pid"
    args = [PGPDECD, "--listen", "unix:" + sock, "--keydir", str(world["keys"]), "--workers", "2",
            "--log-level", "info"]
    p = subprocess.Popen(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", NS_SCRIPT,
                          str(jdir), str(pidfile), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while True:
            assert p.poll() is None, p.stderr.read()
            try:
                c = pdwire.Client(sock, timeout=5)
                break
            except OSError:
                assert time.time() < deadline, "the daemon did not start"
                time.sleep(0.05)
        c.close()

        class D:
            def client(self, **kw):
                return pdwire.Client(sock, **kw)
        exchange(D(), msgs)
        deadline = time.time() + 30
        while True:  # journald writes asynchronously
            found = journal(jdir, "PGPDECD_STATUS=INTEGRITY")
            if found or time.time() > deadline:
                break
            time.sleep(0.2)
    finally:
        p.terminate()
        rc = p.wait(60)
        if pidfile.exists():
            subprocess.run(["kill", pidfile.read_text()])
    assert rc == 0, p.stderr.read()
    assert len(found) == 1, found
    e = found[0]
    assert e["PGPDECD_KEY"] == "-" and e["PGPDECD_BYTES_OUT"] == "0", e
    assert e["PGPDECD_BYTES_IN"] == str(len(msgs["bad"])) and e["PGPDECD_PEER"] == "uid %d" % os.getuid(), e
    assert e["PRIORITY"] == "6" and e["SYSLOG_IDENTIFIER"] == "pgpdecd", e
    assert re.fullmatch(r"\[REQ\] request \d+ id \d+ from uid \d+: INTEGRITY key - integrity none in \d+ out 0 "
                        r"[0-9.]+ ms", e["MESSAGE"]), e
    ok = journal(jdir, "PGPDECD_STATUS=OK")
    assert len(ok) == 1 and ok[0]["PGPDECD_KEY"] == msgs["fpr"] and ok[0]["PGPDECD_INTEGRITY"] == "mdc", ok
    assert {e["PGPDECD_STATUS"] for e in journal(jdir, "SYSLOG_IDENTIFIER=pgpdecd") if "PGPDECD_STATUS" in e} == \
        {"OK", "INTEGRITY", "NO_KEY", "NOT_PGP"}
    # The other lines come through the stream, at their own level.
    listen = [e for e in journal(jdir, "SYSLOG_IDENTIFIER=pgpdecd") if "listening on" in e.get("MESSAGE", "")]
    assert listen and listen[0]["PRIORITY"] == "6" and listen[0]["_TRANSPORT"] == "stdout", listen
    assert all("8d1f0c2b" not in e.get("MESSAGE", "") for e in journal(jdir))
