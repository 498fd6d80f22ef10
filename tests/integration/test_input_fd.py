# SPDX-License-Identifier: MIT
"""INPUT_FD (proto/PROTOCOL.md 5.1): a Unix client passes the ciphertext as a
memory file with its DECRYPT frame (SCM_RIGHTS) and the daemon reads it
itself.  The real daemon on a real socket, messages by gpg, memfds made
here; what is refused, what a peer cannot make the daemon hold, and
pgpdecd-client --pass-fd.

Run: PD_BUILD_DIR=build /usr/bin/python3 -m pytest -q tests/integration/test_input_fd.py
"""
import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import pdwire  # noqa: E402
from pdwire import Client, ConnectionEnded, frame  # noqa: E402
from test_daemon import BUILD, Daemon, check_ok, world  # noqa: E402,F401
from test_daemon_tls import free_port, wait_port  # noqa: E402

CLIENT = os.path.join(BUILD, "client", "pgpdecd-client")
F_INPUT_FD = 0x8


def memfd(data, seal=True):
    fd = os.memfd_create("t", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if seal:
        import fcntl
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    return fd


def send_fd_decrypt(c, fd, flags=F_INPUT_FD, opts=b""):
    rid = c.new_id()
    socket.send_fds(c.s, [frame(pdwire.DECRYPT, rid, struct.pack(">I", flags) + opts)], [fd])
    return rid


def decrypt_fd(c, data, flags=F_INPUT_FD):
    fd = memfd(data)
    try:
        rid = send_fd_decrypt(c, fd, flags)
    finally:
        os.close(fd)  # the daemon holds its own copy
    return c.read_reply(rid)


def n_fds(d):
    return len(os.listdir(f"/proc/{d.proc.pid}/fd"))


@pytest.fixture
def daemon(world, tmp_path):
    d = Daemon(world, tmp_path)
    yield d
    assert d.stop() == 0, d.logtext()


def test_memory_file_decrypts_byte_exact(world, daemon):
    c = daemon.client()
    base = n_fds(daemon)
    for plain, msg in world["msgs"]:
        got, res, _ = decrypt_fd(c, msg)
        check_ok(got, res, plain)
        assert res["bytes_in"] == len(msg)
    # the same connection still takes ordinary requests, and pipelined ones
    plain, msg = world["msgs"][3]
    check_ok(*c.decrypt(msg)[:2], plain)
    fds = [memfd(m) for _, m in world["msgs"][:4]]
    rids = [send_fd_decrypt(c, fd) for fd in fds]
    for fd in fds:
        os.close(fd)
    for rid, (plain, _) in zip(rids, world["msgs"][:4]):
        got, res, _ = c.read_reply(rid)
        check_ok(got, res, plain)
    stats = pdwire.parse_prometheus(c.stats())
    assert stats["pgpdecd_bytes_in_total"] >= sum(len(m) for _, m in world["msgs"])
    c.close()
    time.sleep(0.2)
    assert n_fds(daemon) <= base, "a passed descriptor was kept"


def test_failures_say_what_data_frames_say(world, daemon):
    """A truncated or tampered message read from a memory file is answered
    exactly as the same bytes sent in DATA frames."""
    c = daemon.client()
    _, msg = world["msgs"][5]
    cut = msg[:len(msg) // 2]
    bad = bytearray(msg)
    bad[-10] ^= 1
    for data in (cut, bytes(bad), b"", b"not openpgp at all"):
        _, r_fd, _ = decrypt_fd(c, data)
        _, r_data, _ = c.decrypt(data)
        assert r_fd["name"] == r_data["name"] != "OK", (r_fd, r_data)
        assert r_fd.get("sentence") == r_data.get("sentence")


def test_memory_file_over_the_size_limit(world, tmp_path):
    d = Daemon(world, tmp_path, "--max-message-size", "64K")
    try:
        c = d.client()
        _, msg = world["msgs"][5]  # 1 MiB
        _, res, _ = decrypt_fd(c, msg)
        assert res["name"] == "LIMIT", res
        plain, small = world["msgs"][3]
        check_ok(*decrypt_fd(c, small)[:2], plain)
    finally:
        assert d.stop() == 0


def test_what_is_not_a_readable_memory_file_is_refused(world, daemon, tmp_path):
    c = daemon.client()
    base = n_fds(daemon)
    _, msg = world["msgs"][3]
    disk = tmp_path / "msg.pgp"  # a file on the disk's file system
    disk.write_bytes(msg)
    cases = []
    fd = os.open(disk, os.O_RDONLY)
    cases.append(("disk file", fd, "not a memory file"))
    fd = os.open("/proc/self/status", os.O_RDONLY)
    cases.append(("procfs file", fd, "not a memory file"))
    r, w = os.pipe()
    os.write(w, msg[:100])
    cases.append(("pipe", r, "not a memory file"))
    m = memfd(msg, seal=False)
    wo = os.open(f"/proc/self/fd/{m}", os.O_WRONLY)
    os.close(m)
    cases.append(("write-only memfd", wo, "not open for reading"))
    for what, fd, why in cases:
        rid = send_fd_decrypt(c, fd)
        os.close(fd)
        got, res, _ = c.read_reply(rid)
        assert res["name"] == "BAD_REQUEST" and why in res.get("sentence", ""), (what, res)
        assert got == b""
    os.close(w)
    plain, msg = world["msgs"][3]
    check_ok(*c.decrypt(msg)[:2], plain)  # the connection goes on
    c.close()
    time.sleep(0.2)
    assert n_fds(daemon) <= base


def test_input_fd_without_a_descriptor_is_a_protocol_error(daemon):
    c = daemon.client()
    c.send(frame(pdwire.DECRYPT, 1, struct.pack(">I", F_INPUT_FD)))
    with pytest.raises(ConnectionEnded) as e:
        c.read_reply(1)
    assert e.value.status == 50 and "no descriptor" in e.value.sentence


def test_unknown_flag_with_input_fd_takes_its_descriptor(world, daemon):
    """A DECRYPT refused for an unknown flag still takes the descriptor that
    came with it, so the next INPUT_FD request reads its own file."""
    c = daemon.client()
    _, m1 = world["msgs"][3]
    p2, m2 = world["msgs"][4]
    f1 = memfd(m1)
    rid = send_fd_decrypt(c, f1, flags=F_INPUT_FD | 0x80)
    os.close(f1)
    _, res, _ = c.read_reply(rid)
    assert res["name"] == "BAD_REQUEST"
    got, res, _ = decrypt_fd(c, m2)
    check_ok(got, res, p2)


def test_descriptors_nobody_asked_for_end_the_connection(world, daemon):
    """A peer cannot make the daemon hold descriptors: more than a few passed
    ahead of the frames that take them fail the connection, and every one
    is closed."""
    base = n_fds(daemon)
    c = daemon.client()
    r, w = os.pipe()
    fds = [os.dup(r) for _ in range(40)]
    try:
        for i in range(5):  # 40 descriptors on each of 5 PING frames
            socket.send_fds(c.s, [frame(pdwire.PING, 100 + i, b"x")], fds)
    except OSError:
        pass  # the daemon may have closed already
    with pytest.raises(ConnectionEnded) as e:
        while True:
            c.recv_frame()
    assert e.value.status == 50 and "more descriptors passed than" in e.value.sentence, e.value
    for fd in fds + [r, w]:
        os.close(fd)
    c.close()
    deadline = time.time() + 10
    while n_fds(daemon) > base and time.time() < deadline:
        time.sleep(0.05)
    assert n_fds(daemon) <= base
    plain, msg = world["msgs"][3]
    check_ok(*daemon.client().decrypt(msg)[:2], plain)


def test_input_fd_over_tcp_is_refused(world, tmp_path):
    port = free_port()
    d = Daemon(world, tmp_path, "--listen", f"tcp:127.0.0.1:{port}", "--allow-plain-tcp")
    try:
        wait_port(port)
        c = Client(tcp=("127.0.0.1", port))
        c.send(frame(pdwire.DECRYPT, 1, struct.pack(">I", F_INPUT_FD)))
        got, res, _ = c.read_reply(1)
        assert res["name"] == "BAD_REQUEST" and "Unix socket" in res["sentence"], res
        plain, msg = world["msgs"][3]
        check_ok(*c.decrypt(msg)[:2], plain)
        # and the client says so before it sends anything
        p = subprocess.run([CLIENT, "--connect", f"127.0.0.1:{port}", "--no-tls", "--pass-fd"],
                           input=msg, capture_output=True, timeout=60)
        assert p.returncode == 64 and p.stdout == b"", p
        assert b"--pass-fd hands the daemon a descriptor over a Unix socket" in p.stderr, p.stderr
    finally:
        assert d.stop() == 0


def test_client_pass_fd(world, daemon, tmp_path):
    plain, msg = world["msgs"][5]
    f = tmp_path / "m.pgp"
    f.write_bytes(msg)
    # a file on disk (copied into a memfd), standard input from a file, a pipe
    p = subprocess.run([CLIENT, "--socket", daemon.sock, "--pass-fd", str(f)], capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == plain, p.stderr
    with open(f, "rb") as fin:
        p = subprocess.run([CLIENT, "--socket", daemon.sock, "--pass-fd"], stdin=fin, capture_output=True,
                           timeout=60)
    assert p.returncode == 0 and p.stdout == plain, p.stderr
    p = subprocess.run([CLIENT, "--socket", daemon.sock, "--pass-fd"], input=msg, capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == plain, p.stderr
    # a file on tmpfs is passed as it is
    shm = "/dev/shm/pgpdecd-test-%d.pgp" % os.getpid()
    if os.path.isdir("/dev/shm"):
        with open(shm, "wb") as o:
            o.write(msg)
        try:
            out = tmp_path / "out"
            p = subprocess.run([CLIENT, "--socket", daemon.sock, "--pass-fd", "-o", str(out), shm],
                               capture_output=True, timeout=60)
            assert p.returncode == 0 and out.read_bytes() == plain, p.stderr
        finally:
            os.unlink(shm)
    # bench: every plaintext checked
    p = subprocess.run([CLIENT, "--socket", daemon.sock, "bench", "--pass-fd", "--concurrency", "4",
                        "--requests", "40", "--json", str(f)], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    assert j["ok"] == 40 and j["mismatched"] == 0 and j["failed"] == 0
    assert j["plaintext_sha256"] == [hashlib.sha256(plain).hexdigest().upper()]
