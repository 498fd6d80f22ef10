# SPDX-License-Identifier: MIT
"""Mistakes an operator makes, on purpose (issue 12, "Errors that say what to
do"): each gets the sysexits(3) code the man pages' EXIT STATUS sections
promise and one sentence that names the cause and the fix.  The real daemon
on real sockets, the real client, pd-decrypt and pgpdecd-milter; the key and
the message are the fixed ones of tests/data/keys (rsa2048.gpg, and
rsa2048-msg.gpg, which decrypts to "hello").

Run: PD_BUILD_DIR=build /usr/bin/python3 -m pytest -q tests/integration/test_operator_errors.py
"""
import grp
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import sanitized_build

SRC = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("PD_BUILD_DIR", SRC / "build")).resolve()
DAEMON = BUILD / "daemon" / "pgpdecd"
CLIENT = BUILD / "client" / "pgpdecd-client"
DECRYPT = BUILD / "tools" / "pd-decrypt"
MILTER = BUILD / "mail" / "pgpdecd-milter"
KEY = SRC / "tests" / "data" / "keys" / "rsa2048.gpg"
MSG = SRC / "tests" / "data" / "keys" / "rsa2048-msg.gpg"  # "hello"
MAN = SRC / "man"

pytestmark = pytest.mark.skipif(not (DAEMON.exists() and CLIENT.exists()),
                                reason="needs the built daemon and client")

SANITIZER = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def env_without_socket():
    e = dict(os.environ)
    e.pop("PGPDECD_SOCKET", None)
    return e


def run(argv, timeout=60, env=None, cwd=None, input=b""):
    p = subprocess.run([str(a) for a in argv], capture_output=True, timeout=timeout, input=input,
                       env=env if env is not None else env_without_socket(), cwd=cwd)
    err = p.stderr.decode(errors="replace")
    for bad in SANITIZER:
        assert bad not in err, err[-4000:]
    return p.returncode, err, p.stdout


def client(*args, **kw):
    return run([CLIENT, *args], **kw)


def one_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


class Daemon:
    """pgpdecd on a unix socket (and whatever else extra says), logging to a
    file; start() waits until a client gets a pong."""

    def __init__(self, d, *extra, sock=None, key=KEY, name="pgpdecd", cwd=None):
        self.sock = Path(sock) if sock else Path(d) / f"{name}.sock"
        self.logpath = Path(d) / f"{name}.log"
        self.argv = [DAEMON, "--listen", f"unix:{self.sock}", "--key", key, "--workers", "1", *extra]
        self.cwd = cwd
        self.proc = None

    def start(self):
        self.log = open(self.logpath, "ab")
        self.proc = subprocess.Popen([str(a) for a in self.argv], stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env_without_socket(), cwd=self.cwd)
        deadline = time.monotonic() + 30
        while True:
            rc, _, out = client("--socket", self.sock, "--timeout", "5", "ping")
            if rc == 0 and out.startswith(b"pong"):
                return self
            assert self.proc.poll() is None, f"pgpdecd exited {self.proc.returncode}:\n{self.text()}"
            assert time.monotonic() < deadline, f"pgpdecd did not answer:\n{self.text()}"
            time.sleep(0.05)

    def text(self):
        return self.logpath.read_text(errors="replace")

    def stop(self, sig=signal.SIGTERM):
        if self.proc is None:
            return
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "no exit within 60 s of the signal"
        self.log.close()
        self.proc = None
        text = self.text()
        assert not any(b in text for b in SANITIZER), text[-4000:]
        if sig == signal.SIGTERM:
            assert rc == 0, f"pgpdecd exited {rc}:\n{text[-3000:]}"


@pytest.fixture
def daemons(tmp_path):
    started = []

    def make(*extra, **kw):
        d = Daemon(tmp_path, *extra, **kw)
        started.append(d)
        return d
    yield make
    for d in started:
        d.stop()


def daemon_fails(*args, cwd=None):
    """Run pgpdecd expecting it to refuse to start: (exit status, stderr)."""
    try:
        rc, err, _ = run([DAEMON, "--workers", "1", *args], cwd=cwd, timeout=15)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"pgpdecd started and ran (killed after 15 s): {(e.stderr or b'').decode(errors='replace')}")
    assert rc != 0, f"pgpdecd started: {err}"
    return rc, err


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# --------------------------------------------------------------------------
# A second daemon on the same unix socket path

def test_second_daemon_does_not_take_over_a_live_socket(daemons, tmp_path):
    first = daemons().start()
    ino = first.sock.stat().st_ino
    rc, err = daemon_fails("--listen", f"unix:{first.sock}", "--key", KEY)
    assert rc == 69, err  # EX_UNAVAILABLE
    assert f"another pgpdecd is listening on {first.sock}" in err, err
    # The first daemon's socket is untouched and it still answers.
    assert first.sock.stat().st_ino == ino
    rc, err, out = client("--socket", first.sock, "ping")
    assert rc == 0 and out.startswith(b"pong"), err


def test_stale_socket_is_replaced(daemons, tmp_path):
    # A daemon killed with SIGKILL leaves its socket behind; nobody answers
    # there (ECONNREFUSED), so the next start removes it and listens.
    d = daemons().start()
    d.stop(signal.SIGKILL)
    assert d.sock.is_socket()
    d2 = daemons().start()
    assert client("--socket", d2.sock, "ping")[0] == 0


@pytest.mark.skipif(not MILTER.exists(), reason="pgpdecd-milter not built")
def test_second_milter_does_not_take_over_a_live_socket(tmp_path):
    # libmilter's smfi_opensocket(true) removes whatever socket is there.
    sock = tmp_path / "milter.sock"
    conf = tmp_path / "milter.conf"
    conf.write_text(f"listen = unix:{sock}\nsocket = {tmp_path}/pgpdecd.sock\n")
    log = open(tmp_path / "milter.log", "wb")
    first = subprocess.Popen([str(MILTER), "-c", str(conf), "-f"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not sock.is_socket():
            assert first.poll() is None and time.monotonic() < deadline, (tmp_path / "milter.log").read_text()
            time.sleep(0.05)
        ino = sock.stat().st_ino
        rc, err, _ = run([MILTER, "-c", conf, "-f"], timeout=15)
        assert rc == 69, err
        assert f"another pgpdecd-milter is listening on {sock}" in err, err
        assert sock.stat().st_ino == ino and first.poll() is None
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(sock))  # the first one still answers
    finally:
        first.send_signal(signal.SIGTERM)
        rc = first.wait(60)
        log.close()
        text = (tmp_path / "milter.log").read_text(errors="replace")
        assert rc == 0 and not any(bad in text for bad in SANITIZER), text[-3000:]


# --------------------------------------------------------------------------
# Files given where the daemon, the client or pd-decrypt want something else

def test_directory_as_input(daemons, tmp_path):
    d = daemons().start()
    indir = tmp_path / "inbox"
    indir.mkdir()
    rc, err, out = client("--socket", d.sock, indir)
    assert rc == 66, err  # EX_NOINPUT, not 65 (a bounce for bad data)
    assert f"{indir} is a directory" in one_line(err)
    assert out == b""
    rc, err, _ = client("--socket", d.sock, "--mime", indir)
    assert rc == 66 and f"{indir} is a directory" in one_line(err), err
    if DECRYPT.exists():
        rc, err, _ = run([DECRYPT, "--key", KEY, indir])
        assert rc == 2, err  # pd-decrypt's usage error (its --help's table)
        assert f"{indir} is a directory" in err, err


def test_key_is_a_directory(tmp_path):
    kd = tmp_path / "keys"
    kd.mkdir()
    shutil.copy(KEY, kd / "k.gpg")
    rc, err = daemon_fails("--listen", f"unix:{tmp_path}/s.sock", "--key", kd)
    assert rc == 78, err  # EX_CONFIG: the keys cannot be loaded
    assert f"key file {kd} is a directory (use --keydir" in err, err
    if DECRYPT.exists():
        rc, err, _ = run([DECRYPT, "--key", kd, MSG])
        assert rc == 2, err
        assert f"{kd} is a directory" in err, err


def test_config_is_a_directory(tmp_path):
    rc, err = daemon_fails("--config", tmp_path, "--listen", f"unix:{tmp_path}/s.sock", "--key", KEY)
    assert rc == 78, err  # EX_CONFIG: the configuration file cannot be read
    assert f"config {tmp_path} is a directory" in err, err


def test_listen_in_a_missing_directory(tmp_path):
    sock = tmp_path / "nonexistent" / "x.sock"
    rc, err = daemon_fails("--listen", f"unix:{sock}", "--key", KEY)
    assert rc == 78, err
    assert f"directory {sock.parent} does not exist" in err, err
    assert "permission denied" not in err.lower(), err


def test_socket_path_too_long(tmp_path):
    long = "/tmp/" + "x" * 110 + ".sock"
    rc, err, _ = client("--socket", long, "ping")
    assert rc == 78, err  # EX_CONFIG, not 75 (retry forever)
    assert f"socket path longer than 107 bytes ({len(long)}): {long}" in one_line(err)
    env = env_without_socket()
    env["PGPDECD_SOCKET"] = long
    rc, err, _ = client("ping", env=env)
    assert rc == 78 and "PGPDECD_SOCKET" in one_line(err), err
    rc, err = daemon_fails("--listen", f"unix:{long}", "--key", KEY)
    assert rc == 64, err
    assert f"socket path longer than 107 bytes ({len(long)})" in err, err
    # --mime: the same code; its one line (it may reach a bounce) names no path
    mail = tmp_path / "m.eml"
    mail.write_bytes(b"From: a@example.org\nTo: b@example.org\nSubject: s\n\n-----BEGIN PGP MESSAGE-----\n\n"
                     b"hQ==\n-----END PGP MESSAGE-----\n")
    rc, err, out = client("--mime", "--socket", long, mail)
    assert rc == 78 and out == b"", err
    line = one_line(err)
    assert "a setting of the client cannot work" in line and long not in line, line


def test_plain_tcp_without_allow_plain_tcp(tmp_path):
    port = free_port()
    # The key file does not exist: the listener's mistake is found first,
    # before any key is read.
    rc, err = daemon_fails("--listen", f"tcp:127.0.0.1:{port}", "--key", tmp_path / "absent.gpg")
    assert rc == 64, err  # EX_USAGE: an inconsistent setting (pgpdecd(8))
    line = one_line(err)
    assert "allow-plain-tcp" in line and "tls-cert" in line, line
    assert "absent.gpg" not in err and "decryption key" not in err


# --------------------------------------------------------------------------
# Access to the daemon's socket

def as_nobody(*args, env=None):
    """The client as uid/gid nobody with no supplementary group."""
    nobody = 65534
    return run(["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups", CLIENT, *args], env=env)


def other_group():
    for g in ("daemon", "adm", "sys", "bin"):
        try:
            return grp.getgrnam(g).gr_name
        except KeyError:
            continue
    pytest.fail("no system group to give the socket")


@pytest.fixture
def world_dir():
    """A directory every user can traverse (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="pd-operr-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"),
                    reason="runs the client as another user: needs root and setpriv")
def test_socket_permission_denied(world_dir):
    g = other_group()
    d = Daemon(world_dir, "--socket-group", g, "--socket-mode", "0660").start()
    try:
        rc, err, _ = as_nobody("--socket", d.sock, "ping")
        assert rc == 77, err  # EX_NOPERM
        line = one_line(err)
        assert f"permission denied on {d.sock} (group {g})" in line, line
        assert f"add your user to group {g}" in line and "PGPDECD_SOCKET" in line, line
    finally:
        d.stop()
    # The packaged layout: /run/pgpdecd is 0750 and group pgpdecd, so it is
    # the directory that refuses, and the sentence names it.
    sub = world_dir / "run"
    sub.mkdir(mode=0o750)
    os.chown(sub, 0, grp.getgrnam(g).gr_gid)
    sub.chmod(0o750)
    d = Daemon(sub, sock=sub / "pgpdecd.sock").start()
    try:
        env = env_without_socket()
        env["PGPDECD_SOCKET"] = str(d.sock)
        rc, err, _ = as_nobody("ping", env=env)
        assert rc == 77, err
        line = one_line(err)
        assert f"permission denied on {sub} (group {g})" in line and str(d.sock) in line, line
        assert f"add your user to group {g}" in line and "PGPDECD_SOCKET" in line, line
    finally:
        d.stop()


# --------------------------------------------------------------------------
# TLS

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    if not shutil.which("certtool"):
        pytest.fail("certtool (gnutls-bin, in contrib/check.sh's packages) is missing")
    d = tmp_path_factory.mktemp("pki")

    def tool(*args):
        subprocess.run(["certtool", *map(str, args)], check=True, capture_output=True)

    for who in ["ca", "server", "client"]:
        tool("--generate-privkey", "--key-type", "ecdsa", "--outfile", d / f"{who}.key")
    (d / "ca.t").write_text('cn = "test CA"\nca\ncert_signing_key\nexpiration_days = 2\n')
    tool("--generate-self-signed", "--load-privkey", d / "ca.key", "--outfile", d / "ca.pem", "--template", d / "ca.t")
    for who, extra in [("server", 'ip_address = "127.0.0.1"\ntls_www_server\n'), ("client", "tls_www_client\n")]:
        (d / f"{who}.t").write_text(f'cn = "{who}"\nexpiration_days = 2\nsigning_key\nencryption_key\n{extra}')
        tool("--generate-certificate", "--load-privkey", d / f"{who}.key", "--load-ca-certificate", d / "ca.pem",
             "--load-ca-privkey", d / "ca.key", "--outfile", d / f"{who}.pem", "--template", d / f"{who}.t")
    return d


def test_unreadable_tls_ca(tmp_path):
    # Nothing listens on the port: the client's own files are checked
    # before it connects, so the mistake is not mistaken for a daemon down.
    ca = tmp_path / "nonexistent" / "ca.pem"
    rc, err, _ = client("--connect", f"127.0.0.1:{free_port()}", "--tls-ca", ca, "ping")
    assert rc == 78, err  # EX_CONFIG, not 75
    line = one_line(err)
    assert f"TLS CA file {ca} cannot be read: No such file or directory" in line, line
    notpem = tmp_path / "notpem"
    notpem.write_text("not a certificate\n")
    rc, err, _ = client("--connect", f"127.0.0.1:{free_port()}", "--tls-ca", notpem, "ping")
    assert rc == 78 and f"TLS CA file {notpem}" in one_line(err), err


def test_missing_client_certificate(daemons, pki):
    port = free_port()
    d = daemons("--listen", f"tcp:127.0.0.1:{port}", "--tls-cert", pki / "server.pem",
                "--tls-key", pki / "server.key", "--tls-ca", pki / "ca.pem").start()
    rc, err, _ = client("--connect", f"127.0.0.1:{port}", "--tls-ca", pki / "ca.pem", "ping")
    assert rc == 77, err  # EX_NOPERM: access denied by the daemon
    line = one_line(err)
    assert "the daemon requires a client certificate" in line and "--tls-cert" in line, line
    assert "pull function" not in line
    # The daemon's log names the peer and the cause.
    deadline = time.monotonic() + 10
    while "certificate" not in d.text() and time.monotonic() < deadline:
        time.sleep(0.05)
    tls = [ln for ln in d.text().splitlines() if "[TLS]" in ln]
    assert any("127.0.0.1" in ln and "no client certificate" in ln for ln in tls), tls
    # With the certificate the same daemon serves the client.
    rc, err, _ = client("--connect", f"127.0.0.1:{port}", "--tls-ca", pki / "ca.pem",
                        "--tls-cert", pki / "client.pem", "--tls-key", pki / "client.key", "ping")
    assert rc == 0, err


# --------------------------------------------------------------------------
# Output names

def test_two_inputs_one_output_name(daemons, tmp_path):
    d = daemons().start()
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        shutil.copy(MSG, tmp_path / sub / "x.gpg")
    shutil.copy(MSG, tmp_path / "a" / "x.asc")
    out = tmp_path / "out"
    out.mkdir()
    a, b = tmp_path / "a" / "x.gpg", tmp_path / "b" / "x.gpg"
    rc, err, _ = client("--socket", d.sock, "-o", out, a, b)
    assert rc == 64, err  # refused before anything is decrypted
    line = one_line(err)
    assert f"{a} and {b} would both be written to {out}/x" in line, line
    assert os.listdir(out) == []
    rc, err, _ = client("--socket", d.sock, "-o", out, a, tmp_path / "a" / "x.asc")
    assert rc == 64 and "would both be written" in one_line(err), err
    # Distinct names decrypt as before.
    shutil.copy(MSG, tmp_path / "b" / "y.gpg")
    rc, err, _ = client("--socket", d.sock, "-o", out, a, tmp_path / "b" / "y.gpg")
    assert rc == 0, err
    assert (out / "x").read_bytes() == b"hello" and (out / "y").read_bytes() == b"hello"


# --------------------------------------------------------------------------
# The configuration file

def test_inline_comments(daemons, tmp_path):
    conf = tmp_path / "pgpdecd.conf"
    conf.write_text("[pgpdecd]\n"
                    "# a comment line\n"
                    "; another\n"
                    "max-requests-per-connection = 7 # seven, a '#' comment\n"
                    "max-message-size = 1M ; a ';' comment\n"
                    "idle-timeout = 30s\t# after a tab\n"
                    "log-level = info#not a comment: no space before it\n")
    rc, err = daemon_fails("--config", conf, "--listen", f"unix:{tmp_path}/bad.sock", "--key", KEY)
    assert rc == 64 and "'info#not a comment: no space before it'" in err, err
    conf.write_text(conf.read_text().replace("info#not", "info #not"))
    d = daemons("--config", conf).start()
    rc, err, out = client("--socket", d.sock, "ping")
    assert rc == 0, err
    assert b"message 1048576" in out and b"in flight 7" in out, out


@pytest.mark.skipif(not MILTER.exists(), reason="pgpdecd-milter not built")
def test_milter_inline_comments(tmp_path):
    conf = tmp_path / "milter.conf"
    conf.write_text("# pgpdecd-milter\n"
                    "concurrency = 4 # four\n"
                    "timeout = 10s ; ten seconds\n"
                    f"socket = {tmp_path}/pgpdecd.sock # the daemon's\n")
    rc, err, out = run([MILTER, "--config", conf, "--check-config"])
    assert rc == 0, err
    assert out.decode().strip() == f"{conf}: ok"
    conf.write_text("concurrency = 4#four\n")
    rc, err, _ = run([MILTER, "--config", conf, "--check-config"])
    assert rc == 78 and "4#four" in err, err


def test_relative_paths_in_the_config_file(daemons, tmp_path):
    # Paths in the file are relative to the file's directory; on the command
    # line they stay relative to the working directory.
    cd = tmp_path / "etc"
    (cd / "keys").mkdir(parents=True)
    shutil.copy(KEY, cd / "keys" / "k.gpg")
    conf = cd / "pgpdecd.conf"
    conf.write_text("[pgpdecd]\nkeydir = keys\nlisten = unix:d.sock\n")
    other = tmp_path / "elsewhere"
    other.mkdir()
    p = subprocess.Popen([str(DAEMON), "--config", str(conf), "--workers", "1"], cwd=other,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env_without_socket())
    try:
        deadline = time.monotonic() + 30
        while client("--socket", cd / "d.sock", "ping")[0] != 0:
            assert p.poll() is None, p.stdout.read().decode(errors="replace")
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert not (other / "d.sock").exists()
        rc, err, out = client("--socket", cd / "d.sock", MSG)
        assert rc == 0 and out == b"hello", err
    finally:
        p.send_signal(signal.SIGTERM)
        rc = p.wait(60)
        text = p.stdout.read().decode(errors="replace")
        p.stdout.close()
        assert rc == 0 and not any(bad in text for bad in SANITIZER), text[-3000:]
    # --key on the command line: relative to the working directory.
    shutil.copy(KEY, other / "cli.gpg")
    d = daemons(key="cli.gpg", cwd=other).start()
    assert client("--socket", d.sock, MSG)[2] == b"hello"


# --------------------------------------------------------------------------
# Documentation that must stay true

def daemon_options():
    rc, err, out = run([DAEMON, "--help"])
    assert rc == 0, err
    out = out.decode()
    names = set(re.findall(r"^\s+(?:-\w, )?--([a-z0-9-]+)", out, re.M))
    names -= {"config", "help", "version"}
    assert len(names) > 40, names
    return sorted(names)


def test_every_option_in_the_example_and_the_man_page():
    example = (SRC / "packaging" / "pgpdecd.conf.example").read_text()
    conf5 = (MAN / "pgpdecd.conf.5.scd").read_text()
    missing_example = [o for o in daemon_options() if not re.search(rf"^#? ?{re.escape(o)} =", example, re.M)]
    missing_man = [o for o in daemon_options() if f"*{o}* =" not in conf5]
    assert not missing_example, f"not in packaging/pgpdecd.conf.example: {missing_example}"
    assert not missing_man, f"not in pgpdecd.conf(5): {missing_man}"


def sections(scd):
    return {m.group(1).strip() for m in re.finditer(r"^# (.+)$", scd, re.M)}


def test_man_page_cross_references():
    # "see pgpdecd(8), SECTION": SECTION must be a section of pgpdecd(8).
    pages = {}
    for p in MAN.glob("*.scd"):
        name, num = p.name[:-len(".scd")].rsplit(".", 1)
        pages[f"{name}({num})"] = p.read_text()
    bad = []
    for page, text in pages.items():
        for m in re.finditer(r"\*(pgpdecd[a-z.-]*)\*\((\d)\),\s+([A-Z][A-Z ]{3,}[A-Z])\b", text):
            target, sect = f"{m.group(1)}({m.group(2)})", m.group(3)
            if target in pages and sect not in sections(pages[target]):
                bad.append(f"{page}: {' '.join(m.group(0).split())}")
    assert not bad, bad


def exit_codes_of(scd):
    part = scd.split("# EXIT STATUS", 1)[1].split("\n# ", 1)[0]
    return sorted({int(c) for c in re.findall(r"^\*(\d+)\*", part, re.M)})


def test_client_help():
    rc, err, out = client("--help")
    assert rc == 0, err
    text = out.decode()
    # bench's options have defaults: the synopsis shows them optional
    syn = [ln for ln in text.splitlines() if " bench " in ln][0]
    assert "[--concurrency N]" in syn and "[--requests M]" in syn, syn
    # the exit codes of --help are those of pgpdecd-client(1)
    helped = sorted({int(c) for c in re.findall(r"^  (\d\d)  ", text.split("Exit status", 1)[1], re.M)})
    assert helped == [c for c in exit_codes_of((MAN / "pgpdecd-client.1.scd").read_text()) if c], helped


def test_daemon_help_names_statuses():
    text = run([DAEMON, "--help"])[2].decode()
    assert "RETRY" not in text and "more get OVERLOADED" in text, text


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("prlimit"),
                    reason="needs root to run the daemon as nobody with a given RLIMIT_MEMLOCK")
@pytest.mark.skipif(sanitized_build(), reason="the sanitizers' mlock does nothing and always succeeds")
def test_secure_memory_must_be_locked_for_both_libraries():
    """secmem-size 2M locks 2M for libgcrypt and 2M for OpenSSL's secure
    heap (the secrets of the OpenSSL backends): with a 3M limit libgcrypt's
    pool locks and OpenSSL's does not.  Before, the daemon started with
    OpenSSL's heap unlocked and said nothing; now it refuses, naming both
    and what to raise.  With 5M it starts."""
    with tempfile.TemporaryDirectory(prefix="pd-memlock-") as d:
        os.chmod(d, 0o777)
        kd = Path(d) / "keys"
        kd.mkdir()
        shutil.copy(KEY, kd / "k.gpg")
        os.chmod(kd, 0o755)
        os.chmod(kd / "k.gpg", 0o644)

        def start(limit_mib, name):
            return subprocess.Popen(["prlimit", f"--memlock={limit_mib << 20}", "setpriv", "--reuid=65534",
                                     "--regid=65534", "--clear-groups", str(DAEMON), "--keydir", str(kd),
                                     "--listen", f"unix:{d}/{name}.sock", "--secmem-size", "2M"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_without_socket())

        p = start(3, "low")
        try:
            out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:  # it started after all: stop it
                p.kill()
                p.communicate()
        err = err.decode(errors="replace")
        assert p.returncode == 1, err
        assert ("cannot lock 4096 KiB of secure memory (secmem-size 2048 KiB, once for libgcrypt and once "
                "rounded up to a power of two for OpenSSL): the locked-memory limit is 3072 KiB") in err, err
        p = start(5, "ok")
        try:
            deadline = time.time() + 60
            while not os.path.exists(f"{d}/ok.sock"):
                assert p.poll() is None and time.time() < deadline, p.stderr.read().decode(errors="replace")
                time.sleep(0.05)
            rc, cerr, out = client("--socket", f"{d}/ok.sock", "--no-retry", "ping")
            assert rc == 0, cerr
        finally:
            p.terminate()
            p.wait(30)
