#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""contrib/bench/keys.sh's driver: pgpdecd with many keys against one key.

See keys.sh for what it measures and how to run it."""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def log(*a):
    print("keys.sh:", *a, file=sys.stderr, flush=True)


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


class Daemon:
    """pgpdecd on a Unix socket, its sd_notify messages read here: READY=1
    after the keys loaded (start-up) and after each reload."""

    def __init__(self, build, work, name, key_args, workers, extra=()):
        self.sock = os.path.join(work, name + ".sock")
        self.notify_path = os.path.join(work, name + ".notify")
        self.logpath = os.path.join(work, name + ".log")
        self.client = os.path.join(build, "client", "pgpdecd-client")
        self.ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.ns.bind(self.notify_path)
        env = dict(os.environ, NOTIFY_SOCKET=self.notify_path)
        cmd = [os.path.join(build, "daemon", "pgpdecd"), "--listen", "unix:" + self.sock, *key_args,
               "--log-level", "info", "--max-connections", "4096", "--queue-length", "4096", *extra]
        if workers:
            cmd += ["--workers", str(workers)]
        self.logf = open(self.logpath, "w")
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(cmd, env=env, stderr=self.logf, stdout=subprocess.DEVNULL)
        self.startup = self.wait_ready(timeout=3600)

    def wait_ready(self, timeout):
        self.ns.settimeout(0.5)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                msg = self.ns.recv(4096).decode()
            except socket.timeout:
                if self.p.poll() is not None:
                    self.fail("exited")
                continue
            if "READY=1" in msg.split("\n"):
                self.cpu_at_ready = self.cpu_s()
                return time.monotonic() - self.t0
        self.fail("not ready in time")

    def fail(self, why):
        self.logf.flush()
        with open(self.logpath) as f:
            tail = f.readlines()[-20:]
        sys.exit(f"keys.sh: pgpdecd {why}:\n" + "".join(tail))

    def reload(self):
        """SIGHUP to READY=1; meanwhile ping the daemon in a loop: the
        largest round trip says whether the loop kept serving."""
        stop = threading.Event()
        rtts = []

        def pinger():
            while not stop.is_set():
                t = time.monotonic()
                r = subprocess.run([self.client, "--socket", self.sock, "--timeout", "60", "ping"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                if r.returncode == 0:
                    rtts.append(time.monotonic() - t)
                time.sleep(0.05)

        th = threading.Thread(target=pinger)
        th.start()
        time.sleep(0.3)
        self.t0 = time.monotonic()
        cpu0 = self.cpu_s()
        self.p.send_signal(signal.SIGHUP)
        took = self.wait_ready(timeout=3600)
        self.reload_cpu = self.cpu_at_ready - cpu0
        stop.set()
        th.join()
        return took, rtts

    def cpu_s(self):
        """user + system CPU seconds of the daemon so far (all threads)."""
        with open(f"/proc/{self.p.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_kib(self):
        out = {}
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k] = int(v.split()[0])
        return out

    def stats(self):
        r = subprocess.run([self.client, "--socket", self.sock, "stats"], capture_output=True, text=True, check=True)
        out = {}
        for line in r.stdout.splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                out[k] = float(v)
        return out

    def bench(self, files, conc, requests):
        r = subprocess.run([self.client, "--socket", self.sock, "--timeout", "300", "bench", "--concurrency",
                            str(conc), "--requests", str(requests), "--json", *files],
                           capture_output=True, text=True)
        if not r.stdout.strip():
            sys.exit("keys.sh: bench failed: " + r.stderr)
        return json.loads(r.stdout)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=120)
        self.logf.close()
        self.ns.close()


def gpg(home, *args, **kw):
    return run("gpg", "--homedir", home, "--batch", "-q", *args, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/pgpdecd-bench-keys"))
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--requests", type=int, default=0, help="per bench run (default: by key type)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--build", default=os.environ.get("BUILD", os.path.join(SRC, "build")))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    ring = os.path.join(a.cache, f"ring{a.count}")
    if not os.path.exists(os.path.join(ring, "index.tsv")):
        log(f"making a ring of {a.count} keys in {ring} (once; cached)")
        run("/usr/bin/python3", os.path.join(SRC, "contrib/bench/mkring.py"), ring, "--count", str(a.count),
            "--pool-dir", os.path.join(a.cache, "rsa-pool"))
    rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(ring, "index.tsv"))]
    kinds = {}
    for r in rows:
        kinds[r[1]] = kinds.get(r[1], 0) + 1
    nprot = sum(int(r[3]) for r in rows)
    targets = {}  # the first key of each kind 78% deep into the ring
    for i in range(int(len(rows) * 0.7777), len(rows)):
        name, kind, fpr, prot = rows[i]
        if kind in ("rsa4096", "cv25519") and kind not in targets:
            targets[kind] = (i, name, fpr)
    work = tempfile.mkdtemp(prefix="pgpdecd-keys.")
    home = os.path.join(work, "gnupg")
    os.mkdir(home, 0o700)
    msgs = {}
    for kind, (i, name, fpr) in sorted(targets.items()):
        # gpg encrypts to the public part of the secret key file (its
        # import needs no passphrase)
        gpg(home, "--import", os.path.join(ring, "keys", name))
        d = os.path.join(work, "msg-" + kind)
        os.mkdir(d)
        for m in range(10):
            with open(os.path.join(d, f"p{m}"), "wb") as f:
                f.write(os.urandom(4096))
            gpg(home, "--trust-model", "always", "-e", "-r", fpr, "-o", os.path.join(d, f"m{m}.pgp"),
                os.path.join(d, f"p{m}"))
        msgs[kind] = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".pgp"))
    # a message to a key no ring holds
    gpg(home, "--passphrase", "", "--quick-gen-key", "nokey <nokey@pgpdecd.example>", "future-default",
        "default", "never")
    d = os.path.join(work, "msg-nokey")
    os.mkdir(d)
    with open(os.path.join(d, "p0"), "wb") as f:
        f.write(os.urandom(4096))
    gpg(home, "--trust-model", "always", "-e", "-r", "nokey@pgpdecd.example", "-o", os.path.join(d, "m0.pgp"),
        os.path.join(d, "p0"))
    msgs["none"] = [os.path.join(d, "m0.pgp")]

    log(f"ring: {len(rows)} keys ({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}; "
        f"{nprot} passphrase-protected); targets: " + ", ".join(f"{k} #{v[0]}" for k, v in sorted(targets.items())))
    log("starting pgpdecd with the whole ring")
    many = Daemon(build, work, "many", ["--keydir", os.path.join(ring, "keys")], a.workers)
    startup_cpu = many.cpu_at_ready
    many.logf.flush()
    secmem_line = next((ln.split("[SYS] ", 1)[1].strip() for ln in open(many.logpath)
                        if "[SYS] secure memory:" in ln), "secmem-size set explicitly")
    st = many.stats()
    rss = many.rss_kib()
    log(f"ready in {many.startup:.2f} s, {int(st.get('pgpdecd_keys_loaded', 0))} keys")
    reloads = []
    for r in range(1):
        took, rtts = many.reload()
        reloads.append((took, rtts, many.reload_cpu))
        log(f"reload in {took:.2f} s; ping during it: {len(rtts)} answered, max {max(rtts or [0]) * 1000:.0f} ms")
    st2 = many.stats()
    rss2 = many.rss_kib()
    ones = {}
    for kind, (i, name, fpr) in sorted(targets.items()):
        ones[kind] = Daemon(build, work, "one-" + kind, ["--key", os.path.join(ring, "keys", name)], a.workers,
                            ["--passphrase-file", os.path.join(ring, "keys", name + ".passphrase")]
                            if int(rows[i][3]) else [])
    ones["none"] = ones[sorted(targets)[0]]
    res = {}
    for kind in sorted(msgs):
        req = a.requests or {"rsa4096": 400, "cv25519": 3000, "none": 3000}.get(kind, 1000)
        for c in (1, 50):
            for who, dmn in (("one", ones[kind]), ("many", many)):
                dmn.bench(msgs[kind], c, max(c * 2, req // 10))  # warm up
            for rd in range(a.rounds):
                for who, dmn in (("one", ones[kind]), ("many", many)):
                    b = dmn.bench(msgs[kind], c, req)
                    good = b["ok"] if kind != "none" else b["failed"]
                    if good != req:
                        sys.exit(f"keys.sh: {kind} c={c} {who}: {b['ok']} ok, {b['failed']} failed of {req}")
                    rate = req / b["elapsed_s"]
                    res.setdefault((kind, c, who), []).append((rate, b["latency_ms"]["p50"]))
                    log(f"{kind} c={c} {who}: {rate:.0f} msg/s p50 {b['latency_ms']['p50']:.3f} ms")
    for d in ones.values():
        if d.p.poll() is None:
            d.stop()
    many.stop()

    print(f"\n## pgpdecd with {len(rows)} secret keys against one key\n")
    la = os.getloadavg()
    print(f"Load average at the end: {la[0]:.1f} {la[1]:.1f} {la[2]:.1f} (other work on the machine slows the "
          "wall-clock figures; CPU seconds do not depend on it).\n")
    print(f"Ring: {len(rows)} keys ({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}; {nprot} "
          f"passphrase-protected, iterated+salted SHA-256 S2K); {int(st['pgpdecd_keys_loaded'])} decryption "
          f"keys loaded; {os.cpu_count()} CPUs, workers {a.workers or 'default'}.\n")
    print("| | |\n|---|---|")
    print(f"| start-up to READY=1 | {many.startup:.2f} s wall, {startup_cpu:.1f} s CPU (all threads) |")
    for took, rtts, cpu in reloads:
        print(f"| reload (SIGHUP to READY=1) | {took:.2f} s wall, {cpu:.1f} s CPU; ping answered {len(rtts)} "
              f"times during it, slowest {max(rtts or [0]) * 1000:.0f} ms |")
    print(f"| RSS after load | {rss['VmRSS'] / 1024:.0f} MiB (peak {rss['VmHWM'] / 1024:.0f} MiB) |")
    print(f"| RSS after reload | {rss2['VmRSS'] / 1024:.0f} MiB (peak {rss2['VmHWM'] / 1024:.0f} MiB) |")
    print(f"| OpenSSL secure heap | {st['pgpdecd_secure_heap_used_bytes'] / 2**20:.1f} MiB used of "
          f"{st['pgpdecd_secure_heap_bytes'] / 2**20:.0f} MiB |")
    print(f"| libgcrypt secure memory | {secmem_line} |")
    print("\n4 KiB messages, `pgpdecd-client bench`, median of "
          f"{a.rounds} rounds (1 key and {len(rows)} keys alternating):\n")
    print(f"| message to | -c | 1 key msg/s | {len(rows)} keys msg/s | ratio | 1 key P50 ms | {len(rows)} keys P50 ms |")
    print("|---|---|---|---|---|---|---|")
    for kind in sorted(msgs):
        for c in (1, 50):
            o = res[(kind, c, "one")]
            m = res[(kind, c, "many")]
            ro, rm = statistics.median(x[0] for x in o), statistics.median(x[0] for x in m)
            lo, lm = statistics.median(x[1] for x in o), statistics.median(x[1] for x in m)
            what = {"none": "no key held (ENOKEY)"}.get(kind, f"{kind} key #{targets.get(kind, (0,))[0]}")
            print(f"| {what} | {c} | {ro:.0f} | {rm:.0f} | {rm / ro:.2f} | {lo:.3f} | {lm:.3f} |")
    subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"])
    if a.keep:
        log("kept", work)
    else:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
