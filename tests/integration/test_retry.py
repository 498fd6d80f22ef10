# SPDX-License-Identifier: MIT
"""Nothing lost (issue 14): libpdclient and pgpdecd-client send again what
did not finish, with backoff, to the same daemon once it is back or to
another one given by repeating --socket: kill -9 and SIGTERM of a daemon in
the middle of a bench lose no request and every plaintext is byte-exact;
a daemon restarted on the same socket serves the waiting client; a
message from a pipe is sent again from a copy; plaintext that already
reached standard output is never resent into it (exit 75 instead), with
-o it is; --no-retry fails at once."""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_daemon import Daemon, PGPDECD, world  # noqa: E402,F401

BUILD = os.environ.get("PD_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
CLIENT = os.path.join(BUILD, "client", "pgpdecd-client")

pytestmark = pytest.mark.skipif(not shutil.which("gpg") or not os.path.exists(PGPDECD)
                                or not os.path.exists(CLIENT), reason="needs gpg, the daemon and the client")


@pytest.fixture(scope="module")
def msgs(world, tmp_path_factory):
    d = tmp_path_factory.mktemp("retry")
    g = world["gpg"]
    out = {}
    for name, size in (("small", 4096), ("big", 64 << 20)):
        plain = os.urandom(size)
        f = d / (name + ".gpg")
        f.write_bytes(g.encrypt(plain, "alice@example.org", compress=0))
        out[name] = (f, plain)
    return out


def two(world, tmp_path, *extra):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    return Daemon(world, a, "--workers", "1", *extra), Daemon(world, b, "--workers", "1", *extra)


def bench(socks, msg, n, conc=8, extra=()):
    args = [CLIENT]
    for s in socks:
        args += ["--socket", s]
    args += ["--timeout", "20", *extra, "bench", "--concurrency", str(conc), "--requests", str(n), "--json", str(msg)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def served(d):
    """Requests a daemon has finished (its log lines)."""
    return d.logtext().count("[REQ] request ")


def finish(p):
    out, err = p.communicate(timeout=300)
    j = json.loads(out.decode().strip().splitlines()[-1]) if out.strip() else None
    return p.returncode, j, err.decode()


@pytest.mark.parametrize("how", ["kill", "term"])
def test_bench_survives_a_daemon(world, msgs, tmp_path, how):
    """Two daemons, a bench over both with retry (the default): one is
    killed with SIGKILL, or stopped with SIGTERM, in the middle.  No request
    fails, every plaintext is the same as gpg encrypted, and the other
    daemon takes the load.  After SIGKILL the requests in flight are sent
    again; after SIGTERM they finish where they are (the drain), so nothing
    need be resent here: a small message's ciphertext is always there before
    the signal.  The drain's SHUTTING_DOWN for a request whose ciphertext
    has not come is test_daemon's test_sigterm_answers_unstarted_requests_at_once."""
    da, db = two(world, tmp_path)
    f, plain = msgs["small"]
    try:
        p = bench([da.sock, db.sock], f, 600)
        deadline = time.time() + 60
        while served(da) < 60:
            assert time.time() < deadline and p.poll() is None, (da.logtext()[-2000:], p.poll())
            time.sleep(0.01)
        da.proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGTERM)
        rc, j, err = finish(p)
        assert rc == 0, err
        assert j["ok"] == 600 and j["failed"] == 0 and j["mismatched"] == 0, j
        assert j["plaintext_sha256"] == [hashlib.sha256(plain).hexdigest().upper()], j
        assert served(db) > 0, "the second daemon took no load"
        if how == "kill":
            assert j["resent"] > 0, j  # the killed daemon's requests in flight went again
        assert da.proc.wait(30) == (-signal.SIGKILL if how == "kill" else 0)
    finally:
        db.stop()
        da.stop()


def test_bench_no_retry_loses_requests(world, msgs, tmp_path):
    """The same kill with --no-retry: requests fail (what retry prevents)."""
    da, db = two(world, tmp_path)
    f, _ = msgs["small"]
    try:
        p = bench([da.sock, db.sock], f, 600, extra=("--no-retry",))
        deadline = time.time() + 60
        while served(da) < 60:
            assert time.time() < deadline and p.poll() is None
            time.sleep(0.01)
        da.proc.send_signal(signal.SIGKILL)
        rc, j, err = finish(p)
        assert rc == 75 and j["failed"] > 0, (rc, j, err)
    finally:
        db.stop()
        da.stop()


def output_in_progress(client, out):
    """The octets in the client's output for out not yet committed: its
    unnamed file (O_TMPFILE, "#N (deleted)" in /proc) or its named
    temporary beside out, through the descriptor it holds; None when it
    holds none."""
    fds = f"/proc/{client.pid}/fd"
    where = str(out.parent.resolve()) + "/"
    for fd in os.listdir(fds):
        try:
            t = os.readlink(os.path.join(fds, fd))
            if t.startswith(where) and (t.endswith(" (deleted)") or "/." + out.name + ".pgpdecd-" in t):
                return os.stat(os.path.join(fds, fd)).st_size
        except OSError:
            pass  # closed meanwhile
    return None


def kill_mid_message(d, out, full, client, hold=0.0):
    """SIGKILL daemon d while the client's output for out has some but not
    all of the plaintext: the message is in flight.  The daemon is stopped
    (SIGSTOP) first, so that it cannot finish meanwhile."""
    deadline = time.time() + 60
    while True:
        assert client.poll() is None, "the client finished before the daemon could be killed"
        assert time.time() < deadline, "no plaintext reached the client's output"
        n = output_in_progress(client, out)
        if n:
            d.proc.send_signal(signal.SIGSTOP)
            break
        time.sleep(0.0005)
    size = output_in_progress(client, out)
    assert size and 0 < size < full, size
    time.sleep(hold)
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(30)
    return size


def test_daemon_restarted_on_the_same_socket(world, msgs, tmp_path):
    """A daemon killed in the middle of a large message and started again
    on the same socket 1.5 s later (what systemd does): the client, with
    -o, waits, sends the message again and succeeds."""
    d = Daemon(world, tmp_path, "--workers", "1")
    f, plain = msgs["big"]
    out = tmp_path / "plain.out"
    p = subprocess.Popen([CLIENT, "--socket", d.sock, "--timeout", "30", "-o", str(out), str(f)],
                         stderr=subprocess.PIPE)
    try:
        kill_mid_message(d, out, len(plain), p)
        time.sleep(1.5)
        d2 = Daemon(world, tmp_path, "--workers", "1")  # same socket path
        try:
            assert p.wait(120) == 0, p.stderr.read()
            assert out.read_bytes() == plain
        finally:
            assert d2.stop() == 0
    finally:
        if p.poll() is None:
            p.kill()
        if d.proc.poll() is None:  # not killed: the test failed before
            d.proc.kill()
            d.proc.wait(30)


def test_stdout_is_never_written_twice(world, msgs, tmp_path):
    """Plaintext that reached standard output cannot be taken back: when the
    daemon dies after some of it was written, the message is not sent again
    into the same stream; the client exits 75 and says why (the reader of
    the pipe holds the client back, so the message is in flight)."""
    da, db = two(world, tmp_path)
    f, plain = msgs["big"]
    try:
        p = subprocess.Popen([CLIENT, "--socket", da.sock, "--socket", db.sock, str(f)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = p.stdout.read(1 << 16)  # some plaintext is out, and we read no more for now
        assert first and first == plain[:len(first)]
        da.proc.send_signal(signal.SIGKILL)
        rest = p.stdout.read()
        err = p.stderr.read().decode()
        assert p.wait(60) == 75, err
        assert "not sent again: part of its plaintext had gone to standard output" in err, err
        got = first + rest
        assert len(got) < len(plain) and got == plain[:len(got)]  # no second copy followed
        assert served(db) == 0
    finally:
        db.stop()
        da.stop()


def test_output_file_sent_again(world, msgs, tmp_path):
    """With -o the same failure sends the message again to the other
    daemon: the temporary file starts over and the result is byte-exact."""
    da, db = two(world, tmp_path)
    f, plain = msgs["big"]
    out = tmp_path / "p.out"
    try:
        p = subprocess.Popen([CLIENT, "--socket", da.sock, "--socket", db.sock, "-v", "-o", str(out), str(f)],
                             stderr=subprocess.PIPE)
        kill_mid_message(da, out, len(plain), p)
        assert p.wait(120) == 0, p.stderr.read()
        assert out.read_bytes() == plain
        assert served(db) == 1
    finally:
        db.stop()
        da.stop()


def test_pipe_input_sent_again(world, msgs, tmp_path):
    """A message read from a pipe is copied first, so it too goes again to
    the second daemon when the first dies in the middle."""
    da, db = two(world, tmp_path)
    f, plain = msgs["big"]
    out = tmp_path / "pipe.out"
    try:
        cat = subprocess.Popen(["cat", str(f)], stdout=subprocess.PIPE)
        p = subprocess.Popen([CLIENT, "--socket", da.sock, "--socket", db.sock, "-o", str(out)],
                             stdin=cat.stdout, stderr=subprocess.PIPE)
        cat.stdout.close()
        kill_mid_message(da, out, len(plain), p)
        assert p.wait(120) == 0, p.stderr.read()
        assert out.read_bytes() == plain
        assert served(db) == 1
    finally:
        db.stop()
        da.stop()


def test_no_retry_fails_at_once(world, msgs, tmp_path):
    """--no-retry: the same kill fails the message (75) and nothing goes to
    the second daemon."""
    da, db = two(world, tmp_path)
    f, plain = msgs["big"]
    out = tmp_path / "n.out"
    try:
        p = subprocess.Popen([CLIENT, "--no-retry", "--socket", da.sock, "--socket", db.sock, "-o", str(out), str(f)],
                             stderr=subprocess.PIPE)
        kill_mid_message(da, out, len(plain), p)
        assert p.wait(60) == 75
        assert not out.exists() and served(db) == 0
    finally:
        db.stop()
        da.stop()


class Activator:
    """What systemd does for a .socket unit, in a few lines: it holds the
    listening socket and passes it to each new daemon process (LISTEN_FDS=1,
    LISTEN_PID set to the daemon's own pid, fd 3), so connections that come
    while the daemon is dead wait in the socket's backlog for the next one.
    (systemd-socket-activate cannot restart its child; the real systemd
    runs in test_systemd_real.py.)"""

    def __init__(self, world, tmp_path):
        import socket as so
        self.sock_path = str(tmp_path / "activated.sock")
        self.lsock = so.socket(so.AF_UNIX, so.SOCK_STREAM)
        self.lsock.bind(self.sock_path)
        os.chmod(self.sock_path, 0o600)
        self.lsock.listen(128)
        self.world = world
        self.log = open(tmp_path / "activated.log", "w+b")
        self.starts = 0
        self.start()

    def start(self):
        fd = self.lsock.fileno()

        def child():
            os.dup2(fd, 3)
            os.set_inheritable(3, True)
        # LISTEN_PID must be the daemon's pid: the shell's $$, which exec keeps.
        cmd = ('LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=pgpdecd.socket exec "$0" "$@"')
        self.proc = subprocess.Popen(["sh", "-c", cmd, PGPDECD, "--keydir", str(self.world["keys"]),
                                      "--workers", "1", "--log-level", "info"],
                                     preexec_fn=child, pass_fds=(3,), stdout=self.log,
                                     stderr=self.log)
        self.starts += 1
        # Like a Type=notify unit, wait until it is ready: a PING answers.
        deadline = time.time() + 30
        while subprocess.run([CLIENT, "--socket", self.sock_path, "--no-retry", "--timeout", "2", "ping"],
                             capture_output=True).returncode != 0:
            assert time.time() < deadline and self.proc.poll() is None, self.logtext()
            time.sleep(0.05)

    def logtext(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)
        self.lsock.close()


def test_socket_activation_kill9_under_load(world, msgs, tmp_path):
    """The daemon behind an activated socket is killed with SIGKILL in the
    middle of a bench and started again 0.5 s later on the same socket:
    clients that connected meanwhile waited in the backlog and are served by
    the new daemon; with retry nothing is lost and every plaintext is
    byte-exact."""
    a = Activator(world, tmp_path)
    f, plain = msgs["small"]
    try:
        p = bench([a.sock_path], f, 800)
        deadline = time.time() + 60
        while a.logtext().count("[REQ] request ") < 80:
            assert time.time() < deadline and p.poll() is None
            time.sleep(0.01)
        a.proc.send_signal(signal.SIGKILL)
        assert a.proc.wait(30) == -signal.SIGKILL
        time.sleep(0.5)
        a.start()
        rc, j, err = finish(p)
        assert rc == 0, err
        assert j["ok"] == 800 and j["failed"] == 0 and j["mismatched"] == 0, j
        assert j["plaintext_sha256"] == [hashlib.sha256(plain).hexdigest().upper()], j
        assert j["resent"] > 0 and a.starts == 2
        log = a.logtext()
        assert log.count("(socket activation)") == 2, log[-3000:]
    finally:
        a.close()


def test_window_starts_again_after_progress(world, msgs, tmp_path):
    """--timeout bounds retrying without progress, not a long message: a
    64 MiB message whose daemon is killed, then stopped and killed again
    more than --timeout (5 s) later, is sent a third time and completes,
    because plaintext had come back before the second failure.  (The window
    used to run from the first failure only: the second failure ended it
    with 75.)"""
    a = Activator(world, tmp_path)
    f, plain = msgs["big"]
    out = tmp_path / "w.out"
    p = subprocess.Popen([CLIENT, "--socket", a.sock_path, "--timeout", "5", "-o", str(out), str(f)],
                         stderr=subprocess.PIPE)
    try:
        kill_mid_message(a, out, len(plain), p)
        a.start()
        t = time.time()
        # the second attempt is writing again: stop it there for longer
        # than --timeout, then kill it
        kill_mid_message(a, out, len(plain), p, hold=6.0)
        assert time.time() - t > 5
        a.start()
        assert p.wait(120) == 0, p.stderr.read()
        assert out.read_bytes() == plain
    finally:
        if p.poll() is None:
            p.kill()
        a.close()
