# SPDX-License-Identifier: MIT
"""Admission against the real daemon: what a peer that sends little, or
gives up, may hold of what others need.

- A DECRYPT frame alone takes no slot: requests that never send ciphertext
  do not lock other clients out (before: queue-length of them made every
  other client OVERLOADED for up to message-timeout).
- A request that times out keeps its slot until its job is back, and the
  job stops at its next costly step (before: the slot was given back while
  the job ran on, so message-timeout never stopped work and queue-length
  was exceeded).
- The verified-only held-plaintext budget cannot drift (before: each
  aborted verified-only request subtracted its RESULT, never added, and the
  counter wrapped below zero: every later verified-only message that needs
  more than one job failed OVERLOADED until restart).
- max-argon2-memory 0 refuses Argon2 (before: it meant no limit).

Run: PD_BUILD_DIR=build /usr/bin/python3 -m pytest -q tests/integration/test_admission.py
"""
import os
import signal
import struct
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import pdwire  # noqa: E402
import pgp  # noqa: E402
from pdwire import frame  # noqa: E402
from test_daemon import Daemon, world  # noqa: E402,F401
from test_password_costs import s2k_argon2, skesk_v4  # noqa: E402

T_PASSWORD = 0x02


def stats(d):
    return pdwire.parse_prometheus(d.client().stats())


def decrypt_with_password(c, data, password, flags=pdwire.F_VERIFIED_ONLY):
    rid = c.new_id()
    pw = password.encode()
    c.send(frame(pdwire.DECRYPT, rid, struct.pack(">I", flags) + struct.pack(">BH", T_PASSWORD, len(pw)) + pw))
    c.send_rest(rid, data)
    return rid


@pytest.fixture
def mkdaemon(world, tmp_path):
    made = []

    def make(*args):
        d = Daemon(world, tmp_path, *args)
        made.append(d)
        return d
    yield make
    for d in made:
        assert d.stop() == 0, d.logtext()


def test_idle_decrypts_hold_no_slot(world, mkdaemon):
    d = mkdaemon("--queue-length", "4")
    idle = []
    for _ in range(8):  # twice queue-length, on their own connections
        c = d.client()
        c.send(frame(pdwire.DECRYPT, c.new_id(), struct.pack(">I", 0)))
        idle.append(c)
    c = d.client()
    for plain, msg in world["msgs"][:4]:
        got, res, _ = c.decrypt(msg)
        assert res["name"] == "OK" and got == plain, res
    assert stats(d)["pgpdecd_in_flight"] == 0
    for c in idle:
        c.close()


def test_timed_out_job_keeps_its_slot_and_stops(world, mkdaemon):
    """One Argon2 derivation (256 MiB, 2 passes: about a second) and a
    second one behind it; the message times out during the first."""
    d = mkdaemon("--queue-length", "1", "--message-timeout", "200ms", "--max-kdf-work", "1G")
    body = pgp.seipd_v1(os.urandom(32), pgp.literal(b"never read\n"))
    msg = skesk_v4(s2k_argon2(2, 1, 18)) + skesk_v4(s2k_argon2(2, 1, 18, salt=b"another salt 16o")) + body
    c = d.client()
    t0 = time.monotonic()
    _, res, _ = c.read_reply(decrypt_with_password(c, msg, "wrong"))
    assert res["name"] == "TIMEOUT", res
    # the job still derives: its slot is still taken, so a second message waits its turn
    assert stats(d)["pgpdecd_in_flight"] == 1
    plain, ct = world["msgs"][2]
    got, res, _ = d.client().decrypt(ct)
    assert res["name"] == "OVERLOADED", res
    while stats(d)["pgpdecd_in_flight"] != 0:
        assert time.monotonic() - t0 < 60
        time.sleep(0.02)
    freed = time.monotonic() - t0
    got, res, _ = d.client().decrypt(ct)
    assert res["name"] == "OK" and got == plain, res
    print(f"\nslot given back {freed:.2f} s after the request (one derivation; both would take twice that)")


def test_verified_only_budget_does_not_drift(world, mkdaemon):
    d = mkdaemon("--message-timeout", "300ms")
    big_plain, big = world["msgs"][6]  # 3 MB of plaintext: several jobs
    assert len(big_plain) > 2 * 128 * 1024
    for _ in range(5):  # verified-only requests that time out
        c = d.client()
        rid = c.new_id()
        c.send(frame(pdwire.DECRYPT, rid, struct.pack(">I", pdwire.F_VERIFIED_ONLY)) + frame(pdwire.DATA, rid, big[:100]))
        _, res, _ = c.read_reply(rid)
        assert res["name"] == "TIMEOUT", res
        c.close()
    c = d.client()
    got, res, _ = c.decrypt(big, flags=pdwire.F_VERIFIED_ONLY)
    assert res["name"] == "OK" and got == big_plain, res
    assert stats(d)["pgpdecd_verified_held_bytes"] == 0


def test_argon2_memory_zero_refuses_argon2(world, mkdaemon):
    d = mkdaemon("--max-argon2-memory", "0")
    body = pgp.seipd_v1(os.urandom(32), pgp.literal(b"x\n"))
    c = d.client()
    _, res, _ = c.read_reply(decrypt_with_password(c, skesk_v4(s2k_argon2(1, 1, 3)) + body, "pw"))
    assert res["name"] == "LIMIT", res


def ocb_message(tmp_path, size, chunk):
    """SKESK v6 + SEIPD v2 OCB with chunk octet `chunk` (tests/tools/pd-test-encrypt)."""
    import subprocess
    from test_daemon import BUILD
    src, out, pw = tmp_path / "ocb.in", tmp_path / "ocb.pgp", tmp_path / "ocb.pw"
    src.write_bytes(os.urandom(size))
    pw.write_text("pw\n")
    subprocess.run([os.path.join(BUILD, "tests", "tools", "pd-test-encrypt"), "--format", "v2", "--aead", "ocb",
                    "--chunk", str(chunk), "--partial", "none", "--password-file", str(pw), "--seed", "7",
                    str(src), str(out)], check=True, capture_output=True)
    return src.read_bytes(), out.read_bytes()


def test_memory_budget_bounds_stalled_requests(world, mkdaemon, tmp_path):
    """24 OCB requests with 4 MiB chunks, each stalled after 64 KiB: only
    what max-memory allows starts (before: all 24, RSS +110 MB); the others
    are OVERLOADED at once, and once the stalled ones are gone the budget
    is whole again."""
    plain, msg = ocb_message(tmp_path, 6 << 20, 16)
    d = mkdaemon("--max-memory", "16M", "--max-argon2-memory", "8M")
    rss0 = d.rss_kib()
    stalled, refused = [], 0
    for _ in range(24):
        c = d.client()
        rid = decrypt_with_password_start(c, msg[:64 << 10], "pw")
        stalled.append((c, rid))
    time.sleep(1.0)  # let the jobs start their containers
    for c, rid in stalled:
        c.s.settimeout(0.5)
        try:
            _, res, _ = c.read_reply(rid)
            assert res["name"] == "OVERLOADED", res
            refused += 1
        except OSError:
            pass  # stalled: no reply yet
    grown = d.rss_kib() - rss0
    print(f"\n24 stalled 4 MiB-chunk requests under max-memory 16M: {24 - refused} started, "
          f"{refused} OVERLOADED, RSS +{grown / 1024:.1f} MiB")
    assert 1 <= 24 - refused <= 4, refused
    assert grown < 40 * 1024, grown
    for c, _ in stalled:
        c.close()
    deadline = time.time() + 30
    while stats(d)["pgpdecd_in_flight"] != 0 or stats(d)["pgpdecd_memory_bytes"] != 0:
        assert time.time() < deadline, stats(d)
        time.sleep(0.05)
    # the budget came back whole: four large messages in a row still fit one at a time
    c = d.client()
    for _ in range(4):
        rid = decrypt_with_password(c, msg, "pw", flags=0)
        got, res, _ = c.read_reply(rid)
        assert res["name"] == "OK" and got == plain, res


def decrypt_with_password_start(c, data, password):
    """DECRYPT with a password and some DATA, no END."""
    rid = c.new_id()
    pw = password.encode()
    c.send(frame(pdwire.DECRYPT, rid, struct.pack(">I", 0) + struct.pack(">BH", T_PASSWORD, len(pw)) + pw))
    for o in range(0, len(data), 60000):
        c.send(frame(pdwire.DATA, rid, data[o:o + 60000]))
    return rid


def test_shutdown_does_not_wait_for_a_whole_message(world, tmp_path):
    """SIGTERM while a message's six Argon2 derivations (256 MiB, 3 passes:
    about 0.9 s each on a quiet machine) run, with a 200 ms drain-timeout:
    the daemon is gone after the one derivation it was in (before: after
    all six).  The bound is in derivations, not seconds: one derivation is
    timed first on the same daemon (a loaded machine slows both alike)."""
    import signal
    d = Daemon(world, tmp_path, "--drain-timeout", "200ms", "--max-kdf-work", "2400M", "--max-skesk-trials", "6")
    body = pgp.seipd_v1(os.urandom(32), pgp.literal(b"never read\n"))
    c = d.client()
    one = skesk_v4(s2k_argon2(3, 1, 18, salt=b"\x77" * 16)) + body
    t1 = time.monotonic()
    rid = decrypt_with_password(c, one, "wrong")
    ftype, fid, p = c.recv_frame()
    t1 = time.monotonic() - t1
    assert (ftype, fid) == (pdwire.RESULT, rid) and pdwire.parse_result(p)["name"] != "OK", (ftype, p)
    msg = b"".join(skesk_v4(s2k_argon2(3, 1, 18, salt=bytes([i]) * 16)) for i in range(6)) + body
    decrypt_with_password(c, msg, "wrong")
    time.sleep(0.3)  # in the first derivation
    t0 = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(30) == 0, d.logtext()
    took = time.monotonic() - t0
    print(f"\nexit {took:.2f} s after SIGTERM; one derivation took {t1:.2f} s (all six: about {6 * t1:.1f} s)")
    # in the first derivation when SIGTERM came, so at most the rest of it
    # and the drain; waiting for all six would be more than 5 of them
    assert took < 3 * t1, (took, t1)
    d.check_sanitizers()


def test_idle_passwords_are_bounded(world, mkdaemon):
    """Requests that have not started keep their PASSWORD in secure memory
    (shared with the keys): 300 connections, each with an idle DECRYPT and
    a 1024-octet password, hold at most 256 KiB of it; the others are
    OVERLOADED at once, and the secure heap stays usable for everyone else."""
    d = mkdaemon()
    pw = b"p" * 1024
    conns, refused = [], 0
    for _ in range(300):
        c = d.client()
        c.send(frame(pdwire.DECRYPT, c.new_id(), struct.pack(">I", 0) + struct.pack(">BH", T_PASSWORD, len(pw)) + pw))
        conns.append(c)
    time.sleep(0.5)
    for c in conns:
        c.s.settimeout(0.05)
        try:
            ftype, _, p = c.recv_frame()
            assert ftype == pdwire.RESULT and pdwire.parse_result(p)["name"] == "OVERLOADED"
            refused += 1
        except OSError:
            pass
    st = stats(d)
    print(f"\n300 idle DECRYPTs with 1 KiB passwords: {300 - refused} held, {refused} OVERLOADED, "
          f"secure heap {st['pgpdecd_secure_heap_used_bytes'] / 1024:.0f} KiB used")
    assert 300 - refused == (256 << 10) // 1025, refused
    plain, ct = world["msgs"][2]
    got, res, _ = d.client().decrypt(ct)
    assert res["name"] == "OK" and got == plain, res
    for c in conns:
        c.close()


def test_unstarted_request_gets_idle_timeout(world, mkdaemon):
    """A DECRYPT with a password and no ciphertext holds secure memory: it
    gets idle-timeout to start, not the whole message-timeout (before: 10
    minutes, so 256 such connections locked every password request out)."""
    d = mkdaemon("--idle-timeout", "1s")
    c = d.client(timeout=15)
    rid = c.new_id()
    pw = b"secret"
    t0 = time.monotonic()
    c.send(frame(pdwire.DECRYPT, rid, struct.pack(">I", 0) + struct.pack(">BH", T_PASSWORD, len(pw)) + pw))
    ftype, fid, p = c.recv_frame()
    res = pdwire.parse_result(p)
    assert ftype == pdwire.RESULT and fid == rid and res["name"] == "TIMEOUT", res
    assert "idle-timeout" in res["sentence"], res
    assert time.monotonic() - t0 < 10
    # a request that started is not cut short by it
    plain, ct = world["msgs"][2]
    got, res, _ = d.client().decrypt(ct)
    assert res["name"] == "OK" and got == plain, res


def _peak_memory_while_streaming(d, msg, plain):
    """Decrypt msg through d reading the plaintext slowly (a frame, then a
    pause every fourth), while a second connection samples
    pgpdecd_memory_bytes; the peak, and the gauge once it is answered."""
    c = d.client()
    rid = c.new_id()
    sender = threading.Thread(target=lambda: c.send_decrypt(msg, rid=rid), daemon=True)
    sender.start()
    peak, done = [0], threading.Event()

    def sample():
        s = d.client()
        while not done.is_set():
            peak[0] = max(peak[0], pdwire.parse_prometheus(s.stats())["pgpdecd_memory_bytes"])
            time.sleep(0.01)
        s.close()
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    got, n = [], 0
    try:
        while True:
            ftype, fid, p = c.recv_frame()
            assert fid == rid
            if ftype == pdwire.DATA:
                got.append(p)
                n += 1
                if n % 4 == 0:
                    time.sleep(0.002)
            elif ftype == pdwire.RESULT:
                break
    finally:
        done.set()
        t.join(30)
        sender.join(30)
    assert b"".join(got) == plain
    c.close()
    after = stats(d)["pgpdecd_memory_bytes"]
    return peak[0], after


def test_large_message_buffers_grow_within_request_buffer_max(world, tmp_path):
    """A message several times larger than request-buffer moves in larger
    hand-offs: its buffers double up to request-buffer-max (512K by
    default), a job's output to at most half of write-high-watermark,
    drawn from max-memory and all given back when it is answered; with
    request-buffer-max at request-buffer they stay as they are.  (Before
    there was no growth: 128 KiB hand-offs, each a worker's and then the
    loop's wake-up, for every message; the bulk benchmark in
    contrib/bench/bulk.sh shows what it costs.)"""
    plain = os.urandom(24 << 20)
    msg = world["gpg"].encrypt(plain, "alice@example.org", compress=0)
    mib = 1 << 20
    # request-buffer 128K: its buffers are two 128K inputs and two outputs
    # of 128K and a frame's margin; grown to 512K, the same at 512K; at 1M
    # the inputs, and the outputs at half the 1M watermark.
    for name, args, lo, hi in (("grown", (), 2 * mib, 3 * mib),
                               ("1M", ("--request-buffer-max", "1M"), 3 * mib, 4 * mib),
                               ("flat", ("--request-buffer-max", "128K"), 1, mib)):
        where = tmp_path / name
        where.mkdir()
        d = Daemon(world, where, *args)
        try:
            peak, after = _peak_memory_while_streaming(d, msg, plain)
        finally:
            assert d.stop() == 0, d.logtext()
        assert lo <= peak < hi, f"{name}: peak {peak} bytes of buffers, expected [{lo}, {hi})"
        assert after == 0, f"{name}: {after} bytes of max-memory not given back"


def test_message_that_cannot_be_made_is_answered_by_the_loop(world, mkdaemon):
    """The first job makes the message (request.c start_msg()).  When
    max-memory has room for a request's buffers but not for the message's
    own (2 x 64 KiB + 8 KiB), the answer is the one the loop gave when it
    made the message itself: OVERLOADED, its sentence, and the octets
    received (before the fix the job wrote the RESULT with bytes_in 0).  A
    bad SESSION_KEY_IN is a fault of the request, said first whatever the
    memory (BAD_REQUEST; it was OVERLOADED under such memory pressure)."""
    d = mkdaemon("--max-memory", "16M", "--max-argon2-memory", "8M", "--request-buffer", "4170000")
    c = d.client()
    for data in (b"\x00" * 1000, b"\x01" * 126):
        _, res, _ = c.decrypt(data)
        assert res["name"] == "OVERLOADED", res
        assert res["sentence"] == ("out of memory, or memory for messages in progress at its limit (max-memory); "
                                   "retry later"), res
        assert res["bytes_in"] == len(data), res
    _, res, _ = c.decrypt(b"\x00" * 1000, opts=pdwire.tlv(pdwire.T_SESSION_KEY_IN, b"\x09" + b"k" * 16))
    assert res["name"] == "BAD_REQUEST" and "key length wrong" in res["sentence"], res
    s = stats(d)
    assert s["pgpdecd_in_flight"] == 0 and s["pgpdecd_memory_bytes"] == 0, s


def test_max_memory_is_read_at_start_only(world, tmp_path):
    """pgpdecd.conf(5): max-memory is read at start only.  The budget used
    to be made by the first request or scrape, with the configuration of
    that moment: a reload before it that changed max-memory changed the
    budget too (and not the heap's trim threshold, set at start)."""
    conf = tmp_path / "pgpdecd.conf"
    conf.write_text("[limits]\nmax-memory = 64M\nmax-argon2-memory = 32M\n")
    d = Daemon(world, tmp_path, "--config", str(conf))
    try:
        conf.write_text("[limits]\nmax-memory = 128M\nmax-argon2-memory = 32M\n")
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log("reloaded:", 1)
        assert stats(d)["pgpdecd_memory_limit_bytes"] == 64 << 20
    finally:
        assert d.stop() == 0
