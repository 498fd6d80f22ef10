#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""contrib/soak.sh: hours of hostile, mixed load on one pgpdecd, with
the daemon reloaded every few seconds and killed (SIGKILL) and restarted
under socket activation every few minutes, and a verdict at the end.

Load, all at once (about --concurrency requests in flight):
  - pgpdecd-client bench runs over RSA-2048, RSA-4096 and cv25519 messages
    of 4 KiB, 1 MiB, 10 MiB and 50 MB, and the RFC 9580 A.8 AEAD (OCB)
    message to a v6 key, with retry on; bench checks that every plaintext
    of a file is the same, the soak that it is the right one;
  - password-encrypted messages (gpg -c) through pgpdecd-client
    --password-file, and tampered ones (a flipped MDC octet) that must come
    back INTEGRITY (exit 65);
  - clients that vanish in the middle of a request, and slow readers
    (raw protocol, tests/integration/pdwire.py);
  - SIGHUP every --reload seconds; SIGKILL and a restart on the same
    activated socket (LISTEN_FDS, as systemd passes it) every --kill
    seconds.
Each minute (each --interval seconds) it prints a row: requests done by
kind, failures, the daemon's RSS and open fds.  At the end it writes the
table as TSV and a PNG plot (gnuplot) and asserts: no wrong plaintext, no
request lost (each ended byte-exact or with the expected failure), RSS and
open fds flat (the last third of the run within a margin of the first
third's maximum).  Exit 0 only then.

Usage: contrib/soak.sh [--minutes 30] [--seconds S] [--concurrency 200]
  [--reload 10] [--kill 300] [--interval 60] [--out DIR] [--build DIR]
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))
import pdwire  # noqa: E402


def log(*a):
    print(*a, flush=True)


class Gpg:
    def __init__(self, home):
        self.home = home
        os.makedirs(home, mode=0o700, exist_ok=True)

    def run(self, *args, input=None):
        return subprocess.run(["gpg", "--homedir", self.home, "--batch", "--yes", "--quiet", "--no-auto-key-locate",
                               "--pinentry-mode", "loopback", "--trust-model", "always", *args],
                              input=input, check=True, capture_output=True).stdout


class Activated:
    """The daemon behind a socket held here and passed to each new process
    as systemd passes it (fd 3, LISTEN_FDS=1, LISTEN_PID)."""

    def __init__(self, build, workdir, keydir):
        self.pgpdecd = os.path.join(build, "daemon", "pgpdecd")
        self.client = os.path.join(build, "client", "pgpdecd-client")
        self.sock = os.path.join(workdir, "pgpdecd.sock")
        self.keydir = keydir
        self.l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.l.bind(self.sock)
        os.chmod(self.sock, 0o600)
        self.l.listen(512)
        self.logf = open(os.path.join(workdir, "daemon.log"), "ab")
        self.proc = None
        self.starts = 0
        self.start()

    def start(self):
        fd = self.l.fileno()

        def child():
            os.dup2(fd, 3)
        self.proc = subprocess.Popen(
            ["sh", "-c", 'LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"', self.pgpdecd, "--keydir", self.keydir,
             "--log-level", "notice", "--max-connections", "1024", "--drain-timeout", "5s"],
            preexec_fn=child, pass_fds=(3,), stdout=self.logf, stderr=self.logf)
        self.starts += 1
        deadline = time.time() + 60
        while subprocess.run([self.client, "--socket", self.sock, "--no-retry", "--timeout", "5", "ping"],
                             capture_output=True).returncode != 0:
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit("soak: the daemon did not start; see daemon.log")
            time.sleep(0.05)

    def kill_restart(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        time.sleep(0.5)
        self.start()

    def reload(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGHUP)

    def usage(self):
        pid = self.proc.pid
        try:
            with open(f"/proc/{pid}/status") as f:
                rss = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except (OSError, StopIteration):
            return None, None
        return rss, fds

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)
        self.l.close()


class Counters:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = {}

    def add(self, key, n=1):
        with self.lock:
            self.c[key] = self.c.get(key, 0) + n

    def snapshot(self):
        with self.lock:
            return dict(self.c)


def make_corpus(d, quick):
    g = Gpg(os.path.join(d, "gnupg"))
    keys = os.path.join(d, "keys")
    os.makedirs(keys)
    specs = [("rsa2048", "rsa2048"), ("rsa4096", "rsa4096"), ("cv25519", "future-default")]
    for uid, algo in specs:
        g.run("--passphrase", "", "--quick-gen-key", f"{uid}@soak.test", algo, "default", "never")
        if algo.startswith("rsa"):
            fpr = [ln.split(":")[9] for ln in g.run("--with-colons", "--list-keys", f"{uid}@soak.test").decode()
                   .splitlines() if ln.startswith("fpr")][0]
            g.run("--passphrase", "", "--quick-add-key", fpr, algo, "encr", "never")
        with open(os.path.join(keys, uid + ".gpg"), "wb") as f:
            f.write(g.run("--passphrase", "", "--export-secret-keys", f"{uid}@soak.test"))
    # The RFC 9580 A.4 v6 key and its A.8 AEAD (OCB) message.
    shutil.copy(os.path.join(SRC, "tests", "data", "keys", "a04-v6-secret-key.gpg"), os.path.join(keys, "a04.gpg"))
    sizes = [4096, 1 << 20, 10 << 20] + ([] if quick else [50_000_000])
    msgs = []  # (path, plaintext sha256 hex, size, concurrency share)
    rnd = random.Random(1)
    for uid, _ in specs:
        for size in sizes:
            if size > (1 << 20) and uid != "rsa2048":
                continue  # large ones once: their cost is the symmetric part
            plain = rnd.randbytes(size)
            p = os.path.join(d, f"{uid}-{size}.gpg")
            with open(p, "wb") as f:
                f.write(g.run("--encrypt", "--compress-level", "0", "-r", f"{uid}@soak.test", input=plain))
            msgs.append((p, hashlib.sha256(plain).hexdigest().upper(), size))
    a08 = os.path.join(SRC, "tests", "data", "rfc9580", "a08-x25519-aead-ocb-message.asc")
    msgs.append((a08, hashlib.sha256(b"Hello, world!").hexdigest().upper(), 13))
    pw = os.path.join(d, "password")
    with open(pw, "w") as f:
        f.write("soak password\n")
    pmsg = os.path.join(d, "password.gpg")
    ptext = rnd.randbytes(20000)
    with open(pmsg, "wb") as f:
        f.write(g.run("--passphrase", "soak password", "--symmetric", input=ptext))
    good = open(msgs[0][0], "rb").read()
    bad = bytearray(good)
    bad[-1] ^= 1
    tampered = os.path.join(d, "tampered.gpg")
    with open(tampered, "wb") as f:
        f.write(bytes(bad))
    return keys, msgs, (pmsg, pw, ptext), tampered, good


def bench_loop(a, path, digest, conc, stop, ctr, kind, errors):
    """Bench rounds until stop; every round's plaintexts must be the file's."""
    size = os.path.getsize(path)
    n = max(conc * 20, 40) if size < 65536 else max(conc * 2, 4) if size < (2 << 20) else max(conc, 2)
    while not stop.is_set():
        r = subprocess.run([a.client, "--socket", a.sock, "--timeout", "120", "bench", "--concurrency", str(conc),
                            "--requests", str(n), "--json", path], capture_output=True, text=True)
        try:
            j = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            errors.append(f"{kind}: bench printed nothing: rc {r.returncode} {r.stderr.strip()[-300:]}")
            ctr.add(kind + " lost", n)
            continue
        ctr.add(kind, j["ok"])
        ctr.add("resent", j["resent"])
        if j["failed"]:
            ctr.add(kind + " lost", j["failed"])
            errors.append(f"{kind}: {j['failed']} failed: {r.stderr.strip()[-300:]}")
        if j["mismatched"] or (j["ok"] and j["plaintext_sha256"] != [digest]):
            ctr.add("wrong plaintext", max(1, j["mismatched"]))
            errors.append(f"{kind}: wrong plaintext {j['plaintext_sha256']} != {digest}")


def special_loop(a, password, tampered, stop, ctr, errors, tmp):
    pmsg, pwfile, ptext = password
    out = os.path.join(tmp, "pw.out")
    while not stop.is_set():
        r = subprocess.run([a.client, "--socket", a.sock, "--password-file", pwfile, "-o", out, pmsg],
                           capture_output=True)
        if r.returncode == 0 and open(out, "rb").read() == ptext:
            ctr.add("password")
        else:
            ctr.add("password lost")
            errors.append(f"password: rc {r.returncode} {r.stderr.decode()[-200:]}")
        r = subprocess.run([a.client, "--socket", a.sock, "--verified-only", tampered], capture_output=True)
        if r.returncode == 65 and b"INTEGRITY" in r.stderr and not r.stdout:
            ctr.add("tampered")
        else:
            ctr.add("tampered lost")
            errors.append(f"tampered: rc {r.returncode} {r.stderr.decode()[-200:]}")


def chaos_loop(a, good, stop, ctr, slow):
    """Clients that vanish mid-request (a few per second: they cost the
    daemon little, and a tight loop would only measure this script), or
    (slow) read a 1 MiB message's plaintext a little at a time and vanish
    before the end."""
    rnd = random.Random(os.getpid() + (1 if slow else 0))
    while not stop.is_set():
        time.sleep(0.02)
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(a.sock)
            s.sendall(pdwire.frame(pdwire.HELLO, 0, b"PGPD\x00\x01\x00\x01"))
            s.recv(4096)
            s.sendall(pdwire.frame(pdwire.DECRYPT, 1, struct.pack(">I", 0)))
            cut = rnd.randrange(1, len(good))
            for off in range(0, cut, 60000):
                s.sendall(pdwire.frame(pdwire.DATA, 1, good[off:min(cut, off + 60000)]))
            if slow:
                for off in range(cut, len(good), 60000):
                    s.sendall(pdwire.frame(pdwire.DATA, 1, good[off:off + 60000]))
                s.sendall(pdwire.frame(pdwire.END, 1))
                for _ in range(rnd.randrange(1, 40)):
                    if not s.recv(4096):
                        break
                    time.sleep(0.05)
            s.close()
            ctr.add("slow reader" if slow else "vanished")
        except OSError:
            ctr.add("chaos refused")  # the daemon restarting: no request was owed
            time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--seconds", type=float, default=None, help="run length in seconds (overrides --minutes)")
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--reload", type=float, default=10, help="SIGHUP every this many seconds")
    ap.add_argument("--kill", type=float, default=300, help="SIGKILL and restart every this many seconds")
    ap.add_argument("--interval", type=float, default=60, help="seconds per table row")
    ap.add_argument("--out", default=None, help="where the table (TSV), the plot (PNG) and the logs go")
    ap.add_argument("--build", default=os.environ.get("PD_BUILD_DIR", os.path.join(SRC, "build")))
    o = ap.parse_args()
    length = o.seconds if o.seconds is not None else o.minutes * 60
    quick = length < 600
    out = o.out or tempfile.mkdtemp(prefix="pgpdecd-soak-")
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="pgpdecd-soak-work-")
    log(f"soak: {length:.0f} s, {o.concurrency} in flight, SIGHUP every {o.reload:g} s, "
        f"SIGKILL+restart every {o.kill:g} s; results in {out}")
    keys, msgs, password, tampered, good = make_corpus(work, quick)
    a = Activated(o.build, work, keys)
    ctr, errors, stop = Counters(), [], threading.Event()
    # The concurrency, spread: most on small messages, a few on large ones.
    threads = []
    small = [m for m in msgs if m[2] <= 4096 or m[2] == 13]
    medium = [m for m in msgs if m[2] == 1 << 20]
    large = [m for m in msgs if m[2] > (1 << 20)]
    budget = o.concurrency - 4 - 2  # specials and chaos
    plan = [(m, max(1, budget * 6 // 10 // len(small)), "small") for m in small]
    plan += [(m, max(1, budget * 3 // 10 // len(medium)), "1 MiB") for m in medium]
    plan += [(m, max(1, budget // 10 // len(large)), "large") for m in large]
    for (path, digest, size), conc, kind in plan:
        threads.append(threading.Thread(target=bench_loop, args=(a, path, digest, conc, stop, ctr, kind, errors)))
    for i in range(2):
        threads.append(threading.Thread(target=special_loop, args=(a, password, tampered, stop, ctr, errors,
                                                                   os.path.join(work, f"s{i}"))))
        os.makedirs(os.path.join(work, f"s{i}"))
    medium_msg = open(medium[0][0], "rb").read()
    threads.append(threading.Thread(target=chaos_loop, args=(a, good, stop, ctr, False)))
    threads.append(threading.Thread(target=chaos_loop, args=(a, medium_msg, stop, ctr, True)))
    for t in threads:
        t.daemon = True
        t.start()
    kinds = ["small", "1 MiB", "large", "password", "tampered", "vanished", "slow reader"]
    head = ["min", "rss_kib", "fds", "starts"] + kinds + ["resent", "lost", "wrong"]
    rows = []
    log("\t".join(head))
    t0 = time.time()
    next_row, next_reload, next_kill = t0 + o.interval, t0 + o.reload, t0 + o.kill
    prev = {}
    peak = (0, 0)
    while time.time() - t0 < length:
        time.sleep(0.2)
        now = time.time()
        rss, fds = a.usage()
        if rss:
            peak = (max(peak[0], rss), max(peak[1], fds))
        if now >= next_reload:
            a.reload()
            next_reload += o.reload
        if now >= next_kill:
            a.kill_restart()
            next_kill += o.kill
        if now >= next_row:
            snap = ctr.snapshot()
            lost = sum(v for k, v in snap.items() if k.endswith(" lost"))
            row = [f"{(now - t0) / 60:.1f}", peak[0], peak[1], a.starts] + \
                  [snap.get(k, 0) - prev.get(k, 0) for k in kinds] + \
                  [snap.get("resent", 0) - prev.get("resent", 0), lost, snap.get("wrong plaintext", 0)]
            rows.append(row)
            log("\t".join(str(x) for x in row))
            prev = snap
            peak = (0, 0)
            next_row += o.interval
    stop.set()
    for t in threads:
        t.join(300)
    a.stop()
    snap = ctr.snapshot()
    with open(os.path.join(out, "soak.tsv"), "w") as f:
        f.write("\t".join(head) + "\n")
        for r in rows:
            f.write("\t".join(str(x) for x in r) + "\n")
    plot(out, rows)
    lost = {k: v for k, v in snap.items() if k.endswith(" lost")}
    log(f"totals: {json.dumps(snap, sort_keys=True)}")
    ok = True
    if snap.get("wrong plaintext", 0):
        log(f"FAIL: {snap['wrong plaintext']} wrong plaintexts")
        ok = False
    if any(lost.values()):
        log(f"FAIL: requests lost: {lost}")
        ok = False
    for e in errors[:20]:
        log("  " + e)
    if sum(snap.get(k, 0) for k in ("small", "password", "tampered")) == 0:
        log("FAIL: nothing was decrypted")
        ok = False
    # Flat: the last third's peak within a margin of the first third's.
    if len(rows) >= 3:
        third = max(1, len(rows) // 3)
        rss0, rss1 = max(r[1] for r in rows[:third]), max(r[1] for r in rows[-third:])
        fd0, fd1 = max(r[2] for r in rows[:third]), max(r[2] for r in rows[-third:])
        log(f"RSS peak first third {rss0} KiB, last third {rss1} KiB; fds {fd0} -> {fd1}")
        if rss1 > rss0 * 1.25 + 16384:
            log("FAIL: RSS grew")
            ok = False
        if fd1 > fd0 + 32:
            log("FAIL: open fds grew")
            ok = False
    else:
        log("(too few rows to judge RSS and fds: use a longer run or a shorter --interval)")
    log(f"soak: {'PASSED' if ok else 'FAILED'}; table {out}/soak.tsv, plot {out}/soak.png")
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    else:  # the daemon's log and the corpus, to find out why
        shutil.copy(os.path.join(work, "daemon.log"), os.path.join(out, "daemon.log"))
        log(f"kept {work} and {out}/daemon.log")
    return 0 if ok else 1


def plot(out, rows):
    if not rows:
        return
    if not shutil.which("gnuplot"):
        log("(no gnuplot: no plot; Debian: apt-get install gnuplot-nox)")
        return
    data = os.path.join(out, "soak.dat")
    with open(data, "w") as f:
        for r in rows:
            f.write(f"{r[0]} {r[1] / 1024:.1f} {r[2]} {r[4] + r[5] + r[6] + r[7] + r[8]}\n")
    script = f"""
set terminal png size 1000,600 noenhanced
set output '{out}/soak.png'
set title 'pgpdecd soak: RSS, open fds and requests per interval'
set xlabel 'minutes'
set ylabel 'RSS (MiB) / open fds'
set y2label 'requests per interval'
set y2tics
set ytics nomirror
set key left top
plot '{data}' using 1:2 with linespoints title 'RSS peak (MiB)', \\
     '{data}' using 1:3 with linespoints title 'open fds peak', \\
     '{data}' using 1:4 axes x1y2 with linespoints title 'requests'
"""
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        log("gnuplot: " + r.stderr.strip())


if __name__ == "__main__":
    sys.exit(main())
