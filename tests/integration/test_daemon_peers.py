# SPDX-License-Identifier: MIT
"""Unix socket peers and the socket itself: SO_PEERCRED/SO_PEERGROUPS
allow-lists resolved at load and checked against the peer's own groups, the
socket's mode and owner set without following what another user may plant
at its path, and the session's read buffer wiped once read."""
import grp
import os
import pwd
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import pdwire  # noqa: E402
from pdwire import frame  # noqa: E402
from test_daemon import Daemon, PGPDECD, check_ok, world  # noqa: E402,F401

pytestmark = pytest.mark.skipif(not shutil.which("gpg") or not os.path.exists(PGPDECD),
                                reason="needs gpg and a built daemon/pgpdecd")

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to connect as other uids and groups)")

# A peer that connects as uid/gid/groups and prints the type of the first
# frame it gets back (1 HELLO, 2 ERROR), or "closed".
PEER = r"""
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(sys.argv[1])
s.sendall(struct.pack(">IBI", 8, 1, 0) + b"PGPD\x00\x01\x00\x01")
h = s.recv(9)
print(h[4] if len(h) == 9 else "closed")
"""


def unused_id(taken):
    n = 23456
    while n in taken:
        n += 1
    return n


def connect_as(path, uid, gid, groups):
    def drop():
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)
    p = subprocess.run([sys.executable, "-c", PEER, path], preexec_fn=drop, capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.decode().strip()


@pytest.fixture
def open_dir():
    """A directory others may enter (pytest's tmp_path is 0700), writable by root only."""
    d = tempfile.mkdtemp(prefix="pd-peers-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@root_only
def test_allow_group_uses_the_peers_groups(world, tmp_path, open_dir):
    """allow-group matches the peer's primary gid or its supplementary groups
    as the kernel reports them (SO_PEERGROUPS), not the user database: a uid
    with no passwd entry in an allowed group is served, the same uid without
    it is not."""
    taken = {p.pw_uid for p in pwd.getpwall()} | {g.gr_gid for g in grp.getgrall()}
    uid = unused_id(taken)
    allowed = unused_id(taken | {uid})
    other = unused_id(taken | {uid, allowed})
    sock = os.path.join(open_dir, "s.sock")
    d = Daemon(world, tmp_path, "--listen", "unix:" + sock, "--socket-mode", "0666", "--allow-group", str(allowed))
    try:
        assert connect_as(sock, uid, other, [other, allowed]) == "1", "supplementary group allowed"
        assert connect_as(sock, uid, allowed, []) == "1", "primary group allowed"
        assert connect_as(sock, uid, other, [other]) == "2", "neither"
        assert "access denied to unix peer uid %d" % uid in d.logtext()
    finally:
        assert d.stop() == 0


def test_unknown_names_are_config_errors(world, tmp_path):
    """Names in allow-user, allow-group, socket-owner and socket-group are
    resolved when the configuration is loaded: an unknown one stops the start."""
    for flag, word in (("--allow-user", "user"), ("--allow-group", "group"),
                       ("--socket-owner", "user"), ("--socket-group", "group")):
        p = subprocess.run([PGPDECD, "--listen", "unix:" + str(tmp_path / "x.sock"), "--keydir",
                            str(world["keys"]), flag, "pd-no-such-name"], capture_output=True, timeout=20)
        assert p.returncode != 0, (flag, p.stderr)
        assert b"pd-no-such-name: no such " + word.encode() in p.stderr, p.stderr


@root_only
@pytest.mark.skipif(not shutil.which("strace"), reason="needs strace (to hold the daemon right after bind)")
def test_socket_setup_does_not_follow_a_planted_symlink(world, tmp_path):
    """Between bind and the end of the socket's setup, whoever can write the
    directory may replace the socket by a symlink: the daemon must not
    change the mode or owner of what the symlink points to.  strace holds
    the daemon right after bind (inject delay_exit) while the test swaps the
    socket for a symlink to a victim file."""
    sockdir = tmp_path / "sockdir"
    sockdir.mkdir()
    sock = sockdir / "s.sock"
    victim = tmp_path / "victim"
    victim.write_text("not yours\n")
    os.chmod(victim, 0o600)
    gid = 4243 if 4243 not in {g.gr_gid for g in grp.getgrall()} else 4244
    log = open(tmp_path / "daemon.log", "w+b")
    p = subprocess.Popen(["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=bind",
                          "-e", "inject=bind:delay_exit=2000000", PGPDECD, "--listen", f"unix:{sock}",
                          "--keydir", str(world["keys"]), "--workers", "1", "--socket-mode", "0666",
                          "--socket-group", str(gid)], stdout=log, stderr=log)
    try:
        deadline = time.time() + 20
        while not os.path.lexists(sock):
            assert time.time() < deadline and p.poll() is None, "no socket"
            time.sleep(0.005)
        link = sockdir / "planted"
        os.symlink(victim, link)
        os.rename(link, sock)  # the socket's name now points at the victim
        try:
            p.wait(6)  # the daemon notices and stops ...
        except subprocess.TimeoutExpired:
            pass  # ... or goes on without touching the victim
        st = os.stat(victim)
        assert st.st_mode & 0o7777 == 0o600, oct(st.st_mode)
        assert st.st_gid == 0
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    log.seek(0)
    text = log.read().decode(errors="replace")
    assert p.returncode != 0 and "replaced" in text, text


def test_socket_mode_and_group(world, tmp_path):
    """socket-mode is the socket's mode from its creation, socket-group its
    group; a directory others can write is worth a warning."""
    gid = os.getgid() if os.geteuid() else (4245 if 4245 not in {g.gr_gid for g in grp.getgrall()} else 4246)
    d = Daemon(world, tmp_path, "--socket-mode", "0606", "--socket-group", str(gid))
    try:
        st = os.lstat(d.sock)
        assert st.st_mode & 0o777 == 0o606 and st.st_gid == gid
        assert d.client().ping(b"mode") == b"mode"
        assert "can be written by others" not in d.logtext()
    finally:
        assert d.stop() == 0
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    (tmp_path / "second").mkdir()
    d = Daemon(world, tmp_path / "second", "--listen", f"unix:{shared}/s.sock")
    try:
        assert f"directory {shared} (mode 0777" in d.logtext()
    finally:
        assert d.stop() == 0


HUGE = 4 << 30  # a mapping this large is a sanitizer's shadow or arena, not a heap to scan


def _regions(pid):
    """Readable mappings of process pid: [(lo, hi)]."""
    out = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            f = line.split()
            if "r" not in f[1] or (len(f) > 5 and f[5] in ("[vvar]", "[vsyscall]", "[vvar_vclock]")):
                continue
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            out.append((lo, hi))
    return out


def _memory_has(pid, needle):
    """Whether needle is anywhere in the readable memory of process pid
    (read in chunks, overlapping by len(needle) - 1)."""
    chunk = 16 << 20
    with open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for lo, hi in _regions(pid):
            pos = lo
            while pos < hi:
                n = min(chunk, hi - pos)
                try:
                    mem.seek(pos)
                    if needle in mem.read(n + (len(needle) - 1 if pos + n < hi else 0)):
                        return True
                except OSError:
                    pass
                pos += n
    return False


@pytest.mark.skipif(not os.access("/proc/self/mem", os.R_OK), reason="no /proc")
def test_read_buffer_wiped(world, tmp_path):
    """A DECRYPT's PASSWORD TLV does not stay in the session's read buffer
    once the frame is read, nor after the connection ends."""
    d = Daemon(world, tmp_path)
    try:
        if any(hi - lo > HUGE for lo, hi in _regions(d.proc.pid)):
            pytest.skip("the daemon maps more than can be scanned (a sanitizer build's shadow memory)")
        marker = os.urandom(24).hex().encode()
        plain, msg = world["msgs"][3]
        c = d.client()
        rid = c.new_id()
        decrypt = struct.pack(">I", 0) + struct.pack(">BH", 0x02, len(marker)) + marker
        # One write: the DECRYPT frame stays at the start of the read buffer.
        c.send(frame(pdwire.DECRYPT, rid, decrypt) + frame(pdwire.DATA, rid, msg) + frame(pdwire.END, rid))
        got, res, _ = c.read_reply(rid)
        check_ok(got, res, plain)
        try:
            if not os.access(f"/proc/{d.proc.pid}/mem", os.R_OK) or not _memory_has(d.proc.pid, b"\x00" * 8):
                pytest.skip("cannot read the daemon's memory (it is not dumpable: needs CAP_SYS_PTRACE)")
        except PermissionError:
            pytest.skip("cannot read the daemon's memory (it is not dumpable: needs CAP_SYS_PTRACE)")
        assert not _memory_has(d.proc.pid, marker), "the password is still in the daemon's memory"
        c.close()
        time.sleep(0.5)
        assert not _memory_has(d.proc.pid, marker), "the password is in the daemon's memory after close"
    finally:
        assert d.stop() == 0
