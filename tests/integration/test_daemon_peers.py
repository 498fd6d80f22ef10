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
